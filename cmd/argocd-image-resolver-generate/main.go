// Command argocd-image-resolver-generate is the CMP generate command of plugin.yaml.
// It hands the render to the daemon in the same sidecar, which has Helm, Kustomize and
// the registry cache loaded, and prints its answer; this binary links none of them, so
// a render does not pay their start-up. If the daemon cannot render, it says so in
// one stderr line and runs `argocd-image-resolver generate` in its place, which
// renders in-process and resolves directly, with the same configuration.
//
// The manifests the daemon streams are spooled to a temporary file and printed
// once the daemon says the render succeeded: nothing is printed on stdout for a
// render that failed.
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
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/buildinfo"
)

// Stamped at build time as for argocd-image-resolver (make build, make image, the
// Dockerfile): -ldflags "-X main.version=v0.3.0 -X main.commit=0123abc".
var (
	version = ""
	commit  = ""
)

var usage = `Usage: argocd-image-resolver-generate

The generate command of plugin.yaml: Argo CD's CMP server runs it, with no
arguments, in the application's directory. It hands the render to the daemon of
the same sidecar and prints its answer: manifests on stdout, diagnostics on
stderr. If the daemon cannot render, it says so in one stderr line and runs
argocd-image-resolver generate (next to this binary, else on PATH) in its place.

To render an app by hand, run argocd-image-resolver preview DIR instead.

Environment:
  ` + api.SocketEnv + `  the daemon's socket (default ` + api.DefaultSocket + `)
  ` + api.TimeoutEnv + `  deadline of the whole delegated render (default ` + api.DefaultTimeout.String() + `)
  ARGOCD_APP_*, ARGOCD_ENV_*  what Argo CD gives a plugin, passed to the render

Arguments: none; --help prints this, --version the version.

Exit status: 0 rendered (or --help, --version answered), 1 not rendered (the
reason on stderr), 2 an argument it does not take.
`

func main() {
	if len(os.Args) > 1 {
		os.Exit(answerArgs(os.Args[1:], os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	timeout, terr := api.TimeoutFromEnv()
	if terr != nil {
		fmt.Fprintf(os.Stderr, "argocd-image-resolver-generate: %v\n", terr)
	}
	start := time.Now()
	dir, err := os.Getwd()
	if err == nil {
		var resp *api.GenerateResponse
		var spool *os.File
		resp, spool, err = delegate(ctx, dir, timeout)
		if err == nil {
			os.Exit(answer(resp, spool))
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
	switch {
	case errors.Is(err, api.ErrUnavailable) && isAbsent(err):
		// No daemon listens: the render runs in-process, with the same configuration
		// and answer, only without the daemon's cache.
		fmt.Fprintf(os.Stderr, "argocd-image-resolver-generate: daemon unreachable (%v); rendering in-process, without its cache\n", err)
	case errors.Is(err, api.ErrUnavailable):
		// A daemon that is there but did not render: say so; the in-process render
		// says the rest. It must fit in what is left of Argo CD's 90s.
		fmt.Fprintf(os.Stderr, "argocd-image-resolver-generate: %v; rendering in-process\n", err)
		if left := argoExecTimeout - time.Since(start) - 5*time.Second; left < 45*time.Second {
			environ = append(environ, api.RenderTimeoutEnv+"="+max(left, 5*time.Second).Round(time.Second).String())
		}
	case err != nil:
		// This side failed (no spool file): the render runs in-process.
		fmt.Fprintf(os.Stderr, "argocd-image-resolver-generate: %v; rendering in-process\n", err)
	}
	// Replace this process: same stdio, environment, directory and process group, so
	// Argo CD's deadline handling applies to the render as before.
	if err := syscall.Exec(full, []string{"argocd-image-resolver", "generate"}, environ); err != nil {
		fmt.Fprintf(os.Stderr, "argocd-image-resolver-generate: run %s: %v\n", full, err)
		os.Exit(1)
	}
}

// answerArgs answers a command line with arguments, which Argo CD never gives:
// --help and --version, else an error (exit status 2). Without arguments the
// render runs, as before.
func answerArgs(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 {
		switch args[0] {
		case "--help", "-help", "-h", "help":
			io.WriteString(stdout, usage) //nolint:errcheck // nothing to tell
			return 0
		case "--version", "-version", "-v", "version":
			fmt.Fprintln(stdout, buildinfo.Read("argocd-image-resolver-generate", version, commit))
			return 0
		}
	}
	what := fmt.Sprintf("argument %q", args[0])
	if len(args) > 1 {
		what = fmt.Sprintf("arguments %q", args)
	}
	fmt.Fprintf(stderr, "argocd-image-resolver-generate: unexpected %s (accepted: none, as Argo CD runs it in the app's directory; or one of --help, --version)\n", what)
	return 2
}

// delegate asks the daemon to render dir. The manifests it streams go to a spool
// file (unlinked at once), not to stdout: Argo CD reads stdout whole, and a
// render that fails once some manifests are out, or a daemon that breaks off
// (then the render runs in-process), must have printed nothing.
func delegate(ctx context.Context, dir string, timeout time.Duration) (*api.GenerateResponse, *os.File, error) {
	spool, err := os.CreateTemp("", "argocd-image-resolver-generate-*.yaml")
	if err != nil {
		return nil, nil, fmt.Errorf("no file to receive the daemon's manifests in: %w", err)
	}
	os.Remove(spool.Name()) //nolint:errcheck // the open file stays ours
	resp, err := api.CallWithin(ctx, api.SocketFromEnv(),
		api.GenerateRequest{Dir: dir, Environ: api.RenderEnviron(os.Environ())}, timeout, spool)
	if err != nil {
		spool.Close()
		return nil, nil, err
	}
	return resp, spool, nil
}

// answer prints the daemon's answer as generate would have: the manifests (only
// when it rendered), its stderr; it returns the exit status.
func answer(resp *api.GenerateResponse, spool *os.File) int {
	defer spool.Close()
	if resp.ExitCode == 0 {
		_, err := spool.Seek(0, io.SeekStart)
		if err == nil {
			_, err = io.Copy(os.Stdout, spool)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "argocd-image-resolver-generate: print the manifests: %v\n", err)
			return 1
		}
	}
	os.Stderr.WriteString(resp.Stderr)
	return resp.ExitCode
}

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
