package e2e

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/e2e/harness"
	"github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// scenario is the registry content every resolver test seeds: a file of the main
// module, shared with `make demo` (its header explains the stories); E2E_SCENARIO
// overrides it. The expectations in these tests follow it:
//
//	demo/web:    1.0.0, 1.1.0 (amd64+arm64), 1.3.0-rc.1 (both), 1.2.0 (arm64 only), latest=1.2.0
//	demo/worker: 2026.01.12, 2026.02.16, 2026.03.03 (both, newest-build order), 2026.03.10 (arm64 only)
//	demo/batch:  1..12 (amd64), numeric order; listed lexically by the registry, 2 tags a page
//	demo/api:    1.0.0, 1.1.0, 1.4.2, 2.0.0 (amd64+arm64)
var scenario = envOr("E2E_SCENARIO", "testdata/registry/demo.yaml")

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

const (
	webRepo    = harness.DemoHost + "/demo/web"
	workerRepo = harness.DemoHost + "/demo/worker"
	batchRepo  = harness.DemoHost + "/demo/batch"
	// untouchedImage is named by no policy and exists in no registry: it must come
	// back as written (and must not be looked up).
	untouchedImage = harness.DemoHost + "/demo/untouched:0.1"
)

// inlineApp is a plain-YAML app the tests write themselves, so its expectations
// depend only on the scenario and the parameters: three web Deployments (no
// nodeSelector, arm64, amd64), a worker initContainer, an unmanaged sidecar, and a
// CronJob of batch.
const inlineApp = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      initContainers:
        - name: migrate
          image: registry.demo.local/demo/worker:2026.01.12
      containers:
        - name: web
          image: registry.demo.local/demo/web:1.0.0
        - name: sidecar
          image: registry.demo.local/demo/untouched:0.1
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-arm64
spec:
  selector: {matchLabels: {app: web-arm64}}
  template:
    metadata: {labels: {app: web-arm64}}
    spec:
      nodeSelector:
        kubernetes.io/arch: arm64
      containers:
        - name: web
          image: registry.demo.local/demo/web:1.0.0
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-amd64
spec:
  selector: {matchLabels: {app: web-amd64}}
  template:
    metadata: {labels: {app: web-amd64}}
    spec:
      nodeSelector:
        kubernetes.io/arch: amd64
        kubernetes.io/os: linux
      containers:
        - name: web
          image: registry.demo.local/demo/web:1.0.0
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: batch
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: batch
              image: registry.demo.local/demo/batch:1
`

// resolverEnv is a seeded registry, the resolver's registries config pointing
// registry.demo.local at it, and the repository's plugin.yaml served by Argo CD's
// cmp-server with the built binary on PATH.
type resolverEnv struct {
	reg    *harness.Registry
	plugin *harness.CMPServer
}

func startResolverEnv(t *testing.T) *resolverEnv {
	t.Helper()
	reg := harness.StartRegistry(t)
	reg.Seed(t, scenario)
	reg.UseRegistriesConfig(t)
	return &resolverEnv{reg: reg, plugin: harness.StartRepoPlugin(t)}
}

func params(kv ...string) v1alpha1.ApplicationSourcePluginParameters {
	var out v1alpha1.ApplicationSourcePluginParameters
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, harness.StringParam(kv[i], kv[i+1]))
	}
	return out
}

func inlineRepo(t *testing.T) *harness.GitRepo {
	t.Helper()
	repo := harness.NewGitRepo(t)
	repo.WriteFile(t, "apps/inline/workloads.yaml", inlineApp)
	repo.Commit(t, "inline app")
	return repo
}

// imagesByObject maps "Kind/name" to its images (initContainers first).
func imagesByObject(objs []*unstructured.Unstructured) map[string][]string {
	out := map[string][]string{}
	for _, o := range objs {
		out[o.GetKind()+"/"+o.GetName()] = images(o)
	}
	return out
}

func expectImages(t *testing.T, objs []*unstructured.Unstructured, want map[string][]string) {
	t.Helper()
	got := imagesByObject(objs)
	for obj, w := range want {
		g, ok := got[obj]
		if !ok {
			t.Errorf("%s missing from the rendered manifests (got %v)", obj, keys(got))
			continue
		}
		if !slices.Equal(g, w) {
			t.Errorf("%s images = %v, want %v", obj, g, w)
		}
	}
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// resolverAnnotations returns the annotations the resolver put on obj (keys naming
// the resolver), joined, for loose checks of what they explain.
func resolverAnnotations(obj *unstructured.Unstructured) string {
	var b strings.Builder
	for k, v := range obj.GetAnnotations() {
		if strings.Contains(k, "image-resolver") {
			b.WriteString(k + "=" + v + "\n")
		}
	}
	return b.String()
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("%s/%s not rendered", kind, name)
	return nil
}

func expectRenderError(t *testing.T, repo *harness.GitRepo, app harness.App, wants ...string) string {
	t.Helper()
	start := time.Now()
	manifests, err := harness.Render(repo, app)
	if err == nil {
		t.Fatalf("render succeeded with %d manifests, want an error containing %q", len(manifests), wants)
	}
	msg := err.Error()
	for _, w := range wants {
		if !strings.Contains(msg, w) {
			t.Errorf("error does not contain %q:\n%s", w, msg)
		}
	}
	// A failed render must be the plugin's own non-zero exit, not Argo CD's deadline.
	if strings.Contains(msg, "DeadlineExceeded") || strings.Contains(msg, "context deadline exceeded") {
		t.Errorf("render hit the request deadline after %s instead of failing by itself: %s", time.Since(start), msg)
	}
	if !strings.Contains(msg, "`argocd-image-resolver-generate` failed exit status") {
		t.Errorf("error is not the generate command's failure as Argo CD reports it:\n%s", msg)
	}
	t.Logf("GenerateManifests error (as the app's ComparisonError shows it): %s", msg)
	return msg
}

// TestResolverInlineApp renders the test's own plain-YAML app through Argo CD with
// policies given as plugin parameters and checks every resolution against the
// scenario.
func TestResolverInlineApp(t *testing.T) {
	env := startResolverEnv(t)
	repo := inlineRepo(t)
	app := func(kv ...string) harness.App {
		return harness.App{Name: "inline", Namespace: "inline", Path: "apps/inline", Parameters: params(kv...)}
	}

	t.Run("platforms from each workload's nodeSelector", func(t *testing.T) {
		objs := harness.MustRender(t, repo, app("image-list", "web="+webRepo))
		expectImages(t, objs, map[string][]string{
			// No nodeSelector and no policy platforms: nothing required, newest release wins.
			"Deployment/web":       {"registry.demo.local/demo/worker:2026.01.12", webRepo + ":1.2.0", untouchedImage},
			"Deployment/web-arm64": {webRepo + ":1.2.0"},
			// 1.2.0 has no linux/amd64 manifest: skipped, and the skip is reported.
			"Deployment/web-amd64": {webRepo + ":1.1.0"},
			"CronJob/batch":        {batchRepo + ":1"},
		})
		if a := resolverAnnotations(find(t, objs, "Deployment", "web-amd64")); !strings.Contains(a, "1.2.0") {
			t.Errorf("web-amd64 does not say that 1.2.0 was skipped for linux/amd64; resolver annotations:\n%s", a)
		}
	})

	t.Run("policy platforms win over the workload's", func(t *testing.T) {
		objs := harness.MustRender(t, repo, app("image-list", "web="+webRepo+":~1.x", "web.platforms", "linux/amd64"))
		expectImages(t, objs, map[string][]string{
			"Deployment/web":       {"registry.demo.local/demo/worker:2026.01.12", webRepo + ":1.1.0", untouchedImage},
			"Deployment/web-arm64": {webRepo + ":1.1.0"},
			"Deployment/web-amd64": {webRepo + ":1.1.0"},
		})
	})

	t.Run("pre-releases only when the constraint asks", func(t *testing.T) {
		objs := harness.MustRender(t, repo, app("image-list", "web="+webRepo+":>=1.3.0-0"))
		expectImages(t, objs, map[string][]string{"Deployment/web-arm64": {webRepo + ":1.3.0-rc.1"}})
	})

	t.Run("newest-build for the initContainer, numeric across tag pages", func(t *testing.T) {
		mark := len(env.reg.Requests())
		objs := harness.MustRender(t, repo, harness.App{
			Name: "inline", Namespace: "inline", Path: "apps/inline",
			Parameters: v1alpha1.ApplicationSourcePluginParameters{
				harness.ArrayParam("image-list", "worker="+workerRepo, "batch="+batchRepo),
				harness.StringParam("worker.update-strategy", "newest-build"),
				harness.ArrayParam("worker.platforms", "linux/amd64", "linux/arm64"),
				harness.StringParam("batch.update-strategy", "numeric"),
			},
		})
		expectImages(t, objs, map[string][]string{
			// 2026.03.10 is the newest build but arm64-only.
			"Deployment/web": {workerRepo + ":2026.03.03", "registry.demo.local/demo/web:1.0.0", untouchedImage},
			// The registry lists 1, 10, 11, 12, 2, ... two a page: 12 is only found by
			// following every Link.
			"CronJob/batch": {batchRepo + ":12"},
		})
		// 12 tags at tags.maxtags=2: at least 6 tag list pages were fetched.
		if n := env.reg.CountRequests(mark, "GET", "/v2/demo/batch/tags/list"); n < 12/harness.DefaultMaxTags {
			t.Errorf("the resolver fetched %d tag list pages of demo/batch, want >= %d", n, 12/harness.DefaultMaxTags)
		} else {
			t.Logf("demo/batch: %d tag list requests", n)
		}
	})

	t.Run("pin-digest writes the index digest", func(t *testing.T) {
		objs := harness.MustRender(t, repo, app("image-list", "web="+webRepo, "web.platforms", "linux/arm64", "web.pin-digest", "true"))
		digest, err := env.reg.Digest("demo/web", "1.2.0")
		if err != nil {
			t.Fatal(err)
		}
		expectImages(t, objs, map[string][]string{"Deployment/web-arm64": {webRepo + ":1.2.0@" + digest}})
	})

	t.Run("output is deterministic", func(t *testing.T) {
		a := app("image-list", "web="+webRepo)
		first, err := harness.Render(repo, a)
		if err != nil {
			t.Fatal(err)
		}
		second, err := harness.Render(repo, a)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(first, second) {
			t.Errorf("two renders of one commit differ:\n%v\n%v", first, second)
		}
	})

	t.Run("streamed revision", func(t *testing.T) {
		manifests, err := harness.RenderStreamed(repo.Root, app("image-list", "web="+webRepo))
		if err != nil {
			t.Fatal(err)
		}
		expectImages(t, harness.Decode(t, manifests), map[string][]string{
			"Deployment/web-arm64": {webRepo + ":1.2.0"},
			"Deployment/web-amd64": {webRepo + ":1.1.0"},
		})
	})

	t.Run("a bad parameter names the parameter and the value", func(t *testing.T) {
		expectRenderError(t, repo, app("image-list", "web="+webRepo, "web.update-strategy", "fastest"),
			"web.update-strategy", "fastest", "semver")
	})

	t.Run("a bad platform names the parameter and the value", func(t *testing.T) {
		expectRenderError(t, repo, app("image-list", "web="+webRepo, "web.platforms", "linux-amd64"),
			"web.platforms", "linux-amd64")
	})

	t.Run("no tag qualifies", func(t *testing.T) {
		msg := expectRenderError(t, repo, app("image-list", "web="+webRepo+":~9.x"), "demo/web", "no tag qualifies")
		if !strings.Contains(msg, "~9") && !strings.Contains(msg, "9.x") {
			t.Errorf("error does not name the constraint: %s", msg)
		}
	})
}

// TestResolverPolicyFile: the app's .argocd-image-resolver.yaml is read from the
// commit, and parameters override it field by field.
func TestResolverPolicyFile(t *testing.T) {
	startResolverEnv(t)
	repo := harness.NewGitRepo(t)
	repo.WriteFile(t, "apps/inline/workloads.yaml", inlineApp)
	repo.WriteFile(t, "apps/inline/.argocd-image-resolver.yaml", `images:
  web:
    image: registry.demo.local/demo/web
    strategy: semver
    constraint: "^1"
    platforms: [linux/amd64]
`)
	repo.Commit(t, "inline app with a policy file")
	app := harness.App{Name: "inline", Namespace: "inline", Path: "apps/inline"}

	objs := harness.MustRender(t, repo, app)
	expectImages(t, objs, map[string][]string{
		"Deployment/web-arm64": {webRepo + ":1.1.0"},
		"Deployment/web-amd64": {webRepo + ":1.1.0"},
		"CronJob/batch":        {batchRepo + ":1"},
	})

	app.Parameters = params("web.platforms", "linux/arm64")
	objs = harness.MustRender(t, repo, app)
	expectImages(t, objs, map[string][]string{
		"Deployment/web-arm64": {webRepo + ":1.2.0"},
		"Deployment/web-amd64": {webRepo + ":1.2.0"},
	})

	// A typo in the file is an error naming the file and key.
	repo.WriteFile(t, "apps/inline/.argocd-image-resolver.yaml", `images:
  web:
    image: registry.demo.local/demo/web
    stratgy: semver
`)
	repo.Commit(t, "typo")
	expectRenderError(t, repo, harness.App{Name: "inline", Namespace: "inline", Path: "apps/inline"},
		".argocd-image-resolver.yaml", "stratgy")
}

// TestResolverRegistryDown: a registry that does not answer fails the render (the
// daemon is not running, so there is no last good answer) with a message naming the
// registry, well before Argo CD's deadline.
func TestResolverRegistryDown(t *testing.T) {
	harness.StartRepoPlugin(t)
	down := harness.StartRegistry(t)
	down.Seed(t, scenario)
	down.UseRegistriesConfig(t)
	down.Stop()

	repo := inlineRepo(t)
	msg := expectRenderError(t, repo, harness.App{
		Name: "inline", Namespace: "inline", Path: "apps/inline",
		Parameters: params("image-list", "web="+webRepo),
	}, "demo/web")
	if !strings.Contains(msg, down.Host) && !strings.Contains(msg, harness.DemoHost) {
		t.Errorf("error names neither the registry %s nor %s: %s", down.Host, harness.DemoHost, msg)
	}
	if !regexp.MustCompile(`(?i)connection refused|connect|unreachable|registry`).MatchString(msg) {
		t.Errorf("error does not say the registry could not be reached: %s", msg)
	}
}

// TestPluginParameters: the UI's Parameters tab, through repo-server's GetAppDetails
// path, gets the plugin's announced parameters.
func TestPluginParameters(t *testing.T) {
	harness.StartRepoPlugin(t)
	repo := inlineRepo(t)
	anns, err := harness.ParametersAnnouncement(repo, harness.App{Name: "inline", Path: "apps/inline"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range anns {
		names = append(names, a.Name)
	}
	for _, want := range []string{"image-list"} {
		if !slices.Contains(names, want) {
			t.Errorf("announced parameters %v lack %q", names, want)
		}
	}
}

// TestPluginYAML checks the repository's plugin.yaml with Argo CD's own loader.
func TestPluginYAML(t *testing.T) {
	cfg := harness.StartCMPServer(t, harness.RepoPluginConfigDir(t)).Config
	if got := cfg.Metadata.Name + "-" + cfg.Spec.Version; got != "image-resolver-v1" {
		t.Errorf("plugin name = %q", got)
	}
	if got := strings.Join(cfg.Spec.Generate.Command, " "); got != "argocd-image-resolver-generate" {
		t.Errorf("generate = %q", got)
	}
	if got := strings.Join(cfg.Spec.Parameters.Dynamic.Command, " "); got != "argocd-image-resolver parameters" {
		t.Errorf("parameters.dynamic = %q", got)
	}
	if cfg.Spec.Discover.IsDefined() {
		t.Errorf("plugin.yaml has a discover block: apps must name the plugin")
	}
}
