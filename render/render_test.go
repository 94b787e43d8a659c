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

func TestRenderKustomizeOverlayNamespaceAndTag(t *testing.T) {
	r, err := Render(context.Background(), filepath.Join(appsDir, "kustomize-overlay/overlay"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := find(t, r.Objects, "Deployment", "api")
	if ns := d.GetNamespace(); ns != "shop" {
		t.Errorf("namespace %q", ns)
	}
	// The base writes 1.0.0; the overlay's images transformer changed it.
	base, err := Render(context.Background(), filepath.Join(appsDir, "kustomize-overlay/base"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	bu, _ := FindImages(base.Objects)
	ou, _ := FindImages(r.Objects)
	if len(bu) != 1 || len(ou) != 1 || bu[0].Image.Tag != "1.0.0" || ou[0].Image.Tag == bu[0].Image.Tag {
		t.Errorf("base %v overlay %v", bu, ou)
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

func TestRenderHelmCapabilitiesAndOrder(t *testing.T) {
	dir := "testdata/charts/caps"
	tests := []struct {
		name          string
		opts          Options
		kubeVersion   string
		hasMonitoring string
		objects       []string
		releaseNS     string
		stsImage      string
		configMapName string
	}{
		{
			name:          "defaults",
			opts:          Options{},
			kubeVersion:   "v1.20.0", // helm's default capabilities
			hasMonitoring: "false",
			releaseNS:     "default",
			configMapName: "caps-caps",
			objects: []string{
				"CustomResourceDefinition/widgets.demo.local",
				"ConfigMap/caps-caps", "Service/caps", "Deployment/caps", "StatefulSet/caps-sub",
				"Job/caps-migrate",
			},
			stsImage: "registry.demo.local/demo/worker:2026.01.12",
		},
		{
			name: "argo cd capabilities",
			opts: Options{AppName: "argocd_shop", Namespace: "shop", KubeVersion: "v1.31.2",
				APIVersions: []string{"monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor"}},
			kubeVersion:   "v1.31.2",
			hasMonitoring: "true",
			releaseNS:     "shop",
			configMapName: "shop-caps",
			objects: []string{
				"CustomResourceDefinition/widgets.demo.local",
				"ConfigMap/shop-caps", "Service/shop", "Deployment/shop", "StatefulSet/shop-sub",
				"ServiceMonitor/shop",
				"Job/shop-migrate",
			},
			stsImage: "registry.demo.local/demo/worker:2026.01.12",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Render(context.Background(), dir, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(r.Objects); !slices.Equal(got, tt.objects) {
				t.Fatalf("objects %v, want %v", got, tt.objects)
			}
			cm := find(t, r.Objects, "ConfigMap", tt.configMapName)
			if v := str(t, cm, "data", "kubeVersion"); v != tt.kubeVersion {
				t.Errorf("kubeVersion %q, want %q", v, tt.kubeVersion)
			}
			if v := str(t, cm, "data", "hasMonitoring"); v != tt.hasMonitoring {
				t.Errorf("hasMonitoring %q, want %q", v, tt.hasMonitoring)
			}
			if v := cm.GetNamespace(); v != tt.releaseNS {
				t.Errorf("namespace %q, want %q", v, tt.releaseNS)
			}
			uses, err := FindImages(r.Objects)
			if err != nil {
				t.Fatal(err)
			}
			var sts string
			for _, u := range uses {
				if u.Object.Kind == "StatefulSet" {
					sts = u.Raw
				}
			}
			if sts != tt.stsImage {
				t.Errorf("vendored subchart image %q, want %q", sts, tt.stsImage)
			}
		})
	}
}

func TestRenderHelmValuesPrecedence(t *testing.T) {
	dir := "testdata/charts/caps"
	tests := []struct {
		name string
		opts Options
		want map[string]string // data key -> value
	}{
		{"chart only", Options{}, map[string]string{"chart": "chart", "file": "chart", "inline": "chart", "param": "chart"}},
		{"values file", Options{ValuesFiles: []string{"values-prod.yaml"}},
			map[string]string{"chart": "chart", "file": "file", "inline": "file", "param": "file"}},
		{"inline wins over files", Options{ValuesFiles: []string{"values-prod.yaml"}, Values: "layer:\n  inline: inline\n  param: inline\n"},
			map[string]string{"chart": "chart", "file": "file", "inline": "inline", "param": "inline"}},
		{"parameters win over all", Options{ValuesFiles: []string{"values-prod.yaml"}, Values: "layer: {inline: inline, param: inline}",
			HelmParameters: map[string]string{"layer.param": "a,b", "list": "{x,y}"}},
			map[string]string{"chart": "chart", "file": "file", "inline": "inline", "param": "a,b", "list": "[x y]"}},
		{"values file order", Options{ValuesFiles: []string{"values-prod.yaml", "values.yaml"}},
			map[string]string{"file": "chart"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Render(context.Background(), dir, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			cm := find(t, r.Objects, "ConfigMap", "caps-caps")
			for k, want := range tt.want {
				if got := str(t, cm, "data", k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestRenderHelmValuesFilesBoundary(t *testing.T) {
	repo, err := filepath.Abs("testdata/repo")
	if err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(repo, "app")
	tmp := t.TempDir()
	outside := filepath.Join(tmp, "outside.yaml")
	if err := os.WriteFile(outside, []byte("layer: {file: outside}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A copy of the repository with a symbolic link leading out of it.
	linked := filepath.Join(tmp, "repo")
	copyDir(t, repo, linked)
	if err := os.Symlink(outside, filepath.Join(linked, "app", "link.yaml")); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, dir, root, file string
		want, errHas          string
	}{
		{name: "inside chart", dir: app, root: repo, file: "values.yaml", want: "chart"},
		{name: "up to repo root", dir: app, root: repo, file: "../shared/values.yaml", want: "shared"},
		{name: "no root: chart dir is the boundary", dir: app, file: "../shared/values.yaml", errHas: "leaves the repository"},
		{name: "escape", dir: app, root: repo, file: "../../charts/caps/values.yaml", errHas: "leaves the repository"},
		{name: "absolute", dir: app, root: repo, file: outside, errHas: "invalid path"},
		{name: "remote", dir: app, root: repo, file: "https://example.com/values.yaml", errHas: "remote values files"},
		{name: "missing", dir: app, root: repo, file: "nope.yaml", errHas: "nope.yaml"},
		{name: "symlink out", dir: filepath.Join(linked, "app"), root: linked, file: "link.yaml", errHas: "symbolic link"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Render(context.Background(), tt.dir, Options{RepoRoot: tt.root, ValuesFiles: []string{tt.file}})
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) || !strings.Contains(err.Error(), "values file") {
					t.Fatalf("err %v, want one containing %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := str(t, find(t, r.Objects, "ConfigMap", "app"), "data", "file"); got != tt.want {
				t.Errorf("file = %q, want %q", got, tt.want)
			}
		})
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
		{name: "bad parameter", dir: "testdata/charts/caps", opts: Options{HelmParameters: map[string]string{"a[": "1"}}, has: []string{"helm parameter", "a["}},
		{name: "kustomize helmCharts", dir: "testdata/kustomize/helmcharts", unsupported: true,
			has: []string{"kustomization.yaml", "helmCharts", "does not run Helm inside Kustomize"}},
		{name: "kustomize helmCharts in a base", dir: "testdata/kustomize/nested-helm/overlay", unsupported: true,
			has: []string{"../base/kustomization.yaml", "helmCharts"}},
		{name: "kustomize exec plugin", dir: "testdata/kustomize/execplugin", unsupported: true,
			has: []string{"plugins are disabled", "SedTransformer"}},
		{name: "kustomize KRM function", dir: "testdata/kustomize/krmfn", unsupported: true,
			has: []string{"plugins are disabled", "Generator"}},
		{name: "yaml does not parse", dir: "testdata/dir-bad", has: []string{"broken.yaml", "document 2"}},
		{name: "not an object", dir: "testdata/dir-notobject", has: []string{"values.yaml", "document 1", "kind is missing"}},
		{name: "no such directory", dir: "testdata/nope", has: []string{"application directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
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

func TestRenderKustomizeLegacyOrder(t *testing.T) {
	r, err := Render(context.Background(), "testdata/kustomize/sorted", Options{})
	if err != nil {
		t.Fatal(err)
	}
	// kustomize build's default (legacy) order: Namespace first, then Service, then Deployment.
	want := []string{"Namespace/ns", "Service/s", "Deployment/d"}
	if got := ids(r.Objects); !slices.Equal(got, want) {
		t.Errorf("objects %v, want %v", got, want)
	}
}

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
				r, err := Render(context.Background(), filepath.Join(appsDir, dir), Options{AppName: "app", Namespace: "ns"})
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
