package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"

	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin/delegate"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// delegatedGenerate serves the daemon's POST /v1/generate: the render of
// argocd-image-resolver-generate, done here with Helm, Kustomize and the registry
// cache already loaded, answered as generate would have printed it.
func delegatedGenerate(batch resolve.Batch, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req delegate.Request
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
			http.Error(w, "malformed request: "+err.Error(), http.StatusBadRequest)
			return
		}
		if !filepath.IsAbs(req.Dir) {
			http.Error(w, "dir must be absolute", http.StatusBadRequest)
			return
		}
		var stderr bytes.Buffer
		resp := delegate.Response{}
		env, err := plugin.EnvFromEnviron(req.Environ)
		if err == nil {
			var report *renderReport
			resp.Stdout, report, err = renderApp(r.Context(), req.Dir, env, batch)
			writeNotes(&stderr, report)
		}
		if err != nil {
			resp.Stdout, resp.ExitCode = nil, 1
			fmt.Fprintf(&stderr, "argocd-image-resolver: %v\n", oneLine(err))
			log.Info("render failed", "dir", req.Dir)
		}
		resp.Stderr = stderr.String()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(resp) //nolint:errcheck // the client sees a broken answer and renders itself
	})
}
