package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/oneline"
	"github.com/argocd-image-resolver/argocd-image-resolver/pipeline"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
)

// GenerateHandler serves POST /v1/generate: the render of
// argocd-image-resolver-generate, done here with Helm, Kustomize and the registry
// cache already loaded, answered as generate would have printed it. after, when
// not nil, is given every render that got as far as a report, and its error (the
// refresh loop's bookkeeping, pins to commit).
func GenerateHandler(p *pipeline.Pipeline, after func(*plugin.Env, *pipeline.Report, error), log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.GenerateRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
			http.Error(w, "malformed request: "+err.Error(), http.StatusBadRequest)
			return
		}
		if !filepath.IsAbs(req.Dir) {
			http.Error(w, "dir must be absolute", http.StatusBadRequest)
			return
		}
		var stderr bytes.Buffer
		resp := api.GenerateResponse{}
		env, err := plugin.EnvFromEnviron(req.Environ)
		if err == nil {
			var report *pipeline.Report
			resp.Stdout, report, err = p.Render(r.Context(), req.Dir, env)
			if after != nil && report != nil {
				after(env, report, err) // may add notes
			}
			report.WriteNotes(&stderr)
		}
		if err != nil {
			msg := OneLine(err)
			resp.Stdout, resp.ExitCode = nil, 1
			fmt.Fprintf(&stderr, "argocd-image-resolver: %s\n", msg)
			app := ""
			if env != nil {
				app = env.AppName
			}
			log.Info("render failed", "app", app, "dir", req.Dir, "err", msg)
		}
		resp.Stderr = stderr.String()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(resp) //nolint:errcheck // the client sees a broken answer and renders itself
	})
}

// OneLine joins a multi-line error into one line, as Argo CD shows it in the app's
// condition.
func OneLine(err error) string {
	return oneline.Fold(strings.ReplaceAll(err.Error(), "\n", " ; "))
}
