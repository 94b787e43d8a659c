package render

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// cm is a ConfigMap manifest named name.
func cm(name string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n"
}

func TestRenderDirectory(t *testing.T) {
	r, err := Render(context.Background(), "testdata/dir", Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The app directory's own files only (nested/ and .hidden/ are not read), as
	// Argo CD without directory.recurse.
	want := []string{"ConfigMap/a1", "ConfigMap/a2", "ConfigMap/b", "ConfigMap/c1", "ConfigMap/c2"}
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

// TestRenderDirectoryOptions: recurse, include and exclude select files as Argo
// CD's directory source does (reposerver/repository/repository.go,
// getPotentiallyValidManifestFile): patterns are gobwas/glob with no separator,
// matched against the path relative to the app directory; exclude wins; hidden
// files and directories are read like any other.
func TestRenderDirectoryOptions(t *testing.T) {
	// testdata/dir: .hidden/h.yaml (hidden), a.yaml (a1, a2), b.json (b), c.yml (a
	// List: c1, c2), nested/d.yaml (d), nested/deeper/e.yaml (e), and files that
	// are no manifests (README.md, the policy and pins files).
	all := []string{"hidden", "a1", "a2", "b", "c1", "c2", "d", "e"}
	tests := []struct {
		name string
		opts DirectoryOptions
		want []string
	}{
		{"default: top level only", DirectoryOptions{}, []string{"a1", "a2", "b", "c1", "c2"}},
		{"recurse: every file, hidden ones too, in walk order", DirectoryOptions{Recurse: true}, all},
		{"include without recurse stays at the top", DirectoryOptions{Include: "nested/*"}, nil},
		{"include a subdirectory", DirectoryOptions{Recurse: true, Include: "nested/*"}, []string{"d", "e"}},
		{"* crosses directories", DirectoryOptions{Recurse: true, Include: "*.yaml"}, []string{"hidden", "a1", "a2", "d", "e"}},
		{"**/ needs a directory", DirectoryOptions{Recurse: true, Include: "**/*.yaml"}, []string{"hidden", "d", "e"}},
		{"brace alternatives", DirectoryOptions{Include: "{a.yaml,b.json}"}, []string{"a1", "a2", "b"}},
		{"brace alternatives, recursing", DirectoryOptions{Recurse: true, Include: "{*.yml,*.json}"}, []string{"b", "c1", "c2"}},
		{"exclude", DirectoryOptions{Recurse: true, Exclude: "{a.yaml,nested/*}"}, []string{"hidden", "b", "c1", "c2"}},
		{"exclude hidden files", DirectoryOptions{Recurse: true, Exclude: ".*"}, []string{"a1", "a2", "b", "c1", "c2", "d", "e"}},
		{"exclude wins over include", DirectoryOptions{Recurse: true, Include: "*.yaml", Exclude: "nested/deeper/*"}, []string{"hidden", "a1", "a2", "d"}},
		{"exclude everything", DirectoryOptions{Recurse: true, Exclude: "*"}, nil},
		{"include nothing", DirectoryOptions{Include: "nothing.yaml"}, nil},
		{"include a file that is no manifest name", DirectoryOptions{Include: "README.md"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Render(context.Background(), "testdata/dir", Options{Directory: tt.opts})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range r.Objects {
				got = append(got, o.GetName())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("objects %q, want %q", got, tt.want)
			}
		})
	}
}

// TestRenderDirectoryOrder: files come in the order of filepath.Walk, as Argo CD
// reads them: each directory's entries sorted by name, a subdirectory's files where
// its name sorts ("a" before "a-b.yaml"), which is not the order of the sorted paths
// ("a-b.yaml" before "a/z.yaml").
func TestRenderDirectoryOrder(t *testing.T) {
	app := t.TempDir()
	writeFiles(t, app, map[string]string{
		"b.yaml": cm("b"), "a.yaml": cm("a"), "a-b.yaml": cm("a-b"), "A.yaml": cm("A"),
		"a/z.yaml": cm("a/z") + "---\n" + cm("a/z2"), "a/y/x.json": `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a/y/x"}}`,
	})
	r, err := Render(context.Background(), app, Options{Directory: DirectoryOptions{Recurse: true}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range r.Objects {
		got = append(got, o.GetName())
	}
	if want := []string{"A", "a/y/x", "a/z", "a/z2", "a-b", "a", "b"}; !slices.Equal(got, want) {
		t.Errorf("objects %q, want %q", got, want)
	}
}

// TestRenderDirectoryFiles: which files are read and how, as Argo CD's
// getObjsFromYAMLOrJSON reads them.
func TestRenderDirectoryFiles(t *testing.T) {
	tests := []struct {
		name   string
		files  map[string]string
		opts   DirectoryOptions
		want   []string // object names
		errHas []string // an error with these; nil: no error
		unsupp bool     // the error is ErrUnsupported
	}{
		{name: "manifest names are case-sensitive", files: map[string]string{
			"a.YAML": cm("upper"), "b.yaml.txt": cm("txt"), "c": cm("none"), ".d.yaml": cm("hidden"), "e.yml": cm("yml")},
			want: []string{"hidden", "yml"}},
		{name: "YAML that is no manifest is skipped", files: map[string]string{
			"irrelevant.yaml": "some: [irrelevant, yaml]\n", "relevant.yaml": cm("relevant"),
			"values.yaml": "replicaCount: 2\nimage:\n  tag: 1.0.0\n", "scalar.yaml": "just text\n",
			"list.yml": "- a\n- b\n", "bad-syntax.yaml": "a: [b\n"},
			want: []string{"relevant"}},
		{name: "our own files are skipped", files: map[string]string{
			PolicyFileName: "images:\n  web:\n    image: nginx  # apiVersion: kind: metadata:\n",
			PinsFileName:   "pins: {}  # apiVersion: kind: metadata:\n", "a.yaml": cm("a")},
			want: []string{"a"}},
		{name: "a file that looks like a manifest is an error", files: map[string]string{
			"bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n"},
			errHas: []string{"bad.yaml", "document 1"}},
		{name: "no kind, but apiVersion, kind and metadata mentioned", files: map[string]string{
			"bad.yaml": "apiVersion: v1\nmetadata:\n  name: x\n# kind: ConfigMap\n"},
			errHas: []string{"bad.yaml", "document 1", "kind is missing"}},
		{name: "an object then a document that is none", files: map[string]string{
			"partial.yaml": "apiVersion: v1\nkind: ConfigMap\n---\ninvalid:\n"},
			errHas: []string{"partial.yaml", "document 2", "kind is missing"}},
		{name: "empty documents are dropped", files: map[string]string{
			"has-empty.yaml": "---\n" + cm("x") + "---\n---\n# only a comment\n---\nnull\n"},
			want: []string{"x"}},
		{name: "an empty List counts as an object", files: map[string]string{
			"l.yaml": "apiVersion: v1\nkind: List\nitems: []\n---\nnot: an object\n"},
			errHas: []string{"l.yaml", "document 2"}},
		{name: "Argo CD's skip marker", files: map[string]string{
			"bad.yaml":  "# +argocd:skip-file-rendering\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ x }}\n",
			"skip.json": `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"skipped","annotations":{"a":"+argocd:skip-file-rendering"}}}`,
			"ok.yaml":   cm("ok")},
			want: []string{"ok"}},
		{name: "one JSON object", files: map[string]string{"valid.json": `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j"}}`},
			want: []string{"j"}},
		{name: "a JSON List is flattened", files: map[string]string{
			"list.json": `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"j1"}},{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"j2"}}]}`},
			want: []string{"j1", "j2"}},
		{name: "two JSON objects in one file", files: map[string]string{
			"list.json": "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\"}\n{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\"}\n"},
			errHas: []string{"list.json", "more than one JSON value"}},
		{name: "invalid JSON", files: map[string]string{"invalid.json": "[\n"}, errHas: []string{"invalid.json", "JSON value 1", "unexpected EOF"}},
		{name: "JSON with something after the object", files: map[string]string{"trail.json": `{"apiVersion":"v1","kind":"ConfigMap"} x`},
			errHas: []string{"trail.json", "more than one JSON value"}},
		{name: "empty JSON file", files: map[string]string{"empty.json": ""}, errHas: []string{"empty.json", "no JSON object"}},
		{name: "JSON that is no object", files: map[string]string{"package.json": `{"name": "web", "version": "1.0.0"}`},
			errHas: []string{"package.json", "kind is missing"}},
		{name: "Jsonnet is refused", files: map[string]string{"app.jsonnet": "{}", "a.yaml": cm("a")},
			errHas: []string{"app.jsonnet", "Jsonnet is not evaluated", "directory-exclude"}, unsupp: true},
		{name: "Jsonnet excluded", files: map[string]string{"app.jsonnet": "{}", "a.yaml": cm("a")},
			opts: DirectoryOptions{Exclude: "*.jsonnet"}, want: []string{"a"}},
		{name: "Jsonnet in a subdirectory not read", files: map[string]string{"lib/app.jsonnet": "{}", "a.yaml": cm("a")},
			want: []string{"a"}},
		{name: "bad include pattern", files: map[string]string{"a.yaml": cm("a")}, opts: DirectoryOptions{Include: "{a.yaml"},
			errHas: []string{"directory include pattern", `"{a.yaml"`, "unclosed {"}},
		{name: "bad exclude pattern", files: map[string]string{"a.yaml": cm("a")}, opts: DirectoryOptions{Exclude: "[a"},
			errHas: []string{"directory exclude pattern", `"[a"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := t.TempDir()
			writeFiles(t, app, tt.files)
			r, err := Render(context.Background(), app, Options{Directory: tt.opts})
			if tt.errHas != nil {
				checkErr(t, err, tt.errHas...)
				if got := errors.Is(err, ErrUnsupported); got != tt.unsupp {
					t.Errorf("errors.Is(ErrUnsupported) = %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range r.Objects {
				got = append(got, o.GetName())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("objects %q, want %q", got, tt.want)
			}
		})
	}
}

func checkErr(t *testing.T, err error, has ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one with %q", has)
	}
	for _, h := range has {
		if !strings.Contains(err.Error(), h) {
			t.Errorf("error %q does not contain %q", err, h)
		}
	}
}

func TestRenderDirectorySymlinks(t *testing.T) {
	tmp := t.TempDir()
	app := filepath.Join(tmp, "app")
	writeFiles(t, app, map[string]string{"real/a.yaml": cm("a")})
	writeFiles(t, tmp, map[string]string{"outside.yaml": cm("outside")})
	for link, target := range map[string]string{"link.yaml": "real/a.yaml", "linkdir": "real", "dir.yaml": "real", "dangling.yaml": "nope.yaml"} {
		if err := os.Symlink(target, filepath.Join(app, link)); err != nil {
			t.Fatal(err)
		}
	}
	names := func(opts DirectoryOptions) []string {
		t.Helper()
		r, err := Render(context.Background(), app, Options{Directory: opts})
		if err != nil {
			t.Fatal(err)
		}
		return ids(r.Objects)
	}
	// link.yaml is followed; links to directories (linkdir, dir.yaml) are not walked
	// into; the dangling link is skipped.
	if got := names(DirectoryOptions{}); !slices.Equal(got, []string{"ConfigMap/a"}) {
		t.Errorf("objects %v", got)
	}
	if got := names(DirectoryOptions{Recurse: true}); !slices.Equal(got, []string{"ConfigMap/a", "ConfigMap/a"}) {
		t.Errorf("recursing: objects %v", got)
	}
	// A link out of the app directory in a subdirectory that is not read is not
	// looked at; at the top it is an error, excluded or not (Argo CD checks links
	// before the patterns).
	if err := os.Symlink("../../outside.yaml", filepath.Join(app, "real", "out.yaml")); err != nil {
		t.Fatal(err)
	}
	names(DirectoryOptions{})
	_, err := Render(context.Background(), app, Options{Directory: DirectoryOptions{Recurse: true}})
	checkErr(t, err, "real/out.yaml", "outside the application directory")
	if err := os.Symlink("../outside.yaml", filepath.Join(app, "out.yaml")); err != nil {
		t.Fatal(err)
	}
	_, err = Render(context.Background(), app, Options{Directory: DirectoryOptions{Exclude: "out.yaml"}})
	checkErr(t, err, "out.yaml", "outside the application directory")
}

// A special file is refused where the render would read it, and not looked at in a
// subdirectory it does not walk.
func TestRenderDirectorySpecialFile(t *testing.T) {
	app := t.TempDir()
	writeFiles(t, app, map[string]string{"a.yaml": cm("a")})
	if err := os.Mkdir(filepath.Join(app, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(app, "sub", "pipe.yaml"), 0o644); err != nil {
		t.Skip("no named pipes here:", err)
	}
	if _, err := Render(context.Background(), app, Options{}); err != nil {
		t.Fatal(err)
	}
	_, err := Render(context.Background(), app, Options{Directory: DirectoryOptions{Recurse: true}})
	checkErr(t, err, "sub/pipe.yaml", "not a regular file")
}
