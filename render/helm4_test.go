package render

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// writeTree writes files (writeFiles) into root and returns root.
func writeTree(t *testing.T, root string, files map[string]string) string {
	t.Helper()
	writeFiles(t, root, files)
	return root
}

// renderedData renders dir inside root and returns ConfigMap name -> its data.v.
func renderedData(t *testing.T, root, dir string, opts Options) (map[string]string, error) {
	t.Helper()
	opts.RepoRoot = root
	r, err := Render(context.Background(), filepath.Join(root, dir), opts)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, o := range r.Objects {
		v, _ := o.GetString("data.v")
		out[o.GetName()] = v
	}
	return out, nil
}

const configMapTemplate = `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Chart.Name }}
data:
  v: {{ toJson .Values | quote }}
`

func TestRenderHelmLocalDependency(t *testing.T) {
	lib := map[string]string{
		"charts-src/lib/Chart.yaml":             "apiVersion: v2\nname: lib\nversion: 1.2.3\n",
		"charts-src/lib/values.yaml":            "greeting: hello\n",
		"charts-src/lib/templates/cm.yaml":      configMapTemplate,
		"charts-src/lib/.helmignore":            "ignored.txt\n",
		"charts-src/lib/ignored.txt":            "not part of the chart",
		"charts-src/lib/templates/_helpers.tpl": `{{ define "lib.x" }}x{{ end }}`,
	}
	tests := []struct {
		name, repository, version string
		want                      map[string]string
		err                       []string
	}{
		{name: "built from its directory", repository: "file://../../charts-src/lib", version: "~1.2.0",
			want: map[string]string{"app": `{"lib":{"global":{},"greeting":"hi"}}`, "lib": `{"global":{},"greeting":"hi"}`}},
		{name: "version outside the constraint", repository: "file://../../charts-src/lib", version: "^2.0.0",
			err: []string{"lib", "1.2.3", "^2.0.0"}},
		{name: "leaves the repository", repository: "file://../../../elsewhere", version: "*",
			err: []string{"file://../../../elsewhere", "leaves the repository"}},
		{name: "absolute path", repository: "file:///etc", version: "*",
			err: []string{"file:///etc", "absolute path"}},
		{name: "no such directory", repository: "file://../nope", version: "*",
			err: []string{"dependency lib", "nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{
				"apps/app/Chart.yaml": "apiVersion: v2\nname: app\nversion: 0.1.0\ndependencies:\n- name: lib\n  version: \"" +
					tt.version + "\"\n  repository: " + tt.repository + "\n",
				"apps/app/values.yaml":       "lib:\n  greeting: hi\n",
				"apps/app/templates/cm.yaml": configMapTemplate,
			}
			for k, v := range lib {
				files[k] = v
			}
			root := writeTree(t, t.TempDir(), files)
			got, err := renderedData(t, root, "apps/app", Options{})
			if tt.err != nil {
				if err == nil {
					t.Fatalf("rendered %v, want an error", got)
				}
				for _, s := range tt.err {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s: %s, want %s", k, got[k], v)
				}
			}
		})
	}
}

// A chart's values.schema.json may not make a render fetch a URL or read a file of the
// sidecar: the reference is refused, and the server is never asked.
func TestRenderHelmSchemaReferencesStayLocal(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Write([]byte(`{"type":"object"}`))
	}))
	defer srv.Close()
	outside := filepath.Join(t.TempDir(), "secret.json")
	if err := os.WriteFile(outside, []byte(`{"enum":["s3cr3t"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, schema, values string
		err                  []string
	}{
		{name: "http reference", schema: `{"$ref":"` + srv.URL + `/schema.json"}`, err: []string{srv.URL, "reads no schema from the network"}},
		{name: "file reference", schema: `{"properties":{"v":{"$ref":"file://` + outside + `"}}}`, err: []string{outside}},
		{name: "urn reference is permissive", schema: `{"$ref":"urn:example:any"}`},
		{name: "local definitions", schema: `{"$defs":{"n":{"type":"integer"}},"properties":{"replicas":{"$ref":"#/$defs/n"}}}`},
		{name: "a value against the schema", schema: `{"properties":{"replicas":{"type":"integer"}}}`, values: "replicas: two\n",
			err: []string{"values don't meet the specifications of the schema(s)", "app:", "replicas"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			values := tt.values
			if values == "" {
				values = "replicas: 2\n"
			}
			root := writeTree(t, t.TempDir(), map[string]string{
				"app/Chart.yaml":         "apiVersion: v2\nname: app\nversion: 0.1.0\n",
				"app/values.yaml":        values,
				"app/values.schema.json": tt.schema,
				"app/templates/cm.yaml":  configMapTemplate,
			})
			_, err := renderedData(t, root, "app", Options{})
			switch {
			case tt.err == nil && err != nil:
				t.Fatal(err)
			case tt.err != nil && err == nil:
				t.Fatal("rendered, want an error")
			}
			for _, s := range tt.err {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
			if strings.Contains(errString(err), "s3cr3t") {
				t.Errorf("the error prints the outside file's content: %v", err)
			}
		})
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the schema's URL was requested %d times, want 0", n)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The plugin renders as Helm 4 (Argo CD v3.5 and later), where Helm 3 differs
// (docs/rendering.md): null values of a parent chart; and the Kubernetes version as Argo
// CD v3.5 and later pass it (1.31 is 1.31.0, which Helm 3 printed for 1.31 too). The
// expectations are helm 4.3.1's own output for these charts.
func TestRenderHelmAsHelm4(t *testing.T) {
	root := writeTree(t, t.TempDir(), map[string]string{
		"app/Chart.yaml":                   "apiVersion: v2\nname: app\nversion: 0.1.0\ndependencies:\n- name: sub\n  version: 0.1.0\n",
		"app/values.yaml":                  "own: 1\nownNull: null\nsub:\n  removedByParent: null\n  nested:\n    k: null\n",
		"app/templates/cm.yaml":            configMapTemplate,
		"app/templates/caps.yaml":          "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: caps\ndata:\n  v: {{ .Capabilities.KubeVersion.Version | quote }}\n",
		"app/charts/sub/Chart.yaml":        "apiVersion: v2\nname: sub\nversion: 0.1.0\n",
		"app/charts/sub/values.yaml":       "removedByParent: default\nkept: default\nnested:\n  k: default\n  j: default\nownNull: null\n",
		"app/charts/sub/templates/cm.yaml": configMapTemplate,
	})
	got, err := renderedData(t, root, "app", Options{KubeVersion: "1.31"})
	if err != nil {
		t.Fatal(err)
	}
	sub := `{"global":{},"kept":"default","nested":{"j":"default","k":"default"},"removedByParent":"default"}`
	for name, want := range map[string]string{"sub": sub, "app": `{"own":1,"sub":` + sub + `}`, "caps": "v1.31.0"} {
		if got[name] != want {
			t.Errorf("%s: %s\nwant (helm 4.3.1) %s", name, got[name], want)
		}
	}
}
