package e2e

import (
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/e2e/harness"
	"github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
)

// sampleRepo is a git repository laid out like a GitOps repo: the main module's
// testdata/apps/* under apps/, one commit.
func sampleRepo(t *testing.T) *harness.GitRepo {
	t.Helper()
	repo := harness.NewGitRepo(t)
	repo.CopyDir(t, "testdata/apps", "apps")
	repo.Commit(t, "sample apps")
	return repo
}

// TestSampleApps renders each sample app of testdata/apps through Argo CD with the
// policy from its own .argocd-image-resolver.yaml, then with parameters layered on
// top, as an Application would set them.
func TestSampleApps(t *testing.T) {
	startResolverEnv(t)
	repo := sampleRepo(t)

	cases := []struct {
		name   string
		path   string
		params v1alpha1.ApplicationSourcePluginParameters
		// want maps "Kind/name" (name "" = the only object of that kind) to images.
		want map[string][]string
		// skipped, if set, must appear in the resolver's annotations of that object.
		skipped map[string]string
		check   func(t *testing.T, objs objects)
	}{
		{
			name: "helm-web: values-driven image, policy file ^1.0, no platforms",
			path: "apps/helm-web",
			want: map[string][]string{"Deployment/": {webRepo + ":1.2.0"}},
		},
		{
			name: "helm-web: image-list and platforms as parameters",
			path: "apps/helm-web",
			params: params(
				"image-list", "web="+webRepo+":~1.x",
				"web.update-strategy", "semver",
				"web.platforms", "linux/amd64"),
			want:    map[string][]string{"Deployment/": {webRepo + ":1.1.0"}},
			skipped: map[string]string{"Deployment/": "1.2.0"},
		},
		{
			name: "kustomize-overlay: images transformer sets 1.1.0, policy picks the newest 1.x",
			path: "apps/kustomize-overlay/overlay",
			want: map[string][]string{"Deployment/api": {harness.DemoHost + "/demo/api:1.4.2"}},
			check: func(t *testing.T, objs objects) {
				if ns := objs.get(t, "Deployment/api").GetNamespace(); ns != "shop" {
					t.Errorf("the overlay's namespace was lost: %q", ns)
				}
			},
		},
		{
			name: "plain-cron: numeric CronJob across tag pages, semver initContainer",
			path: "apps/plain-cron",
			want: map[string][]string{
				"CronJob/nightly-report": {batchRepo + ":12"},
				"Deployment/web":         {webRepo + ":1.2.0", webRepo + ":1.2.0"},
			},
		},
		{
			name: "arm64-pinned: linux/arm64 from the nodeSelector",
			path: "apps/arm64-pinned",
			want: map[string][]string{"Deployment/web-arm": {webRepo + ":1.2.0"}},
		},
		{
			name:    "arm64-pinned: a platforms parameter overrides the nodeSelector",
			path:    "apps/arm64-pinned",
			params:  params("web.platforms", "linux/amd64"),
			want:    map[string][]string{"Deployment/web-arm": {webRepo + ":1.1.0"}},
			skipped: map[string]string{"Deployment/web-arm": "1.2.0"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			appName := strings.Split(strings.TrimPrefix(tc.path, "apps/"), "/")[0]
			objs := objects(harness.MustRender(t, repo, harness.App{
				Name: appName, Namespace: "demo", Path: tc.path, Parameters: tc.params,
			}))
			for key, want := range tc.want {
				obj := objs.get(t, key)
				if got := images(obj); !equal(got, want) {
					t.Errorf("%s %s images = %v, want %v", obj.GetKind(), obj.GetName(), got, want)
				}
				if a := resolverAnnotations(obj); a == "" {
					t.Errorf("%s %s has no resolver annotation", obj.GetKind(), obj.GetName())
				}
			}
			for key, tag := range tc.skipped {
				if a := resolverAnnotations(objs.get(t, key)); !strings.Contains(a, tag) {
					t.Errorf("%s does not report the skipped tag %s; resolver annotations:\n%s", key, tag, a)
				}
			}
			if tc.check != nil {
				tc.check(t, objs)
			}
		})
	}

	t.Run("streamed revision of helm-web", func(t *testing.T) {
		app := harness.App{Name: "helm-web", Namespace: "demo", Path: "apps/helm-web"}
		// The CLI sends only *.yaml, *.yml and *.json by default: the chart's
		// _helpers.tpl stays behind, and the render must fail rather than print
		// something partial.
		if manifests, err := harness.RenderStreamed(repo.Root, app); err == nil {
			t.Errorf("streamed render without _helpers.tpl succeeded: %v", manifests)
		} else {
			t.Logf("with the CLI's default --local-include: %v", err)
		}
		// --local-include '*' sends the whole chart.
		manifests, err := harness.RenderStreamed(repo.Root, app, "*")
		if err != nil {
			t.Fatal(err)
		}
		objs := objects(harness.Decode(t, manifests))
		if got := images(objs.get(t, "Deployment/")); !equal(got, []string{webRepo + ":1.2.0"}) {
			t.Errorf("images = %v", got)
		}
	})

	t.Run("streamed revision of kustomize-overlay with the CLI's default includes", func(t *testing.T) {
		manifests, err := harness.RenderStreamed(repo.Root, harness.App{Name: "kustomize-overlay", Namespace: "demo", Path: "apps/kustomize-overlay/overlay"})
		if err != nil {
			t.Fatal(err)
		}
		objs := objects(harness.Decode(t, manifests))
		if got := images(objs.get(t, "Deployment/api")); !equal(got, []string{harness.DemoHost + "/demo/api:1.4.2"}) {
			t.Errorf("images = %v", got)
		}
	})
}
