package migrate

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"gopkg.in/yaml.v3"

	"github.com/argocd-image-resolver/argocd-image-resolver/pipeline"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func day(n int) time.Time { return t0.Add(time.Duration(n) * 24 * time.Hour) }

// migratedApp is a migrated Application's plugin parameters as Argo CD passes
// them to the plugin.
type migratedApp struct {
	name   string
	params plugin.Parameters
	json   string // ARGOCD_APP_PARAMETERS
}

// migratedApps reads the Applications of a migration's output and turns their
// plugin parameters into what generate reads: the ARGOCD_APP_PARAMETERS JSON Argo
// CD builds (keys sorted, one object per parameter), parsed by the plugin.
func migratedApps(t *testing.T, out []byte) []migratedApp {
	t.Helper()
	var apps []migratedApp
	dec := yaml.NewDecoder(strings.NewReader(string(out)))
	for {
		var obj struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
			Spec struct {
				Source struct {
					Plugin *struct {
						Name       string           `yaml:"name"`
						Parameters []map[string]any `yaml:"parameters"`
					} `yaml:"plugin"`
				} `yaml:"source"`
			} `yaml:"spec"`
		}
		if err := dec.Decode(&obj); err != nil {
			break
		}
		if obj.Kind != "Application" || obj.Spec.Source.Plugin == nil {
			continue
		}
		if obj.Spec.Source.Plugin.Name != DefaultPluginName {
			t.Errorf("%s names plugin %q", obj.Metadata.Name, obj.Spec.Source.Plugin.Name)
		}
		ps := obj.Spec.Source.Plugin.Parameters
		sort.SliceStable(ps, func(i, j int) bool { return ps[i]["name"].(string) < ps[j]["name"].(string) })
		js, err := json.Marshal(ps)
		if err != nil {
			t.Fatal(err)
		}
		params, err := plugin.ParseParameters(string(js))
		if err != nil {
			t.Fatalf("%s: the plugin refuses the parameters %s: %v", obj.Metadata.Name, js, err)
		}
		apps = append(apps, migratedApp{obj.Metadata.Name, params, string(js)})
	}
	return apps
}

// resolveApp reads an app's policy as generate does (plugin.LoadPolicy, no policy
// file) and resolves every image against the registry: alias -> tag[@digest].
func resolveApp(t *testing.T, params plugin.Parameters) map[string]string {
	t.Helper()
	pol, err := plugin.LoadPolicy(t.TempDir(), params)
	if err != nil {
		t.Fatalf("the plugin refuses the migrated policy: %v", err)
	}
	reg, err := resolve.NewRemote(resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	r := resolve.NewResolver(reg)
	got := map[string]string{}
	for _, ip := range pol.Images {
		res, err := r.Resolve(context.Background(), ip.Repo, ip.Written, ip.Policy)
		if err != nil {
			got[ip.Alias] = "error: " + err.Error()
			continue
		}
		got[ip.Alias] = res.Tag
		if res.Digest != "" && ip.Policy.Strategy() == resolve.Digest {
			got[ip.Alias] += "@" + res.Digest
		}
	}
	return got
}

// setParam replaces (or adds) a string parameter.
func setParam(ps plugin.Parameters, name, v string) plugin.Parameters {
	out := slices.Clone(ps)
	for i := range out {
		if out[i].Name == name {
			out[i] = plugin.Parameter{Name: name, Kind: plugin.KindString, String: v}
			return out
		}
	}
	return append(out, plugin.Parameter{Name: name, Kind: plugin.KindString, String: v})
}

// Round trips: argocd-image-updater configurations from its documentation,
// migrated, read by the plugin as generate reads them and resolved against a
// registry, pick the tag argocd-image-updater picks by its documented rules.
func TestRoundTrip(t *testing.T) {
	s := rt.New(t)
	single := func(repo string, tags ...string) {
		for i, tag := range tags {
			s.Push(t, repo, tag, rt.Image(day(i), "linux/amd64", rt.WithSeed(repo+tag)))
		}
	}
	// docs/configuration/migration.md: nginx=nginx:1.20 with allow-tags
	// regexp:^[0-9]+\.[0-9]+$ and ignore-tags latest,dev (semver: 1.20 within
	// 1.20, the other tags filtered); redis=redis:6.2 with update-strategy latest
	// (the tag is ignored: the newest build, 7.0.0).
	single("nginx", "1.19", "1.20", "1.21", "1.20.3", "latest", "dev")
	s.Push(t, "redis", "6.2.1", rt.Image(day(1), "linux/amd64", rt.WithSeed("r1")))
	s.Push(t, "redis", "6.2.7", rt.Image(day(2), "linux/amd64", rt.WithSeed("r2")))
	s.Push(t, "redis", "7.0.0", rt.Image(day(3), "linux/amd64", rt.WithSeed("r3")))
	// docs/configuration/images.md: "Always deploy the latest build"
	// (yourtool, latest, allow-tags regexp:^v1.0.0-[0-9a-zA-Z]+$): the newest
	// build among v1.0.0-<hash>; "Following an image's patch branch" (~1.19).
	s.Push(t, "yourorg/yourimage", "v1.0.0-abc", rt.Image(day(1), "linux/amd64", rt.WithSeed("y1")))
	s.Push(t, "yourorg/yourimage", "v1.0.0-def", rt.Image(day(3), "linux/amd64", rt.WithSeed("y2")))
	s.Push(t, "yourorg/yourimage", "v1.1.0-xyz", rt.Image(day(5), "linux/amd64", rt.WithSeed("y3")))
	s.Push(t, "yourorg/yourimage", "latest", rt.Image(day(6), "linux/amd64", rt.WithSeed("y4")))
	single("patch", "1.19.1", "1.19.10", "1.20.0", "1.19.2")
	// name (alphabetical) with a tag in image-list, which it ignores.
	single("calver", "2024.01.15", "2024.02.01", "2023.12.31", "2024.02.01-rc1")
	// digest follows the tag.
	single("app", "stable", "1.0.0")
	// newest-build, RegExp: (any case), a tag in image-list it ignores.
	s.Push(t, "main", "main-1", rt.Image(day(1), "linux/amd64", rt.WithSeed("m1")))
	s.Push(t, "main", "main-2", rt.Image(day(2), "linux/amd64", rt.WithSeed("m2")))
	s.Push(t, "main", "dev-3", rt.Image(day(3), "linux/amd64", rt.WithSeed("m3")))
	// platforms linux/arm/v7,linux/arm/v8: 1.1.0 has only arm/v7.
	s.PushIndex(t, "arm", "1.1.0", rt.Index(day(2), []string{"linux/arm/v7"}))
	s.PushIndex(t, "arm", "1.0.0", rt.Index(day(1), []string{"linux/arm/v7", "linux/arm/v8"}))

	reg := s.Host
	input := strings.NewReplacer("REG", reg).Replace(`
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: production-app
  annotations:
    argocd-image-updater.argoproj.io/image-list: nginx=REG/nginx:1.20,redis=REG/redis:6.2
    argocd-image-updater.argoproj.io/update-strategy: semver
    argocd-image-updater.argoproj.io/nginx.allow-tags: regexp:^[0-9]+\.[0-9]+$
    argocd-image-updater.argoproj.io/nginx.ignore-tags: latest,dev
    argocd-image-updater.argoproj.io/redis.update-strategy: latest
spec:
  source: {repoURL: https://git.example.com/a.git, path: production}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: images-doc
  annotations:
    argocd-image-updater.argoproj.io/image-list: yourtool=REG/yourorg/yourimage, REG/patch:~1.19, calver=REG/calver:2024.01.15, app=REG/app:stable, main=REG/main:latest
    argocd-image-updater.argoproj.io/yourtool.update-strategy: latest
    argocd-image-updater.argoproj.io/yourtool.allow-tags: regexp:^v1.0.0-[0-9a-zA-Z]+$
    argocd-image-updater.argoproj.io/calver.update-strategy: name
    argocd-image-updater.argoproj.io/calver.ignore-tags: "*-rc*"
    argocd-image-updater.argoproj.io/app.update-strategy: digest
    argocd-image-updater.argoproj.io/main.update-strategy: Newest-Build
    argocd-image-updater.argoproj.io/main.allow-tags: RegExp:^main-
spec:
  source: {repoURL: https://git.example.com/a.git, path: images}
---
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: arm, namespace: argocd}
spec:
  namespace: argocd
  applicationRefs:
    - namePattern: "arm-*"
      images:
        - alias: arm
          imageName: REG/arm
          commonUpdateSettings:
            platforms: [linux/arm/v7, linux/arm/v8]
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: arm-app, namespace: argocd}
spec:
  source: {repoURL: https://git.example.com/a.git, path: arm}
`)
	res, err := Migrate([]Input{{Name: "roundtrip", Data: []byte(input)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	apps := migratedApps(t, res.Manifests)
	// What argocd-image-updater picks, by its documented rules.
	want := map[string]map[string]string{
		"production-app": {"nginx": "1.20", "redis": "7.0.0"},
		"images-doc": {"yourtool": "v1.0.0-def", "patch": "1.19.10", "calver": "2024.02.01",
			"app": "stable@" + s.Digest(t, "app", "stable"), "main": "main-2"},
		// Here every platform is required: the tag with both (see below for
		// argocd-image-updater's "any one" and the spelling that keeps it).
		"arm-app": {"arm": "1.0.0"},
	}
	if len(apps) != len(want) {
		t.Fatalf("migrated apps %v, want %d", apps, len(want))
	}
	for _, a := range apps {
		got := resolveApp(t, a.params)
		for alias, tag := range want[a.name] {
			if got[alias] != tag {
				t.Errorf("%s: alias %s resolved to %q, want %q (argocd-image-updater's choice)", a.name, alias, got[alias], tag)
			}
		}
		if len(got) != len(want[a.name]) {
			t.Errorf("%s: resolved %v, want %v", a.name, got, want[a.name])
		}
		if a.name == "arm-app" {
			// The offered spelling keeps argocd-image-updater's "any one of them".
			var offer string
			for _, o := range res.Objects {
				for _, f := range o.Findings {
					if o.Object == "Application argocd/arm-app" && f.Kind == Differs && strings.Contains(f.Text, "write linux/arm ") {
						offer = "linux/arm"
					}
				}
			}
			if offer == "" {
				t.Fatalf("arm-app: no differs finding offering linux/arm: %+v", res.Objects)
			}
			if got := resolveApp(t, setParam(a.params, "arm.platforms", offer))["arm"]; got != "1.1.0" {
				t.Errorf("arm-app with the offered platforms %s: %q, want 1.1.0 (argocd-image-updater's choice)", offer, got)
			}
		}
	}
	if res.Lost != 0 {
		t.Errorf("lost %d: %+v", res.Lost, res.Objects)
	}
}

// pluginPolicy reads a migrated app's policy as generate does.
func pluginPolicy(t *testing.T, a migratedApp) (*plugin.AppPolicy, error) {
	t.Helper()
	return plugin.LoadPolicy(t.TempDir(), a.params)
}

// The whole generate path: a migrated Application's parameters, passed as Argo CD
// passes them (ARGOCD_APP_PARAMETERS), render a plain-YAML app with the tags
// argocd-image-updater would have written.
func TestRoundTripGenerate(t *testing.T) {
	s := rt.New(t)
	for i, tag := range []string{"1.19", "1.20", "1.21", "1.20.3", "latest", "dev"} {
		s.Push(t, "nginx", tag, rt.Image(day(i), "linux/amd64", rt.WithSeed("n"+tag)))
	}
	s.Push(t, "yourorg/yourimage", "v1.0.0-abc", rt.Image(day(1), "linux/amd64", rt.WithSeed("y1")))
	s.Push(t, "yourorg/yourimage", "v1.0.0-def", rt.Image(day(3), "linux/amd64", rt.WithSeed("y2")))
	s.Push(t, "yourorg/yourimage", "v1.1.0-xyz", rt.Image(day(5), "linux/amd64", rt.WithSeed("y3")))
	input := strings.NewReplacer("REG", s.Host).Replace(`
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: web
  annotations:
    argocd-image-updater.argoproj.io/image-list: nginx=REG/nginx:1.20, yourtool=REG/yourorg/yourimage:v1.0.0-abc
    argocd-image-updater.argoproj.io/nginx.allow-tags: Regexp:^[0-9]+\.[0-9]+$
    argocd-image-updater.argoproj.io/nginx.ignore-tags: latest,dev
    argocd-image-updater.argoproj.io/yourtool.update-strategy: latest
    argocd-image-updater.argoproj.io/yourtool.allow-tags: regexp:^v1.0.0-[0-9a-zA-Z]+$
spec:
  source: {repoURL: https://git.example.com/a.git, path: web}
`)
	res, err := Migrate([]Input{{Name: "generate", Data: []byte(input)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	apps := migratedApps(t, res.Manifests)
	if len(apps) != 1 {
		t.Fatalf("apps %+v", apps)
	}
	dir := t.TempDir()
	deploy := strings.NewReplacer("REG", s.Host).Replace(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: REG/nginx:1.19
        - name: tool
          image: REG/yourorg/yourimage:v1.0.0-abc
`)
	if err := os.WriteFile(filepath.Join(dir, "deploy.yaml"), []byte(deploy), 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := plugin.EnvFromEnviron([]string{"ARGOCD_APP_NAME=web", "ARGOCD_APP_NAMESPACE=default", "ARGOCD_APP_PARAMETERS=" + apps[0].json})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := resolve.NewRemote(resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := pipeline.New(resolve.NewResolver(reg), pipeline.Settings{}).Render(context.Background(), dir, env)
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	for _, want := range []string{"image: " + s.Host + "/nginx:1.20\n", "image: " + s.Host + "/yourorg/yourimage:v1.0.0-def\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("generate output lacks %q:\n%s", want, out)
		}
	}
}
