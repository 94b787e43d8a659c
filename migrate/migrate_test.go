package migrate

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"gopkg.in/yaml.v3"

	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

var update = flag.Bool("update", false, "rewrite testdata/migrate/*.golden.yaml")

const testdata = "../testdata/migrate"

func migrateFile(t *testing.T, file string) *Result {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, file))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Migrate([]Input{{Name: file, Data: b}}, Options{})
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return res
}

// The examples of argocd-image-updater's documentation, migrated: the output is
// the golden file's, byte for byte, on every run; every migrated Application's
// parameters are accepted by the plugin as generate reads them; the registries
// file is one the resolver reads.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join(testdata, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, in := range inputs {
		if strings.HasSuffix(in, ".golden.yaml") {
			continue
		}
		n++
		file := filepath.Base(in)
		t.Run(file, func(t *testing.T) {
			res := migrateFile(t, file)
			out := res.Stream()
			if again := migrateFile(t, file).Stream(); !bytes.Equal(out, again) {
				t.Fatal("two runs gave different output")
			}
			golden := filepath.Join(testdata, strings.TrimSuffix(file, ".yaml")+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./migrate -update to write it)", err)
			}
			if !bytes.Equal(out, want) {
				t.Errorf("output differs from %s (go test ./migrate -update rewrites it):\n%s", golden, out)
			}
			for _, a := range migratedApps(t, res.Manifests) {
				if _, err := pluginPolicy(t, a); err != nil {
					t.Errorf("%s: the plugin refuses the migrated parameters: %v", a.name, err)
				}
			}
			if res.Registries != nil {
				if _, err := resolve.ParseRegistries("migrated", res.Registries); err != nil {
					t.Errorf("the registries file does not load: %v\n%s", err, res.Registries)
				}
			}
		})
	}
	if n < 5 {
		t.Fatalf("%d inputs in %s", n, testdata)
	}
}

// findings returns an object's findings of kind k.
func findings(res *Result, object string, k Kind) []string {
	var out []string
	for _, o := range res.Objects {
		if o.Object != object {
			continue
		}
		for _, f := range o.Findings {
			if f.Kind == k {
				out = append(out, f.Text)
			}
		}
	}
	return out
}

func hasFinding(list []string, parts ...string) bool {
	for _, s := range list {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(s, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// What users rely on in each example: the findings that say what happened.
func TestFindings(t *testing.T) {
	tests := []struct {
		file, object string
		kind         Kind
		parts        []string
	}{
		// The four places where the plugin behaves differently from argocd-image-updater
		// (platforms: every one required; latest ignored by newest-build; ...).
		{"differences.yaml", "Application argocd/differences", Differs, []string{"arm.platforms", "linux/arm/v7,linux/arm/v8", "any one of them", "requires every one", "write linux/arm "}},
		{"differences.yaml", "Application argocd/differences", Differs, []string{"multi.platforms", "linux/amd64,linux/arm64", "name only the platform the workload runs on"}},
		{"differences.yaml", "Application argocd/differences", Note, []string{`the tag "latest" is ignored by update-strategy newest-build`}},
		// Values argocd-image-updater could not use: the image never updated there,
		// so it is left out (and said).
		{"differences.yaml", "Application argocd/differences", Lost, []string{`allow-tags "glob:1.*"`, "never updated", "left out of image-list"}},
		{"differences.yaml", "Application argocd/differences", Lost, []string{`"latest" is not a semver constraint`, "left out of image-list"}},
		{"differences.yaml", "Application argocd/differences", Lost, []string{"unknown-key", "not a key of argocd-image-updater's documentation"}},
		{"differences.yaml", "Application argocd/differences", Lost, []string{"orphan.update-strategy", `alias "orphan" is not in image-list`}},
		{"differences.yaml", "Application argocd/differences", Note, []string{`item "regexp:^dev" is a glob to argocd-image-updater`}},
		{"differences.yaml", "Application argocd/differences", Note, []string{`platform "Linux/ARM64"`, "left out"}},
		{"differences.yaml", "Application argocd/differences", Note, []string{`update-strategy "fastest" is unknown to argocd-image-updater, which used semver`}},
		{"differences.yaml", "Application argocd/differences", Note, []string{"git-branch", "only with write-back-method git"}},
		{"differences.yaml", "Application argocd/differences", Note, []string{`ignore-tags "*" ignores every tag`, `image "paused"`, "left out of image-list"}},
		// Write-back.
		{"migration-guide-annotations.yaml", "Application production-app", Note, []string{`write-back-method "git" is pin-mode use`}},
		{"migration-guide-annotations.yaml", "Application production-app", Note, []string{`"helmvalues:./values.yaml" is written helmvalues:values.yaml`}},
		{"write-back.yaml", "Application argocd/kustomize-base", Lost, []string{`"kustomization:../../base"`, "only the app's own kustomization.yaml"}},
		{"write-back.yaml", "Application argocd/helm-test", Differs, []string{`git-branch "main:image-updater-{{.SHA256}}"`, "new branch", "pin-push pull-request", `pull request into "main"`}},
		{"write-back.yaml", "Application argocd/helm-test", Note, []string{`alias "web.frontend" is written "web_frontend"`}},
		{"write-back.yaml", "Application argocd/plain", Lost, []string{"git credentials \"secret:argocd/git-creds\""}},
		{"write-back.yaml", "Application argocd/plain", Lost, []string{"spec.sources", "multi-source"}},
		{"write-back.yaml", "Application argocd/kustomize-overlay", Note, []string{"applicationRefs[1] selects this app too"}},
		{"kubectl-get.yaml", "Application argocd/checkout", Differs, []string{`gitConfig.branch: git-branch "main:image-updater-{{.SHA256}}"`, "pin-push pull-request"}},
		{"kubectl-get.yaml", "Application argocd/checkout", Note, []string{"metadata.resourceVersion, metadata.uid", "status: set by the API server"}},
		{"pull-request.yaml", "Application argocd/my-app", Note, []string{"spec.writeBackConfig.gitConfig.pullRequest (github) is pin-push pull-request", "image-resolver/<app>", "git.forges"}},
		{"pull-request.yaml", "Application argocd/gitlab-app", Note, []string{"spec.applicationRefs[1].writeBackConfig.gitConfig.pullRequest (gitlab) is pin-push pull-request"}},
		{"pull-request.yaml", "Application argocd/live-app", Note, []string{"spec.applicationRefs[2].writeBackConfig.gitConfig.pullRequest: used by argocd-image-updater only with write-back-method git"}},
		// Sources.
		{"images-doc-annotations.yaml", "Application dex", Lost, []string{"spec.source.helm.releaseName"}},
		{"images-doc-annotations.yaml", "Application kustomize-custom", Lost, []string{"spec.source.kustomize.images"}},
		{"images-doc-annotations.yaml", "Application helm-multi", Note, []string{"helm.image-name", "not needed"}},
		{"images-doc-annotations.yaml", "Application pull-secrets", Note, []string{`pull-secret "ext:/scripts/creds.sh" is the credentials of prefix registry.example.com/team/d`}},
		{"directory-options.yaml", "Application jsonnet", Lost, []string{"spec.source.directory.jsonnet", "does not evaluate Jsonnet", "directory-exclude"}},
		{"directory-options.yaml", "Application sealed", Lost, []string{"spec.source.directory.disableExtensionFilter", "only *.yaml, *.yml and *.json"}},
		{"directory-options.yaml", "Application sealed", Lost, []string{`spec.source.directory.include "{*.yaml.sealed,*.yaml"`, "unclosed {", "parameter directory-include refuses it"}},
		// Registries.
		{"registries-doc.yaml", "registries", Note, []string{"(Docker Hub) default: true: not needed"}},
		{"registries-doc.yaml", "registries", Lost, []string{"(acr-name) credentials", "cannot run", "write credentials: acr instead"}},
		{"images-doc-annotations.yaml", "Application pull-secrets", Lost, []string{`pull-secret credentials "ext:/scripts/creds.sh"`, "cannot run", "static executable"}},
		{"registries-doc.yaml", "registries", Lost, []string{"data.git.user"}},
	}
	cache := map[string]*Result{}
	for _, tt := range tests {
		res := cache[tt.file]
		if res == nil {
			res = migrateFile(t, tt.file)
			cache[tt.file] = res
		}
		if got := findings(res, tt.object, tt.kind); !hasFinding(got, tt.parts...) {
			t.Errorf("%s %s: no %s finding with %q among %q", tt.file, tt.object, tt.kind, tt.parts, got)
		}
	}
}

// Directory options at Argo CD's defaults (recurse false, an empty include, an
// empty jsonnet) lose nothing, and leave nothing beside the plugin.
func TestDirectoryDefaultsLoseNothing(t *testing.T) {
	res := migrateFile(t, "directory-options.yaml")
	for _, app := range []string{"Application defaults", "Application recurse-include-exclude"} {
		if lost := findings(res, app, Lost); len(lost) > 0 {
			t.Errorf("%s: not carried over: %q", app, lost)
		}
	}
	if strings.Contains(string(res.Manifests), "\n    directory:") {
		t.Error("spec.source.directory left beside the plugin (Argo CD refuses two source types)")
	}
}

// The parameters users rely on, in the migrated Applications.
func TestParameters(t *testing.T) {
	tests := []struct {
		file, app string
		want      map[string]string // parameter -> value ("" to say it must be absent)
	}{
		{"differences.yaml", "differences", map[string]string{
			"image-list":     "arm=org/arm, multi=org/multi:~1.0, app=org/app, calver=org/calver, any=org/any",
			"arm.platforms":  "linux/arm/v7,linux/arm/v8", // "every", as the resolver reads it
			"app.allow-tags": "regexp:^main-", "any.allow-tags": "any",
			"calver.update-strategy": "alphabetical", "calver.ignore-tags": "*-rc*",
			"typo.allow-tags": "", "pin-mode": "",
		}},
		{"migration-guide-imageupdater.yaml", "production-app", map[string]string{
			"image-list": "nginx=nginx:1.20, redis=redis", "nginx.allow-tags": `regexp:^[0-9]+\.[0-9]+$`,
			"nginx.ignore-tags": "latest,dev", "redis.update-strategy": "newest-build",
			"pin-mode": "use", "pin-target": "helmvalues:values.yaml", "pin-branch": "main",
		}},
		{"migration-guide-imageupdater.yaml", "staging-app", map[string]string{
			"image-list": "nginx=nginx", "pin-branch": "develop",
		}},
		{"write-back.yaml", "helm-test", map[string]string{
			"image-list": "web_frontend=ghcr.io/example/web:~1.2", "pin-target": "helmvalues:config/test-values.yaml",
			"web_frontend.helm.image-name": "frontend.image.repository", "web_frontend.helm.image-tag": "frontend.image.tag",
			"pin-branch": "main",
		}},
		{"write-back.yaml", "kustomize-overlay", map[string]string{"pin-target": "kustomization", "pin-mode": "use"}},
		{"pull-request.yaml", "my-app", map[string]string{"pin-mode": "use", "pin-branch": "main", "pin-push": "pull-request", "pin-pr-group": ""}},
		{"pull-request.yaml", "gitlab-app", map[string]string{"pin-mode": "use", "pin-push": "pull-request"}},
		{"pull-request.yaml", "live-app", map[string]string{"pin-mode": "", "pin-push": ""}},
		{"write-back.yaml", "helm-test", map[string]string{"pin-push": "pull-request"}}, // main:image-updater-{{.SHA256}}: a write branch
		{"directory-options.yaml", "recurse-include-exclude", map[string]string{
			"directory-recurse": "true", "directory-include": "*.yaml", "directory-exclude": "{config.json,env-usw2/*}",
		}},
		{"directory-options.yaml", "defaults", map[string]string{"directory-recurse": "", "directory-include": "", "directory-exclude": ""}},
		{"directory-options.yaml", "jsonnet", map[string]string{"directory-recurse": "", "directory-exclude": "{*.libsonnet,vendor/*}"}},
		{"directory-options.yaml", "sealed", map[string]string{"directory-include": ""}},
	}
	for _, tt := range tests {
		res := migrateFile(t, tt.file)
		var found bool
		for _, a := range migratedApps(t, res.Manifests) {
			if a.name != tt.app {
				continue
			}
			found = true
			got := map[string]string{}
			for _, p := range a.params {
				got[p.Name] = strings.Join(p.Values(), "|")
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s %s: parameter %s = %q, want %q", tt.file, tt.app, k, got[k], v)
				}
			}
		}
		if !found {
			t.Errorf("%s: no migrated app %s", tt.file, tt.app)
		}
	}
}

func TestApplicationRewrite(t *testing.T) {
	res := migrateFile(t, "differences.yaml")
	var app struct {
		Metadata struct {
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"metadata"`
	}
	if err := yaml.Unmarshal(res.Manifests, &app); err != nil {
		t.Fatal(err)
	}
	for k := range app.Metadata.Annotations {
		if strings.HasPrefix(k, AnnotationPrefix) {
			t.Errorf("annotation %s left in the output", k)
		}
	}
	if app.Metadata.Annotations["team"] != "web" {
		t.Errorf("other annotations dropped: %v", app.Metadata.Annotations)
	}
	res = migrateFile(t, "migration-guide-imageupdater.yaml")
	out := string(res.Manifests)
	if strings.Contains(out, "kind: ImageUpdater") {
		t.Error("the ImageUpdater is in the output")
	}
	if !strings.Contains(out, "# Not selected by the ImageUpdater: passed through as it is.\napiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: unrelated") {
		t.Errorf("an Application nothing selects is not passed through as it is:\n%s", out)
	}
	if strings.Contains(out, "helm:") || strings.Contains(out, "valueFiles") {
		t.Error("the Helm source settings are left beside the plugin (Argo CD refuses two source types)")
	}
}

// A pull secret is the credential of its image's repository in the registries
// file, found by the resolver's own lookup.
func TestPullSecretRegistries(t *testing.T) {
	res := migrateFile(t, "images-doc-annotations.yaml")
	regs, err := resolve.ParseRegistries("migrated", res.Registries)
	if err != nil {
		t.Fatal(err)
	}
	table := resolve.NewRegistryTable(regs)
	for repo, want := range map[string]string{
		"registry.example.com/team/a": "secret:argocd/team-creds#creds",
		"registry.example.com/team/b": "pullsecret:argocd/team-pull-secret",
		"registry.example.com/team/c": "env:REGISTRY_CREDS",
		"registry.example.com/team/d": "ext:/scripts/creds.sh",
		"quay.io/argoproj/argocd":     "",
	} {
		r, err := name.NewRepository(repo)
		if err != nil {
			t.Fatal(err)
		}
		rc, _ := table.Lookup(r)
		if rc.Credentials != want {
			t.Errorf("%s: credentials %q, want %q", repo, rc.Credentials, want)
		}
	}
	// Two apps naming different credentials for one repository: the first is
	// kept, the second said.
	two := `
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: one, annotations: {argocd-image-updater.argoproj.io/image-list: "a=ghcr.io/o/a", argocd-image-updater.argoproj.io/pull-secret: "env:ONE"}}
spec: {source: {repoURL: r, path: one}}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: two, annotations: {argocd-image-updater.argoproj.io/image-list: "a=ghcr.io/o/a", argocd-image-updater.argoproj.io/pull-secret: "env:TWO"}}
spec: {source: {repoURL: r, path: two}}
`
	res2, err := Migrate([]Input{{Name: "two", Data: []byte(two)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res2.Registries), "credentials: env:ONE") || strings.Contains(string(res2.Registries), "env:TWO") {
		t.Errorf("registries:\n%s", res2.Registries)
	}
	if !hasFinding(findings(res2, "Application two", Lost), `pull-secret "env:TWO"`, "one credential per prefix", "env:ONE") {
		t.Errorf("findings %+v", res2.Objects)
	}
	if res2.Lost != 1 {
		t.Errorf("lost %d, want 1", res2.Lost)
	}
}

// argocd-image-updater's registries.conf on its own, and what has no counterpart.
func TestRegistriesConf(t *testing.T) {
	conf := `registries:
- name: Quay
  prefix: quay.io
  api_url: http://quay-mirror.internal:5000
  default: true
  ca_data: "-----BEGIN CERTIFICATE-----"
  tagsortmode: latest-first
- name: no prefix
  api_url: https://x.example.com
`
	res, err := Migrate([]Input{{Name: "registries.conf", Data: []byte(conf)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	regs, err := resolve.ParseRegistries("migrated", res.Registries)
	if err != nil || len(regs) != 1 || regs[0].API != "quay-mirror.internal:5000" || !regs[0].Insecure {
		t.Fatalf("registries %+v, %v\n%s", regs, err, res.Registries)
	}
	lost := findings(res, "registries", Lost)
	for _, want := range []string{"(Quay) default: true: images without a registry are Docker Hub's", "(Quay) ca_data", "(Quay) tagsortmode", "registries[1]: no prefix"} {
		if !hasFinding(lost, want) {
			t.Errorf("no finding %q among %q", want, lost)
		}
	}
	if !hasFinding(findings(res, "registries", Note), "plain HTTP is insecure: true") {
		t.Errorf("findings %+v", res.Objects)
	}
	if res.Lost != 4 {
		t.Errorf("lost %d, want 4", res.Lost)
	}
}

func TestBadInput(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"not YAML", "a: [", "in: not YAML"},
		{"not a mapping", "- a\n- b\n", "in: document 1: not a mapping"},
		{"ImageUpdater without spec", "apiVersion: argocd-image-updater.argoproj.io/v1alpha1\nkind: ImageUpdater\nmetadata: {name: x}\n", "ImageUpdater x has no spec"},
		{"ImageUpdater field of the wrong type", "apiVersion: argocd-image-updater.argoproj.io/v1alpha1\nkind: ImageUpdater\nmetadata: {name: x}\nspec: {namespace: argocd, applicationRefs: {a: b}}\n", "ImageUpdater x spec: json: cannot unmarshal"},
		{"bad namePattern", "apiVersion: argocd-image-updater.argoproj.io/v1alpha1\nkind: ImageUpdater\nmetadata: {name: x}\nspec: {applicationRefs: [{namePattern: '[', images: []}]}\n", `namePattern "[": not a glob`},
		{"annotations not strings", "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: a, annotations: {x: [1]}}\n", "metadata.annotations.x: not a string"},
	}
	for _, tt := range tests {
		_, err := Migrate([]Input{{Name: "in", Data: []byte(tt.in)}}, Options{})
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want an *InputError with %q", tt.name, err, tt.want)
		}
	}
	// Empty input and empty documents are no error, and give no output.
	res, err := Migrate([]Input{{Name: "in", Data: []byte("---\n---\n")}}, Options{})
	if err != nil || len(res.Stream()) != 0 {
		t.Errorf("empty input: %q, %v", res.Stream(), err)
	}
}

// kubectl get -o yaml gives a List: its items are migrated one by one.
func TestList(t *testing.T) {
	in := `apiVersion: v1
kind: List
items:
- apiVersion: argoproj.io/v1alpha1
  kind: Application
  metadata: {name: a, namespace: argocd, annotations: {argocd-image-updater.argoproj.io/image-list: "web=ghcr.io/o/web:~1.2"}}
  spec: {source: {repoURL: r, path: a}}
- apiVersion: v1
  kind: Service
  metadata: {name: s}
`
	res, err := Migrate([]Input{{Name: "list", Data: []byte(in)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	apps := migratedApps(t, res.Manifests)
	if len(apps) != 1 || apps[0].name != "a" || apps[0].params[0].String != "web=ghcr.io/o/web:~1.2" {
		t.Fatalf("apps %+v\n%s", apps, res.Manifests)
	}
	if !strings.Contains(string(res.Manifests), "---\napiVersion: v1\nkind: Service\n") {
		t.Errorf("the List's other item is not passed through:\n%s", res.Manifests)
	}
}

// No credential reaches a comment: URLs with a password are redacted.
func TestNoCredentialInComments(t *testing.T) {
	in := `apiVersion: v1
kind: ConfigMap
metadata: {name: argocd-image-updater-config}
data:
  registries.conf: |
    registries:
    - prefix: registry.example.com
      api_url: https://robot:s3cr3t-registry@registry.example.com
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: a
  annotations:
    argocd-image-updater.argoproj.io/image-list: web=ghcr.io/o/web
    argocd-image-updater.argoproj.io/write-back-method: git
    argocd-image-updater.argoproj.io/git-repository: https://bot:s3cr3t-git@github.com/o/other.git
spec: {source: {repoURL: "https://bot:s3cr3t-src@github.com/o/r.git", path: a}}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: b
  annotations:
    argocd-image-updater.argoproj.io/image-list: web=ghcr.io/o/web
    argocd-image-updater.argoproj.io/git-repository: https://bot:s3cr3t-unused@github.com/o/other.git
spec: {source: {repoURL: r, path: b}}
`
	res, err := Migrate([]Input{{Name: "in", Data: []byte(in)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var comments strings.Builder
	for _, o := range res.Objects {
		for _, f := range o.Findings {
			comments.WriteString(f.Text + "\n")
		}
	}
	for _, line := range strings.Split(string(res.Stream()), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			comments.WriteString(line + "\n")
		}
	}
	if strings.Contains(comments.String(), "s3cr3t") {
		t.Errorf("a credential in a comment:\n%s", comments.String())
	}
	if !strings.Contains(string(res.Registries), "api: ") && !strings.Contains(string(res.Registries), "prefix: registry.example.com") {
		t.Errorf("registries:\n%s", res.Registries)
	}
	if strings.Contains(string(res.Registries), "s3cr3t") {
		t.Errorf("a credential in the registries file:\n%s", res.Registries)
	}
}

// A pull request of the ImageUpdater (gitConfig.pullRequest) is pin-push
// pull-request, which the plugin accepts with the migrated pin-mode; what migrate
// does not know in writeBackConfig is said, never dropped.
func TestPullRequestWriteBack(t *testing.T) {
	in := `apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: pr, namespace: argocd}
spec:
  namespace: argocd
  writeBackConfig:
    method: git
    commitBranch: images
    gitConfig:
      branch: main
      autoMerge: true
      pullRequest:
        github: {labels: [images]}
        bitbucket: {}
  applicationRefs:
    - namePattern: app
      images: [{alias: web, imageName: ghcr.io/o/web:~1.2}]
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: app, namespace: argocd}
spec: {source: {repoURL: "https://github.com/o/r.git", path: app, targetRevision: main}}
`
	res, err := Migrate([]Input{{Name: "in", Data: []byte(in)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	apps := migratedApps(t, res.Manifests)
	if len(apps) != 1 {
		t.Fatalf("%d migrated apps", len(apps))
	}
	pol, err := pluginPolicy(t, apps[0])
	if err != nil {
		t.Fatalf("the plugin refuses the migrated parameters: %v", err)
	}
	if pol.PinMode != plugin.PinUse || pol.Pins.Push != plugin.PinPushPullRequest || pol.Pins.PRGroup != plugin.PinPRGroupApp || pol.Pins.Branch != "main" {
		t.Errorf("pins %q %+v, want use, pull requests per app to main", pol.PinMode, pol.Pins)
	}
	obj := "Application argocd/app"
	for _, want := range [][]string{
		{"ImageUpdater argocd/pr spec.writeBackConfig.commitBranch: unknown to migrate"},
		{"ImageUpdater argocd/pr spec.writeBackConfig.gitConfig.autoMerge: unknown to migrate"},
		{"ImageUpdater argocd/pr spec.writeBackConfig.gitConfig.pullRequest.bitbucket: unknown to migrate"},
		{"ImageUpdater argocd/pr spec.writeBackConfig.gitConfig.pullRequest.github: its settings are not carried over"},
	} {
		if got := findings(res, obj, Lost); !hasFinding(got, want...) {
			t.Errorf("no finding %q among %q", want, got)
		}
	}
	if got := findings(res, obj, Note); !hasFinding(got, "gitConfig.pullRequest (bitbucket,github) is pin-push pull-request") {
		t.Errorf("no pull request note among %q", got)
	}
}
