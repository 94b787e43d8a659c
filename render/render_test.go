package render

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

const appsDir = "../testdata/apps"

// moduleRoot is the repository root around the test apps (the boundary of renders).
var moduleRoot, _ = filepath.Abs("..")

// ids lists objects as "Kind/name".
func ids(objs []*kyaml.RNode) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	return out
}

func find(t *testing.T, objs []*kyaml.RNode, kind, name string) *kyaml.RNode {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s/%s in %v", kind, name, ids(objs))
	return nil
}

func str(t *testing.T, o *kyaml.RNode, path ...string) string {
	t.Helper()
	n, err := o.Pipe(kyaml.Lookup(path...))
	if err != nil || n == nil {
		t.Fatalf("%s/%s: no field %v (%v)", o.GetKind(), o.GetName(), path, err)
	}
	return n.YNode().Value
}

func TestRenderSampleApps(t *testing.T) {
	tests := []struct {
		dir     string
		opts    Options
		kind    SourceKind
		objects []string
		images  []string // path=raw
	}{
		{
			dir:     "helm-web",
			opts:    Options{AppName: "shop", Namespace: "shop"},
			kind:    SourceHelm,
			objects: []string{"Service/shop-web", "Deployment/shop-web"},
			images:  []string{"spec.template.spec.containers[web].image=registry.demo.local/demo/web:1.0.0"},
		},
		{
			dir:     "kustomize-overlay/overlay",
			kind:    SourceKustomize,
			objects: []string{"Service/api", "Deployment/api"},
			images:  []string{"spec.template.spec.containers[api].image=registry.demo.local/demo/api:1.1.0"},
		},
		{
			dir:     "plain-cron",
			kind:    SourceDirectory,
			objects: []string{"CronJob/nightly-report", "Deployment/web", "Service/web"},
			images: []string{
				"spec.jobTemplate.spec.template.spec.containers[report].image=registry.demo.local/demo/batch:1",
				"spec.template.spec.containers[web].image=registry.demo.local/demo/web:1.0.0",
				"spec.template.spec.initContainers[migrate].image=registry.demo.local/demo/web:1.0.0",
			},
		},
		{
			dir:     "arm64-pinned",
			kind:    SourceDirectory,
			objects: []string{"Deployment/web-arm"},
			images:  []string{"spec.template.spec.containers[web].image=registry.demo.local/demo/web:1.0.0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			if tt.opts.RepoRoot == "" {
				tt.opts.RepoRoot = moduleRoot
			}
			r, err := Render(context.Background(), filepath.Join(appsDir, tt.dir), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if r.Kind != tt.kind {
				t.Errorf("kind %s, want %s", r.Kind, tt.kind)
			}
			if got := ids(r.Objects); !slices.Equal(got, tt.objects) {
				t.Errorf("objects %v, want %v", got, tt.objects)
			}
			uses, err := FindImages(r.Objects)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, u := range uses {
				got = append(got, u.Path+"="+u.Raw)
			}
			if !slices.Equal(got, tt.images) {
				t.Errorf("images %v, want %v", got, tt.images)
			}
		})
	}
}

func TestRenderArm64PinnedPlatforms(t *testing.T) {
	r, err := Render(context.Background(), filepath.Join(appsDir, "arm64-pinned"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	uses, err := FindImages(r.Objects)
	if err != nil {
		t.Fatal(err)
	}
	if len(uses) != 1 || platformList(uses[0].Platforms) != "linux/arm64" {
		t.Fatalf("uses %+v", uses)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name, dir   string
		opts        Options
		unsupported bool
		has         []string
	}{
		{name: "helm dependency not vendored", dir: "testdata/charts/missing-dep", unsupported: true,
			has: []string{"missing-dep", "(redis)", "does not download charts", "helm dependency build", "charts/"}},
		{name: "bad kube version", dir: "testdata/charts/caps", opts: Options{KubeVersion: "one.two"}, has: []string{"kube version", "one.two"}},
		{name: "bad release name", dir: "testdata/charts/caps", opts: Options{AppName: "Bad.Name!"}, has: []string{"release name", "Bad.Name!"}},
		{name: "bad inline values", dir: "testdata/charts/caps", opts: Options{Values: "a: [1"}, has: []string{"values (inline YAML)"}},
		{name: "bad parameter", dir: "testdata/charts/caps", opts: Options{HelmParameters: map[string]string{"a[x]": "1"}}, has: []string{"helm parameter", "a[x]", "parsing index"}},
		{name: "kustomize helmCharts", dir: "testdata/kustomize/helmcharts", unsupported: true,
			has: []string{"kustomization.yaml", "helmCharts", "does not run Helm inside Kustomize"}},
		{name: "kustomize helmCharts in a base", dir: "testdata/kustomize/nested-helm/overlay", unsupported: true,
			has: []string{"../base/kustomization.yaml", "helmCharts"}},
		{name: "kustomize exec plugin", dir: "testdata/kustomize/execplugin", unsupported: true,
			has: []string{"plugins are disabled", "SedTransformer"}},
		{name: "kustomize KRM function", dir: "testdata/kustomize/krmfn", unsupported: true,
			has: []string{"plugins are disabled", "Generator"}},
		{name: "yaml does not parse", dir: "testdata/dir-bad", has: []string{"broken.yaml", "document 2"}},
		{name: "no such directory", dir: "testdata/nope", has: []string{"application directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.opts.RepoRoot == "" {
				tt.opts.RepoRoot = moduleRoot
			}
			_, err := Render(context.Background(), tt.dir, tt.opts)
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			for _, h := range tt.has {
				if !strings.Contains(err.Error(), h) {
					t.Errorf("error %q does not contain %q", err, h)
				}
			}
			if got := errors.Is(err, ErrUnsupported); got != tt.unsupported {
				t.Errorf("errors.Is(ErrUnsupported) = %v", got)
			}
		})
	}
}

func TestRenderCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, dir := range []string{"testdata/charts/caps", "testdata/kustomize/sorted", "testdata/dir"} {
		if _, err := Render(ctx, dir, Options{}); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: err %v", dir, err)
		}
	}
}

func TestRenderDeterministic(t *testing.T) {
	for _, dir := range []string{"helm-web", "kustomize-overlay/overlay", "plain-cron", "arm64-pinned"} {
		t.Run(dir, func(t *testing.T) {
			var outs [2]string
			for i := range outs {
				r, err := Render(context.Background(), filepath.Join(appsDir, dir), Options{AppName: "app", Namespace: "ns", RepoRoot: moduleRoot})
				if err != nil {
					t.Fatal(err)
				}
				var b bytes.Buffer
				if err := Write(&b, r.Objects); err != nil {
					t.Fatal(err)
				}
				outs[i] = b.String()
			}
			if outs[0] != outs[1] || outs[0] == "" {
				t.Errorf("outputs differ or are empty:\n%s\n---- vs ----\n%s", outs[0], outs[1])
			}
		})
	}
}
