package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// installBinaries puts executable copies into a directory as Kubernetes makes an
// emptyDir (mode 0777), replacing what is there, and names a source it cannot read.
func TestInstallBinaries(t *testing.T) {
	src := t.TempDir()
	sources := map[string]string{}
	for name, content := range map[string]string{binaryName: "full binary", generateBinaryName: "thin client"} {
		p := filepath.Join(src, name+"-src")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		sources[name] = p
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, binaryName), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := installBinaries(dir, sources, &out); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{binaryName: "full binary", generateBinaryName: "thin client"} {
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v, %v; want 0755", name, fi.Mode(), err)
		}
		if !strings.Contains(out.String(), "installed "+p) {
			t.Errorf("output %q does not name %s", out.String(), p)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%d files in the directory, want the 2 binaries (no temporary file left)", len(entries))
	}

	sources[generateBinaryName] = filepath.Join(src, "missing")
	if err := installBinaries(dir, sources, &out); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing source: %v, want an error naming it", err)
	}
	if err := installBinaries(filepath.Join(dir, binaryName), sources, &out); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a file as target: %v", err)
	}
}

// The built binary copies itself and the thin client beside it; the copies run.
func TestInstallCommand(t *testing.T) {
	dir := t.TempDir()
	r := runIn(t, ".", nil, binary, "install", dir)
	if r.code != 0 {
		t.Fatalf("install: exit %d: %s", r.code, r.stderr)
	}
	for _, name := range []string{binaryName, generateBinaryName} {
		want, _ := os.ReadFile(filepath.Join(filepath.Dir(binary), name))
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: not a copy of the built binary (%v)", name, err)
		}
	}
	if v := runIn(t, ".", nil, filepath.Join(dir, binaryName), "version"); v.code != 0 || !strings.Contains(v.stdout, testVersion) {
		t.Errorf("the installed copy: exit %d %q", v.code, v.stdout)
	}
	if bad := runIn(t, ".", nil, binary, "install"); bad.code != 2 {
		t.Errorf("install without a directory: exit %d, want 2", bad.code)
	}
}
