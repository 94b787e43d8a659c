package migrate

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Whatever the input, migrate does not panic, gives the same output twice, and
// every Application it rewrites takes parameters the plugin accepts.
func FuzzMigrate(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(testdata, "*.yaml"))
	for _, file := range files {
		if strings.HasSuffix(file, ".golden.yaml") {
			continue
		}
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		"", "---", "a: [", "kind: Application\napiVersion: argoproj.io/v1alpha1\n",
		"apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: x, annotations: {argocd-image-updater.argoproj.io/image-list: 'a=nginx, b=nginx', argocd-image-updater.argoproj.io/b.update-strategy: name}}\nspec: {source: {path: p}}\n",
		"apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: x, annotations: {argocd-image-updater.argoproj.io/image-list: '=:,a.b=/x'}}\nspec: {source: {path: p}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		res, err := Migrate([]Input{{Name: "fuzz", Data: in}}, Options{})
		if err != nil {
			return
		}
		again, err := Migrate([]Input{{Name: "fuzz", Data: in}}, Options{})
		if err != nil || !bytes.Equal(res.Stream(), again.Stream()) {
			t.Fatalf("second run differs: %v", err)
		}
		for _, a := range migratedApps(t, res.Manifests) {
			if _, err := pluginPolicy(t, a); err != nil {
				t.Fatalf("%s: the plugin refuses the migrated parameters %+v: %v", a.name, a.params, err)
			}
		}
	})
}

// The annotations' values, fuzzed one by one inside a well-formed Application:
// whatever they hold, the migrated parameters are ones the plugin accepts.
func FuzzMigrateAnnotations(f *testing.F) {
	f.Add("web=ghcr.io/o/web:~1.2, api=ghcr.io/o/api", "web", "latest", "RegExp:^1", "*-rc*, regexp:x", "linux/arm/v7,linux/arm64", "env:X", "git", "helmvalues:/apps/a/values.yaml", "main:x", "image.tag")
	f.Add("a=nginx, b=nginx, c.d=x/y:latest", "b", "name", "any", "[", "Linux/AMD64", "secret:a/b#c", "git:secret:a/b", "kustomization:.", ":new", "")
	f.Add("web=nginx", "web", "", "", "", "", "", "git", "helmvalues:values.yaml", "", "a..b")
	f.Add("a/b=nginx@sha256:00", "a_b", "digest", "glob:*", "", "linux", "ext:rel", "argocd", "helmvalues", "bad..branch", "a..b")
	f.Fuzz(func(t *testing.T, list, alias, strategy, allow, ignore, platforms, pullSecret, method, target, branch, helmTag string) {
		ann := map[string]string{
			"image-list": list, "update-strategy": strategy, alias + ".update-strategy": strategy,
			alias + ".allow-tags": allow, "allow-tags": allow, alias + ".ignore-tags": ignore,
			alias + ".platforms": platforms, "platforms": platforms, alias + ".pull-secret": pullSecret,
			"write-back-method": method, "write-back-target": target, "git-branch": branch,
			alias + ".helm.image-tag": helmTag,
		}
		var b strings.Builder
		b.WriteString("apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: app\n  annotations:\n")
		for _, k := range sortedKeys(ann) {
			b.WriteString("    " + strconvQuote(AnnotationPrefix+k) + ": " + strconvQuote(ann[k]) + "\n")
		}
		b.WriteString("spec:\n  source:\n    repoURL: https://git.example.com/r.git\n    path: apps/a\n    targetRevision: main\n")
		res, err := Migrate([]Input{{Name: "fuzz", Data: []byte(b.String())}}, Options{})
		if err != nil {
			return // a value YAML cannot hold as written (a quoted string always parses, but be lenient)
		}
		for _, a := range migratedApps(t, res.Manifests) {
			if _, err := pluginPolicy(t, a); err != nil {
				t.Fatalf("the plugin refuses the migrated parameters %+v: %v\ninput:\n%s", a.params, err, b.String())
			}
		}
	})
}

// strconvQuote quotes s as a YAML double-quoted scalar (JSON's quoting is YAML's).
func strconvQuote(s string) string {
	js, _ := json.Marshal(s)
	return string(js)
}
