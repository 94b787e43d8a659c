// Command argocd-image-resolver-generate is the CMP generate command of plugin.yaml.
// It hands the render to the daemon in the same sidecar, which has Helm, Kustomize and
// the registry cache loaded, and prints its answer; this binary links none of them, so
// a render does not pay their start-up. If the daemon cannot render, it runs
// `argocd-image-resolver generate` in its place, which renders in-process (and says
// on stderr that the daemon was unreachable).
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

	"github.com/argocd-image-resolver/argocd-image-resolver/plugin/delegate"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.Getwd()
	if err == nil {
		var resp *delegate.Response
		resp, err = delegate.Call(ctx, delegate.SocketFromEnv(),
			delegate.Request{Dir: dir, Environ: delegate.RenderEnviron(os.Environ())})
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
	// Replace this process: same stdio, environment, directory and process group, so
	// Argo CD's deadline handling applies to the render as before.
	if err := syscall.Exec(full, []string{"argocd-image-resolver", "generate"}, os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "argocd-image-resolver-generate: run %s: %v\n", full, err)
		os.Exit(1)
	}
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
