package render

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

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
	if err := os.Symlink(outside, filepath.Join(linked, "shared", "link.yaml")); err != nil {
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
		{name: "symlink out", dir: filepath.Join(linked, "app"), root: linked, file: "../shared/link.yaml", errHas: "symbolic link"},
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
