package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
// cache already loaded, answered as generate would have printed it, as a generate
// stream (api.GenerateStreamType): the manifests are copied to the caller as the
// render writes them (from its worker), never held whole here, then the trailer
// says stderr and the exit status. Every image is resolved before the first byte;
// a render that fails after it (its worker died or was stopped while writing)
// says so in the trailer. A caller that reads nothing of the answer for
// socketLimits.Write is cut, and its render stopped.
//
// before, when not nil, is called before each render (a hard refresh's
// revalidation); after, when not nil, is given every render that got as far as a
// report, and its error (the refresh loop's bookkeeping, pins to commit).
func GenerateHandler(p *pipeline.Pipeline, before func(context.Context, *plugin.Env), after func(*plugin.Env, *pipeline.Report, error), log *slog.Logger) http.Handler {
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
		out := newGenerateStream(w)
		var stderr bytes.Buffer
		resp := api.GenerateResponse{}
		env, err := plugin.EnvFromEnviron(req.Environ)
		if err == nil && before != nil {
			before(r.Context(), env)
		}
		if err == nil {
			err = renderTo(r.Context(), p, req.Dir, env, after, out, &stderr)
		}
		if err != nil {
			msg := OneLine(err)
			resp.ExitCode = 1
			fmt.Fprintf(&stderr, "argocd-image-resolver: %s\n", msg)
			app := ""
			if env != nil {
				app = env.AppName
			}
			log.Info("render failed", "app", app, "dir", req.Dir, "err", msg)
		}
		resp.Stderr = stderr.String()
		out.end(resp) //nolint:errcheck // a caller gone or cut: nothing to tell
	})
}

// renderTo renders the app in dir and writes its manifests to out, its notes to
// stderr; after is told of the render (its report and error) once it is written.
func renderTo(ctx context.Context, p *pipeline.Pipeline, dir string, env *plugin.Env, after func(*plugin.Env, *pipeline.Report, error), out io.Writer, stderr io.Writer) error {
	prepared, report, err := p.Prepare(ctx, dir, env)
	if err == nil {
		_, err = prepared.WriteTo(out)
		prepared.Close()
	}
	if after != nil && report != nil {
		after(env, report, err) // may add notes
	}
	report.WriteNotes(stderr)
	return err
}

// OneLine joins a multi-line error into one line, as Argo CD shows it in the app's
// condition.
func OneLine(err error) string {
	return oneline.Fold(strings.ReplaceAll(err.Error(), "\n", " ; "))
}
