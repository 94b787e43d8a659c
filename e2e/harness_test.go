package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/e2e/harness"
	"github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
)

// The throwaway plugins of TestArgoCDHarness: one prints the app's manifest.yaml
// plus a ConfigMap of the environment Argo CD gave it; one fails.
const (
	echoPlugin = `cat manifest.yaml
printf -- '---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plugin-env\ndata:\n'
for v in ARGOCD_APP_NAME ARGOCD_APP_NAMESPACE ARGOCD_APP_REVISION ARGOCD_APP_REVISION_SHORT \
         ARGOCD_APP_SOURCE_REPO_URL ARGOCD_APP_SOURCE_PATH ARGOCD_APP_SOURCE_TARGET_REVISION \
         KUBE_VERSION ARGOCD_ENV_GREETING ARGOCD_APP_PARAMETERS PARAM_IMAGE_LIST PARAM_WEB_PLATFORMS_0 \
         E2E_FROM_CMP_SERVER_ENV; do
  eval "val=\${$v-}"
  printf '  %s: %s\n' "$v" "$(printf '%s' "$val" | sed "s/'/''/g; s/^/'/; s/\$/'/")"
done
`
	failPlugin = `echo "render failed: no tag of demo/web matches ~9.x" >&2; printf 'partial %s\n' output; exit 3`
)

const tinyManifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: tiny
spec:
  selector:
    matchLabels: {app: tiny}
  template:
    metadata:
      labels: {app: tiny}
    spec:
      containers:
        - name: web
          image: registry.demo.local/demo/web:1.0.0
`

// TestArgoCDHarness proves the harness itself, with throwaway plugins: Argo CD's
// cmp-server and repo-server GenerateManifests stream a real git checkout and return
// what the plugin printed; a failing plugin's stderr reaches GenerateManifests' error;
// the streamed (`argocd app diff --local --server-side-generate`) path works; the
// registry starts, answers /v2/ and paginates tag lists.
func TestArgoCDHarness(t *testing.T) {
	echo := harness.StartCMPServer(t, harness.WritePluginConfig(t, harness.PluginSpec{
		Name: "e2e-echo", Version: "v1", Generate: []string{"sh", "-c", echoPlugin},
	}))
	fail := harness.StartCMPServer(t, harness.WritePluginConfig(t, harness.PluginSpec{
		Name: "e2e-fail", Generate: []string{"sh", "-c", failPlugin},
	}))
	if echo.PluginName() != "e2e-echo-v1" || !strings.HasSuffix(echo.Address, "/e2e-echo-v1.sock") {
		t.Fatalf("plugin name %q at %s", echo.PluginName(), echo.Address)
	}
	t.Setenv("E2E_FROM_CMP_SERVER_ENV", "inherited")

	repo := harness.NewGitRepo(t)
	repo.WriteFile(t, "apps/tiny/manifest.yaml", tinyManifest)
	repo.WriteFile(t, "README.md", "not part of the app\n")
	sha := repo.Commit(t, "tiny app")

	app := harness.App{
		Name:      "tiny",
		Namespace: "tiny-ns",
		Path:      "apps/tiny",
		Plugin:    echo.PluginName(),
		Env:       v1alpha1.Env{harness.EnvVar("GREETING", "hello $ARGOCD_APP_NAME")},
		Parameters: v1alpha1.ApplicationSourcePluginParameters{
			harness.StringParam("image-list", "web=registry.demo.local/demo/web:~1.x"),
			harness.ArrayParam("web.platforms", "linux/arm64"),
		},
	}

	t.Run("manifests come back through the cmp-server", func(t *testing.T) {
		objs := harness.MustRender(t, repo, app)
		if len(objs) != 2 {
			t.Fatalf("got %d objects, want the Deployment and the env ConfigMap", len(objs))
		}
		dep := objs[0]
		if dep.GetKind() != "Deployment" || dep.GetName() != "tiny" {
			t.Fatalf("first object is %s/%s", dep.GetKind(), dep.GetName())
		}
		if got := images(dep); !reflect.DeepEqual(got, []string{"registry.demo.local/demo/web:1.0.0"}) {
			t.Errorf("images = %v", got)
		}
		// repo-server adds its tracking label (AppLabelKey) like in a real install.
		if got := dep.GetLabels()["app.kubernetes.io/instance"]; got != "tiny" {
			t.Errorf("tracking label = %q", got)
		}

		env := stringMap(t, objs[1], "data")
		want := map[string]string{
			"ARGOCD_APP_NAME":                   "tiny",
			"ARGOCD_APP_NAMESPACE":              "tiny-ns",
			"ARGOCD_APP_REVISION":               sha,
			"ARGOCD_APP_REVISION_SHORT":         sha[:7],
			"ARGOCD_APP_SOURCE_REPO_URL":        repo.URL(),
			"ARGOCD_APP_SOURCE_PATH":            "apps/tiny",
			"ARGOCD_APP_SOURCE_TARGET_REVISION": "HEAD",
			"KUBE_VERSION":                      harness.DefaultKubeVersion,
			"ARGOCD_ENV_GREETING":               "hello tiny", // Argo CD substitutes $ARGOCD_APP_* in plugin env
			"ARGOCD_APP_PARAMETERS":             `[{"name":"image-list","string":"web=registry.demo.local/demo/web:~1.x"},{"name":"web.platforms","array":["linux/arm64"]}]`,
			"PARAM_IMAGE_LIST":                  "web=registry.demo.local/demo/web:~1.x",
			"PARAM_WEB_PLATFORMS_0":             "linux/arm64",
			"E2E_FROM_CMP_SERVER_ENV":           "inherited",
		}
		for k, v := range want {
			if k == "ARGOCD_APP_PARAMETERS" {
				assertSameJSON(t, k, env[k], v)
				continue
			}
			if env[k] != v {
				t.Errorf("plugin saw %s=%q, want %q", k, env[k], v)
			}
		}
	})

	t.Run("a failing plugin is a GenerateManifests error with its stderr", func(t *testing.T) {
		failing := app
		failing.Plugin = fail.PluginName()
		manifests, err := harness.Render(repo, failing)
		if err == nil {
			t.Fatalf("GenerateManifests succeeded with %d manifests; want the plugin's failure", len(manifests))
		}
		for _, want := range []string{"render failed: no tag of demo/web matches ~9.x", "exit status 3"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "partial output") {
			t.Errorf("error carries the failed plugin's stdout: %q", err)
		}
		t.Logf("GenerateManifests error: %v", err)
	})

	t.Run("unknown plugin name", func(t *testing.T) {
		missing := app
		missing.Plugin = "image-resolver-v0"
		if _, err := harness.Render(repo, missing); err == nil || !strings.Contains(err.Error(), "image-resolver-v0") {
			t.Fatalf("err = %v, want one naming the missing plugin", err)
		}
	})

	t.Run("streamed revision (argocd app diff --local --server-side-generate)", func(t *testing.T) {
		manifests, err := harness.RenderStreamed(repo.Root, app)
		if err != nil {
			t.Fatal(err)
		}
		objs := harness.Decode(t, manifests)
		if len(objs) != 2 {
			t.Fatalf("got %d objects", len(objs))
		}
		env := stringMap(t, objs[1], "data")
		if env["ARGOCD_APP_REVISION"] != harness.StreamedRevision || env["ARGOCD_APP_REVISION_SHORT"] != "streame" {
			t.Errorf("revision env = %q/%q, want streamed/streame", env["ARGOCD_APP_REVISION"], env["ARGOCD_APP_REVISION_SHORT"])
		}
	})

	t.Run("registry answers /v2/ and paginates tag lists", func(t *testing.T) {
		reg := harness.StartRegistry(t)
		resp, err := http.Get("http://" + reg.Host + "/v2/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Distribution-Api-Version") != "registry/2.0" {
			t.Fatalf("GET /v2/: %s %v", resp.Status, resp.Header)
		}
		tags := []string{"1.0.0", "1.1.0", "1.2.0", "2.0.0", "latest"}
		for _, tag := range tags {
			if _, err := reg.PushImage("demo/web", tag); err != nil {
				t.Fatal(err)
			}
		}
		pages, err := reg.TagPages("demo/web")
		if err != nil {
			t.Fatal(err)
		}
		var all []string
		for i, p := range pages {
			if len(p) > harness.DefaultMaxTags {
				t.Errorf("page %d has %d tags, more than tags.maxtags=%d", i, len(p), harness.DefaultMaxTags)
			}
			all = append(all, p...)
		}
		if len(pages) != 3 || !reflect.DeepEqual(all, tags) {
			t.Fatalf("pages = %v, want %v in pages of %d", pages, tags, harness.DefaultMaxTags)
		}

		reg.Stop()
		if reg.Running() {
			t.Fatal("registry still running after Stop")
		}
		client := &http.Client{Timeout: 2 * time.Second}
		if resp, err := client.Get("http://" + reg.Host + "/v2/"); err == nil {
			resp.Body.Close()
			t.Fatalf("stopped registry still answers: %s", resp.Status)
		}
	})

	t.Run("a missing registry binary says how to build it", func(t *testing.T) {
		t.Setenv("E2E_REGISTRY_BIN", filepath.Join(t.TempDir(), "no-registry"))
		if _, err := os.Stat(harness.RegistryBinary()); err == nil {
			t.Fatalf("%s exists; E2E_REGISTRY_BIN was not honoured", harness.RegistryBinary())
		}
		msg := runExpectingFatal(t, func(tb testing.TB) { harness.StartRegistry(tb) })
		if !strings.Contains(msg, "make e2e-registry") {
			t.Fatalf("message %q does not say to run make e2e-registry", msg)
		}
	})
}

// images returns every container and initContainer image of a pod template or pod,
// CronJob included, in document order.
func images(obj interface{ UnstructuredContent() map[string]any }) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, key := range []string{"initContainers", "containers", "ephemeralContainers"} {
				if list, ok := x[key].([]any); ok {
					for _, c := range list {
						if m, ok := c.(map[string]any); ok {
							if img, ok := m["image"].(string); ok {
								out = append(out, img)
							}
						}
					}
				}
			}
			for _, key := range []string{"spec", "template", "jobTemplate"} {
				if child, ok := x[key]; ok {
					walk(child)
				}
			}
		}
	}
	walk(obj.UnstructuredContent())
	return out
}

func stringMap(t *testing.T, obj interface{ UnstructuredContent() map[string]any }, key string) map[string]string {
	t.Helper()
	raw, ok := obj.UnstructuredContent()[key].(map[string]any)
	if !ok {
		t.Fatalf("object has no %s map: %v", key, obj.UnstructuredContent())
	}
	out := map[string]string{}
	for k, v := range raw {
		s, _ := v.(string)
		out[k] = s
	}
	return out
}

func assertSameJSON(t *testing.T, what, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Errorf("%s = %q is not JSON: %v", what, got, err)
		return
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

// runExpectingFatal runs f with a testing.TB whose Fatal records the message and
// stops f's goroutine; it returns the message ("" if f did not fail).
func runExpectingFatal(t *testing.T, f func(testing.TB)) string {
	t.Helper()
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil && r != errFatal {
				panic(r)
			}
		}()
		f(rec)
	}()
	<-done
	return rec.msg
}

type fatalSentinel struct{}

var errFatal = fatalSentinel{}

type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(errFatal)
}
func (r *fatalRecorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	panic(errFatal)
}
