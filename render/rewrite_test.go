package render

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestSetImageKeepsEverythingElse(t *testing.T) {
	src := `# Source: web/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web # the front end
  labels: {app: web}
spec:
  template:
    spec:
      nodeSelector:
        kubernetes.io/arch: arm64
      containers:
        - name: web
          # The resolver rewrites this tag at render time.
          image: "registry.demo.local/demo/web:1.0.0" # pinned by CI
          args: ["--port", "8080"]
        - name: side
          image: registry.demo.local:5000/demo/side:1
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  ports:
  - port: 80
`
	tests := []struct {
		name    string
		set     map[string]string // container -> new reference
		annots  map[string]string
		replace map[string]string // expected substitutions in the output
	}{
		{
			name: "tag only, quoting and comments kept",
			set:  map[string]string{"web": "registry.demo.local/demo/web:1.2.0"},
			replace: map[string]string{
				`image: "registry.demo.local/demo/web:1.0.0" # pinned by CI`: `image: "registry.demo.local/demo/web:1.2.0" # pinned by CI`,
			},
		},
		{
			name: "digest and annotation",
			set: map[string]string{
				"side": "registry.demo.local:5000/demo/side:2@sha256:" + strings.Repeat("ab", 32),
			},
			annots: map[string]string{"argocd-image-resolver.io/resolved": "side=registry.demo.local:5000/demo/side:2"},
			replace: map[string]string{
				"image: registry.demo.local:5000/demo/side:1": "image: registry.demo.local:5000/demo/side:2@sha256:" + strings.Repeat("ab", 32),
				"  labels: {app: web}\n":                      "  labels: {app: web}\n  annotations:\n    argocd-image-resolver.io/resolved: 'side=registry.demo.local:5000/demo/side:2'\n",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := mustParse(t, src)
			var before bytes.Buffer
			if err := Write(&before, objs); err != nil {
				t.Fatal(err)
			}
			uses, err := FindImages(objs)
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range uses {
				if ref, ok := tt.set[u.Container]; ok {
					if err := SetImage(u, ref); err != nil {
						t.Fatal(err)
					}
					for k, v := range tt.annots {
						if err := Annotate(u.ObjectNode(), k, v); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			want := before.String()
			for from, to := range tt.replace {
				if !strings.Contains(want, from) {
					t.Fatalf("test bug: %q not in\n%s", from, want)
				}
				want = strings.Replace(want, from, to, 1)
			}
			var after bytes.Buffer
			if err := Write(&after, objs); err != nil {
				t.Fatal(err)
			}
			if after.String() != want {
				t.Errorf("got:\n%s\nwant:\n%s", after.String(), want)
			}
			// The rewritten objects still parse and carry the new images.
			again, err := FindImages(mustParse(t, after.String()))
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range again {
				if ref, ok := tt.set[u.Container]; ok && u.Raw != ref {
					t.Errorf("%s: %s, want %s", u.Path, u.Raw, ref)
				}
			}
		})
	}
}

func TestSetImageErrors(t *testing.T) {
	if err := SetImage(ImageUse{}, "nginx"); err == nil {
		t.Error("zero ImageUse accepted")
	}
	uses, err := FindImages(mustParse(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: nginx}]}\n"))
	if err != nil || len(uses) != 1 {
		t.Fatal(uses, err)
	}
	if err := SetImage(uses[0], "not a reference"); err == nil || !strings.Contains(err.Error(), "spec.containers[c].image") {
		t.Errorf("err %v", err)
	}
	if err := Annotate(nil, "k", "v"); err == nil {
		t.Error("nil object accepted")
	}
}

func TestSetImageThroughAlias(t *testing.T) {
	objs := mustParse(t, `apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
    - {name: a, image: &img nginx:1}
    - {name: b, image: *img}
`)
	uses, err := FindImages(objs)
	if err != nil || len(uses) != 2 || uses[1].Raw != "nginx:1" {
		t.Fatal(uses, err)
	}
	if err := SetImage(uses[1], "nginx:2"); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Write(&b, objs); err != nil {
		t.Fatal(err)
	}
	again, err := FindImages(mustParse(t, b.String()))
	if err != nil || len(again) != 2 || again[0].Raw != "nginx:1" || again[1].Raw != "nginx:2" || !strings.Contains(b.String(), "&img") {
		t.Errorf("got\n%s", b.String())
	}
}

func TestWriteStream(t *testing.T) {
	r, err := Render(context.Background(), "../testdata/apps/helm-web", Options{AppName: "shop", Namespace: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Write(&b, r.Objects); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"# Source: web/templates/service.yaml\napiVersion: v1\nkind: Service\n",
		"\n---\n# Source: web/templates/deployment.yaml\napiVersion: apps/v1\nkind: Deployment\n",
		// Lists are printed at their parent's indentation, as kubectl and kustomize do.
		"      containers:\n      - name: web\n        # The resolver rewrites this tag at render time.\n        image: \"registry.demo.local/demo/web:1.0.0\"\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "---\n") != 1 {
		t.Errorf("want one separator:\n%s", out)
	}
	var empty bytes.Buffer
	if err := Write(&empty, nil); err != nil || empty.Len() != 0 {
		t.Errorf("empty stream: %q %v", empty.String(), err)
	}
}
