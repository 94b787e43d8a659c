package pipeline

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzRewrite: a manifest of a directory app, whatever its YAML, renders through
// the pipeline (with a fake registry) to manifests or to an error; the same input
// renders the same way twice; a rendered output renders again to itself (a rewrite
// is idempotent). Seeds: testdata/fuzz/FuzzRewrite/* at the top of the
// repository, one manifest per file, and the f.Add calls below.
func FuzzRewrite(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "fuzz", "FuzzRewrite", "*"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seeds in testdata/fuzz/FuzzRewrite: %v", err)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add(deployment)
	f.Add(customResource)
	f.Add("")
	f.Add("---\n---\n")
	f.Add("a: &a [*a]\n")
	env := envWith(&testing.T{}, "image-list", "web=ghcr.io/org/web:~1, nginx=docker.io/library/nginx")
	settings := Settings{Timeout: 5 * time.Second}
	render := func(t *testing.T, manifest string) ([]byte, error) {
		t.Helper()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "app.yaml"), []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		out, _, err := New(&fakeBatch{answer: resolved("1.4.2", false)}, settings).Render(context.Background(), dir, env)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("render took %s", d)
		}
		return out, err
	}
	f.Fuzz(func(t *testing.T, manifest string) {
		out, err := render(t, manifest)
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatalf("empty error")
			}
			if len(out) != 0 {
				t.Fatalf("output and an error: %v", err)
			}
			return
		}
		out2, err2 := render(t, manifest)
		if err2 != nil || !bytes.Equal(out, out2) {
			t.Fatalf("two renders differ: %v\n%s\n---\n%s", err2, out, out2)
		}
		again, err := render(t, string(out))
		if err != nil {
			t.Fatalf("the output does not render again: %v\n%s", err, out)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("a rewrite is not idempotent:\n%s\n--- then\n%s", out, again)
		}
	})
}
