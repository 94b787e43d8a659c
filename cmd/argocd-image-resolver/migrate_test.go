package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// migrate's exit status and outputs, as a user meets them.
func TestMigrateCommand(t *testing.T) {
	testdata, err := filepath.Abs("../../testdata/migrate")
	if err != nil {
		t.Fatal(err)
	}
	clean := filepath.Join(testdata, "migration-guide-annotations.yaml")
	lossy := filepath.Join(testdata, "differences.yaml")

	// A clean input: the stream on stdout, the registries file last, exit 0.
	r := runIn(t, ".", nil, binary, "migrate", clean)
	if r.code != 0 || !strings.Contains(r.stdout, "name: image-resolver-v1") || !strings.Contains(r.stdout, "\nregistries:\n") || r.stderr != "" {
		t.Errorf("migrate: exit %d, stderr %q, stdout %q", r.code, r.stderr, r.stdout)
	}
	want, err := os.ReadFile(filepath.Join(testdata, "migration-guide-annotations.golden.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout != string(want) {
		t.Error("migrate's stdout is not the golden output of the migrate package")
	}
	if c := runIn(t, ".", nil, binary, "migrate", "--check", clean); c.code != 0 || c.stdout != "" {
		t.Errorf("migrate --check (clean): exit %d, %q %q", c.code, c.stdout, c.stderr)
	}

	// Stdin, and --registries-out: the manifests alone on stdout.
	out := filepath.Join(t.TempDir(), "registries.yaml")
	in, err := os.ReadFile(clean)
	if err != nil {
		t.Fatal(err)
	}
	cmdIn := runStdin(t, string(in), binary, "migrate", "--registries-out", out, "-")
	if cmdIn.code != 0 || strings.Contains(cmdIn.stdout, "registries:") || !strings.HasPrefix(string(want), cmdIn.stdout) {
		t.Errorf("migrate - --registries-out: exit %d, %q", cmdIn.code, cmdIn.stdout)
	}
	r = runIn(t, ".", nil, binary, "migrate", "--registries-out", out, clean)
	regs, err := resolve.LoadRegistries(out)
	if r.code != 0 || err != nil || len(regs) != 1 || regs[0].Credentials != "secret:my-namespace/redis-secret#username" {
		t.Errorf("--registries-out: exit %d, %+v, %v", r.code, regs, err)
	}

	// Something not carried over: said on stderr; --check exits 1 and lists it.
	r = runIn(t, ".", nil, binary, "migrate", lossy)
	if r.code != 0 || !strings.Contains(r.stderr, "4 things could not be carried over") {
		t.Errorf("migrate (lossy): exit %d, stderr %q", r.code, r.stderr)
	}
	c := runIn(t, ".", nil, binary, "migrate", "--check", lossy)
	if c.code != 1 || c.stdout != "" || strings.Count(c.stderr, "Application argocd/differences: not carried over: ") != 4 {
		t.Errorf("migrate --check (lossy): exit %d, stdout %q, stderr %q", c.code, c.stdout, c.stderr)
	}

	// Bad input: exit 2, naming the input.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("kind: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"migrate", bad}, {"migrate", "--check", bad}, {"migrate", filepath.Join(t.TempDir(), "missing.yaml")}} {
		if b := runIn(t, ".", nil, binary, args...); b.code != exitInput || !strings.Contains(b.stderr, filepath.Base(args[len(args)-1])) {
			t.Errorf("%v: exit %d, stderr %q", args, b.code, b.stderr)
		}
	}
}

// runStdin runs a command with stdin.
func runStdin(t *testing.T, stdin, name string, args ...string) run {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return run{stdout.String(), stderr.String(), code}
}
