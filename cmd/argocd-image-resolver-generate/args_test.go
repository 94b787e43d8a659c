package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
)

// runArgs runs the thin binary with args and no daemon: a render would reach the
// fallback, which says "fallback ran".
func runArgs(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(thinBinary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = []string{api.SocketEnv + "=" + filepath.Join(t.TempDir(), "none.sock")}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// TestArguments: --help and --version answer on stdout with exit 0 and render
// nothing; any other argument exits 2 with a message naming it; no argument (as
// Argo CD runs it) renders, as before.
func TestArguments(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		code   int
		stdout string // contained in stdout; "" wants stdout empty
		stderr string // contained in stderr; "" wants stderr empty
	}{
		{[]string{"--help"}, 0, "Usage: argocd-image-resolver-generate\n", ""},
		{[]string{"-h"}, 0, "Exit status: 0 rendered", ""},
		{[]string{"help"}, 0, api.SocketEnv, ""},
		{[]string{"--version"}, 0, "argocd-image-resolver-generate " + thinVersion + " (commit " + thinCommit + ", go", ""},
		{[]string{"version"}, 0, "argocd-image-resolver-generate " + thinVersion, ""},
		{[]string{"--bogus"}, 2, "", `argocd-image-resolver-generate: unexpected argument "--bogus" (accepted: none`},
		{[]string{"."}, 2, "", `unexpected argument "."`},
		{[]string{"--help", "extra"}, 2, "", `unexpected arguments ["--help" "extra"]`},
		{nil, 0, "fallback ran: generate\n", "daemon unreachable"},
	} {
		stdout, stderr, code := runArgs(t, tt.args...)
		if code != tt.code {
			t.Errorf("%q: exit %d, want %d; stderr %q", tt.args, code, tt.code, stderr)
		}
		if tt.stdout == "" && stdout != "" || !strings.Contains(stdout, tt.stdout) {
			t.Errorf("%q: stdout %q, want %q", tt.args, stdout, tt.stdout)
		}
		if tt.stderr == "" && stderr != "" || !strings.Contains(stderr, tt.stderr) {
			t.Errorf("%q: stderr %q, want %q", tt.args, stderr, tt.stderr)
		}
		if tt.args != nil && strings.Contains(stdout+stderr, "fallback ran") {
			t.Errorf("%q: rendered (the fallback ran)", tt.args)
		}
	}
}

// TestStandardLibraryOnly: the thin client links the standard library and this
// module's packages that do too (DESIGN §4), none of Helm, Kustomize or a registry
// client.
func TestStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const module = "github.com/argocd-image-resolver/argocd-image-resolver/"
	allowed := []string{module + "cmd/argocd-image-resolver-generate", module + "daemon/api", module + "internal/buildinfo"}
	for _, pkg := range strings.Fields(string(out)) {
		if !strings.HasPrefix(pkg, module) {
			t.Errorf("links %s, outside the standard library", pkg)
		} else if !slices.Contains(allowed, pkg) {
			t.Errorf("links %s: check that it is standard library only, and add it here", pkg)
		}
	}
}
