package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ResolverBinaryName is the full binary (parameters, serve, the in-process render);
// GenerateBinaryName is plugin.yaml's generate command, which hands the render to the
// daemon or runs the full binary's generate in its place.
const (
	ResolverBinaryName = "argocd-image-resolver"
	GenerateBinaryName = "argocd-image-resolver-generate"
)

type buildResult struct {
	once sync.Once
	path string
	err  error
}

var builds sync.Map // package path -> *buildResult

// ResolverBinary builds ./cmd/argocd-image-resolver of the main module once per test
// run into the bin dir that Main put first on PATH, and returns its path. A build
// failure fails the calling test (and every later caller) with the compiler's output.
//
// It also builds ./cmd/argocd-image-resolver-generate, plugin.yaml's generate command,
// which hands the render to the daemon or runs this binary in its place.
func ResolverBinary(t testing.TB) string {
	t.Helper()
	buildOnce(t, "./cmd/argocd-image-resolver-generate", filepath.Join(state.binDir, GenerateBinaryName))
	return buildOnce(t, "./cmd/argocd-image-resolver", filepath.Join(state.binDir, ResolverBinaryName))
}

// DemoBinary builds ./cmd/demo of the main module once per test run (outside PATH)
// and returns its path. Running the built binary is `go run ./cmd/demo` without a
// link step per call.
func DemoBinary(t testing.TB) string {
	t.Helper()
	return buildOnce(t, "./cmd/demo", filepath.Join(state.toolDir, "demo"))
}

func buildOnce(t testing.TB, pkg, out string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, &buildResult{})
	b := v.(*buildResult)
	b.once.Do(func() {
		start := time.Now()
		b.err = goBuild(pkg, out)
		b.path = out
		if b.err == nil {
			t.Logf("built %s in %s", pkg, time.Since(start).Round(time.Millisecond))
		}
	})
	if b.err != nil {
		t.Fatalf("building %s of the main module: %v", pkg, b.err)
	}
	return b.path
}

func goBuild(pkg, out string) error {
	if _, err := os.Stat(filepath.Join(state.repoRoot, filepath.FromSlash(pkg))); err != nil {
		return fmt.Errorf("%s does not exist in %s yet: %w", pkg, state.repoRoot, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// As the image ships it (static, -trimpath: the Makefile's AS_SHIPPED), which also
	// shares the unit tests' compiled packages.
	cmd := exec.CommandContext(ctx, goTool(), "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = state.repoRoot
	// The main module builds on its own: no workspace from around it.
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	var outBuf bytes.Buffer
	cmd.Stdout = &outBuf
	cmd.Stderr = &outBuf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("CGO_ENABLED=0 go %s (in %s): %v\n%s", strings.Join(cmd.Args[1:], " "), state.repoRoot, err, strings.TrimSpace(outBuf.String()))
	}
	return nil
}

// goTool is the go command that runs these tests.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}
