// Command argocd-image-resolver-generate is the CMP generate command of plugin.yaml.
// It hands the render to the daemon in the same sidecar, which has Helm, Kustomize and
// the registry cache loaded, and prints its answer; this binary links none of them, so
// a render does not pay their start-up. If the daemon cannot render, it runs
// `argocd-image-resolver generate` in its place, which renders in-process (and says
// on stderr that the daemon was unreachable).
//
// The whole call to the daemon has a deadline, $IMAGE_RESOLVER_DELEGATE_TIMEOUT
// (default 50s, below Argo CD's 90s exec timeout): a daemon that accepts the
// connection and never answers costs that, then the render runs in-process, after
// one line on stderr.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/plugin/delegate"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	timeout, terr := delegate.TimeoutFromEnv()
	if terr != nil {
		fmt.Fprintf(os.Stderr, "argocd-image-resolver-generate: %v\n", terr)
	}
	start := time.Now()
	dir, err := os.Getwd()
	if err == nil {
		var resp *delegate.Response
		resp, err = delegate.CallWithin(ctx, delegate.SocketFromEnv(),
			delegate.Request{Dir: dir, Environ: delegate.RenderEnviron(os.Environ())}, timeout)
		if err == nil {
			os.Stdout.Write(resp.Stdout)
			os.Stderr.WriteString(resp.Stderr)
			os.Exit(resp.ExitCode)
		}
	}
	if ctx.Err() != nil {
		os.Exit(1)
	}
	stop()
	full, lerr := fullBinary()
	if lerr != nil {
		fmt.Fprintf(os.Stderr, "argocd-image-resolver-generate: %v; and %v\n", err, lerr)
		os.Exit(1)
	}
	environ := os.Environ()
	if errors.Is(err, delegate.ErrUnavailable) && !isAbsent(err) {
		// A daemon that is there but did not render: say so; the in-process render
		// says the rest. (No socket at all is the ordinary case of no daemon.) The
		// render must not ask that daemon again, and must fit in what is left of
		// Argo CD's 90s.
		fmt.Fprintf(os.Stderr, "argocd-image-resolver-generate: %v; rendering in-process\n", err)
		environ = append(environ, skipDaemonEnv+"=1")
		if left := argoExecTimeout - time.Since(start) - 5*time.Second; left < 45*time.Second {
			environ = append(environ, "IMAGE_RESOLVER_RENDER_TIMEOUT="+max(left, 5*time.Second).Round(time.Second).String())
		}
	}
	// Replace this process: same stdio, environment, directory and process group, so
	// Argo CD's deadline handling applies to the render as before.
	if err := syscall.Exec(full, []string{"argocd-image-resolver", "generate"}, environ); err != nil {
		fmt.Fprintf(os.Stderr, "argocd-image-resolver-generate: run %s: %v\n", full, err)
		os.Exit(1)
	}
}

// skipDaemonEnv tells generate not to ask the daemon (this client found it silent).
const skipDaemonEnv = "IMAGE_RESOLVER_SKIP_DAEMON"

// argoExecTimeout is Argo CD's default deadline for a plugin command.
const argoExecTimeout = 90 * time.Second

// isAbsent reports whether err is only that no daemon listens on the socket.
func isAbsent(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED)
}

// fullBinary finds argocd-image-resolver next to this executable, else on PATH.
func fullBinary() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "argocd-image-resolver")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("argocd-image-resolver")
	if err != nil {
		return "", errors.New("argocd-image-resolver is neither next to this binary nor on PATH")
	}
	return p, nil
}
