package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/pipeline"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin/delegate"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// GenerateHandler serves POST /v1/generate: the render of
// argocd-image-resolver-generate, done here with Helm, Kustomize and the registry
// cache already loaded, answered as generate would have printed it. after, when
// not nil, is given every render that got as far as a report, and its error (the
// refresh loop's bookkeeping, pins to commit).
func GenerateHandler(p *pipeline.Pipeline, after func(*plugin.Env, *pipeline.Report, error), log *slog.Logger) http.Handler {
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
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ; ")), " ")
}

// fallbackAfter is how long a batch waits for the daemon before resolving
// directly: well inside a render's deadline, beyond any warm answer.
const fallbackAfter = 15 * time.Second

// Fallback asks the daemon and, if it cannot be reached, resolves directly with the
// resolver direct builds (once), after one line on stderr. The daemon is an
// optimisation, never a single point of failure for rendering: direct is built from
// the same configuration, so both give the same answer.
type Fallback struct {
	daemon *Client
	stderr io.Writer
	direct func() (resolve.Batch, error)

	once     sync.Once
	resolver resolve.Batch
	err      error

	viaDaemon atomic.Bool   // some batch was answered by the daemon
	after     time.Duration // wait for the daemon (0: fallbackAfter)
}

// NewFallback returns a Fallback over the daemon's client.
func NewFallback(daemon *Client, direct func() (resolve.Batch, error), stderr io.Writer) *Fallback {
	return &Fallback{daemon: daemon, direct: direct, stderr: stderr}
}

// ResolveBatch implements resolve.Batch.
func (f *Fallback) ResolveBatch(ctx context.Context, app string, reqs []resolve.Request) ([]resolve.Answer, error) {
	wait := f.after
	if wait <= 0 {
		wait = fallbackAfter
	}
	dctx, cancel := context.WithTimeout(ctx, wait)
	answers, err := f.daemon.ResolveBatch(dctx, app, reqs)
	silent := errors.Is(dctx.Err(), context.DeadlineExceeded) // before cancel sets its own error
	cancel()
	if err != nil && ctx.Err() == nil && silent {
		// The daemon accepted and did not answer: as good as unreachable.
		err = fmt.Errorf("%w: %s: no answer within %s", ErrUnreachable, f.daemon.Socket(), wait)
	}
	if err == nil || !errors.Is(err, ErrUnreachable) {
		f.viaDaemon.Store(err == nil)
		return answers, err
	}
	fmt.Fprintf(f.stderr, "argocd-image-resolver: daemon unreachable (%v); resolving directly, without its cache\n", err)
	f.once.Do(func() { f.resolver, f.err = f.direct() })
	if f.err != nil {
		return nil, f.err
	}
	return f.resolver.ResolveBatch(ctx, app, reqs)
}

// Remember tells the daemon what the render of env produced, when it resolved
// through the daemon, so that its refresh loop watches the app as it watches
// delegated renders. Best effort: the render is done, and a daemon that cannot be
// told learns the app at its next render.
func (f *Fallback) Remember(ctx context.Context, env *plugin.Env, report *pipeline.Report) {
	if rd, ok := RenderOf(env, report); ok && f.viaDaemon.Load() {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_ = f.daemon.Remember(ctx, rd)
	}
}
