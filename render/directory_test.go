package render

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

func TestRenderDirectory(t *testing.T) {
	r, err := Render(context.Background(), "testdata/dir", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ConfigMap/a1", "ConfigMap/a2", "ConfigMap/b", "ConfigMap/c1", "ConfigMap/c2", "ConfigMap/d", "ConfigMap/e"}
	if got := ids(r.Objects); !slices.Equal(got, want) {
		t.Errorf("objects %v, want %v", got, want)
	}
	// JSON becomes block YAML; strings that YAML 1.1 would read as something else stay quoted.
	var b bytes.Buffer
	if err := Write(&b, []*kyaml.RNode{find(t, r.Objects, "ConfigMap", "b")}); err != nil {
		t.Fatal(err)
	}
	wantJSON := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\ndata:\n  \"yes\": \"on\"\n  \"n\": \"0777\"\n  plain: text\n"
	if b.String() != wantJSON {
		t.Errorf("JSON object as YAML:\n%s\nwant:\n%s", b.String(), wantJSON)
	}
}

func TestRenderDirectorySymlinks(t *testing.T) {
	tmp := t.TempDir()
	app := filepath.Join(tmp, "app")
	if err := os.MkdirAll(filepath.Join(app, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n"
	write := func(p, name string) {
		if err := os.WriteFile(p, []byte(strings.Replace(cm, "%s", name, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(app, "real", "a.yaml"), "a")
	write(filepath.Join(tmp, "outside.yaml"), "outside")
	if err := os.Symlink("real/a.yaml", filepath.Join(app, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(app, "linkdir")); err != nil {
		t.Fatal(err)
	}
	r, err := Render(context.Background(), app, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// link.yaml is followed; linkdir is not walked into.
	if got := ids(r.Objects); !slices.Equal(got, []string{"ConfigMap/a", "ConfigMap/a"}) {
		t.Errorf("objects %v", got)
	}
	if err := os.Symlink("../outside.yaml", filepath.Join(app, "out.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := Render(context.Background(), app, Options{}); err == nil || !strings.Contains(err.Error(), "out.yaml") {
		t.Errorf("err %v", err)
	}
}
