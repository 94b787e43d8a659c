package migrate

import (
	"errors"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// A mapping that repeats a key is refused, as the policy file refuses it: the
// error names the input, the document, the key's path, its line and column, and
// the line of the first one. Two manifests joined without "---" are the common
// case: read silently, the second's metadata would win.
func TestDuplicateKeys(t *testing.T) {
	app := func(name string) string {
		return "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: " + name +
			"\n  annotations:\n    argocd-image-updater.argoproj.io/image-list: web=ghcr.io/o/web\nspec: {source: {repoURL: r, path: " + name + "}}\n"
	}
	tests := []struct {
		name, in string
		want     string // "" for no error
	}{
		{"two files joined without ---", app("a") + app("b"),
			"apps.yaml: document 1: key apiVersion (line 8, column 1): duplicate key (first at line 1); two objects in one document? separate them with a line ---"},
		{"metadata twice", "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: a}\nspec: {}\nmetadata:\n  name: b\n",
			"apps.yaml: document 1: key metadata (line 5, column 1): duplicate key (first at line 3); two objects in one document? separate them with a line ---"},
		{"annotation twice", "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: a\n  annotations:\n    x: \"1\"\n    x: \"2\"\n",
			"apps.yaml: document 1: key metadata.annotations.x (line 7, column 5): duplicate key (first at line 6)"},
		{"in a later document: lines of the input", app("a") + "---\n" + "kind: ConfigMap\napiVersion: v1\nkind: ConfigMap\n",
			"apps.yaml: document 2: key kind (line 11, column 1): duplicate key (first at line 9); two objects in one document? separate them with a line ---"},
		{"in a list item", "apiVersion: v1\nkind: List\nitems:\n- kind: Service\n  apiVersion: v1\n  metadata: {name: s, name: t}\n",
			"apps.yaml: document 1: key items[0].metadata.name (line 6, column 23): duplicate key (first at line 6)"},
		{"in a flow mapping", "kind: ConfigMap\napiVersion: v1\ndata: {a: x, a: y}\n",
			"apps.yaml: document 1: key data.a (line 3, column 14): duplicate key (first at line 3)"},
		{"in argocd-image-updater's registries.conf", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: argocd-image-updater-config}\ndata:\n  registries.conf: |\n    registries:\n    - prefix: a.example.com\n    registries: []\n",
			"apps.yaml: document 1: ConfigMap argocd-image-updater-config data.registries.conf (lines of its text): key registries (line 3, column 1): duplicate key (first at line 1)"},
		{"the same key in two mappings", app("a") + "---\n" + app("a"), ""},
		{"merge keys", "base: &b {x: 1}\nkind: ConfigMap\napiVersion: v1\ndata:\n  <<: *b\n  y: \"2\"\nother:\n  <<: *b\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Migrate([]Input{{Name: "apps.yaml", Data: []byte(tt.in)}}, Options{})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
				return
			}
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want an *InputError", err)
			}
			if err.Error() != tt.want {
				t.Errorf("err = %q\nwant %q", err, tt.want)
			}
		})
	}
}

// kubectl get -o yaml prints the fields the API server sets; applied back they
// fail or conflict, so every object migrate prints is without them, and the
// comment above it says which were removed.
func TestServerFieldsStripped(t *testing.T) {
	server := `  resourceVersion: "123456"
  uid: 7d0c9f5e-0000-4000-8000-000000000000
  generation: 4
  creationTimestamp: "2025-01-01T00:00:00Z"
  managedFields:
  - manager: argocd-server
    operation: Update
`
	lastApplied := `    kubectl.kubernetes.io/last-applied-configuration: |
      {"apiVersion":"argoproj.io/v1alpha1","kind":"Application","metadata":{"annotations":{"argocd-image-updater.argoproj.io/image-list":"web=ghcr.io/o/web"}}}
`
	removed := []string{"resourceVersion", "uid:", "generation", "creationTimestamp", "managedFields", "last-applied-configuration", "status:", "sync:"}
	tests := []struct {
		name, in string
		comment  string   // in the comments above the object
		keep     []string // still in the output
	}{
		{"migrated Application", `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: web
  namespace: argocd
  annotations:
    argocd-image-updater.argoproj.io/image-list: web=ghcr.io/o/web
    team: web
` + lastApplied + server + `spec: {source: {repoURL: r, path: web}}
status:
  sync: {status: Synced}
`, "# note: metadata.resourceVersion, metadata.uid, metadata.generation, metadata.creationTimestamp, metadata.managedFields, annotation kubectl.kubernetes.io/last-applied-configuration, status: set by the API server",
			[]string{"name: web", "namespace: argocd", "team: web", "name: image-resolver-v1"}},
		{"Application no configuration names", `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: other
  annotations:
` + lastApplied + server + `spec: {source: {repoURL: r, path: other}}
status:
  sync: {status: Synced}
`, "# argocd-image-resolver migrate: metadata.resourceVersion, metadata.uid, metadata.generation, metadata.creationTimestamp, metadata.managedFields, annotation kubectl.kubernetes.io/last-applied-configuration, status: set by the API server",
			[]string{"name: other", "path: other"}},
		{"an item of a List", `apiVersion: v1
kind: List
metadata:
  resourceVersion: ""
items:
- apiVersion: v1
  kind: Service
  metadata:
    name: s
    resourceVersion: "9"
    uid: x
  status:
    loadBalancer: {}
  spec: {ports: [{port: 80}]}
`,
			"# argocd-image-resolver migrate: metadata.resourceVersion, metadata.uid, status: set by the API server",
			[]string{"name: s", "port: 80"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Migrate([]Input{{Name: "kubectl", Data: []byte(tt.in)}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			out := string(res.Manifests)
			var objects, comments strings.Builder
			for _, line := range strings.SplitAfter(out, "\n") {
				if strings.HasPrefix(line, "#") {
					comments.WriteString(line)
				} else {
					objects.WriteString(line)
				}
			}
			for _, f := range removed {
				if strings.Contains(objects.String(), f) {
					t.Errorf("%s left in the output:\n%s", f, out)
				}
			}
			for _, k := range tt.keep {
				if !strings.Contains(objects.String(), k) {
					t.Errorf("%s dropped from the output:\n%s", k, out)
				}
			}
			if !strings.Contains(comments.String(), tt.comment) {
				t.Errorf("comments:\n%s\nwant %q", comments.String(), tt.comment)
			}
		})
	}
	// Without server-set fields nothing is said, and an object is printed as it was.
	in := "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n  annotations: {a: b}\nspec: {ports: [{port: 80}]}\n"
	res, err := Migrate([]Input{{Name: "clean", Data: []byte(in)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Manifests), "#") {
		t.Errorf("a comment on an object without server-set fields:\n%s", res.Manifests)
	}
}

func TestStripServerFields(t *testing.T) {
	tests := []struct {
		name, in string
		removed  []string
		out      string // the object after, as YAML
	}{
		{"everything", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  uid: u\n  selfLink: /x\n  annotations:\n    kubectl.kubernetes.io/last-applied-configuration: '{}'\nstatus: {}\n",
			[]string{"metadata.uid", "metadata.selfLink", "annotation kubectl.kubernetes.io/last-applied-configuration", "status"},
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n"},
		{"other annotations kept", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  annotations:\n    a: b\n    kubectl.kubernetes.io/last-applied-configuration: '{}'\n",
			[]string{"annotation kubectl.kubernetes.io/last-applied-configuration"},
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  annotations:\n    a: b\n"},
		{"not a Kubernetes object: left as it is", "registries: []\nstatus: x\n", nil, "registries: []\nstatus: x\n"},
		{"nothing to remove", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", nil, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"},
	}
	for _, tt := range tests {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(tt.in), &n); err != nil {
			t.Fatal(err)
		}
		got := stripServerFields(n.Content[0])
		if strings.Join(got, "|") != strings.Join(tt.removed, "|") {
			t.Errorf("%s: removed %q, want %q", tt.name, got, tt.removed)
		}
		var b strings.Builder
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(n.Content[0]); err != nil {
			t.Fatal(err)
		}
		if b.String() != tt.out {
			t.Errorf("%s: after:\n%s\nwant:\n%s", tt.name, b.String(), tt.out)
		}
	}
}
