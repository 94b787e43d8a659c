package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/e2e/harness"
)

// pinsFileName is the pins target's file (pin.PinsFile of the main module, which
// this module may not import).
const pinsFileName = ".argocd-image-resolver.pins.yaml"

// pinnedApp is a plain-YAML app whose web image is written at a tag no registry
// has: whatever the manifests carry comes from the resolver.
const pinnedApp = `apiVersion: apps/v1
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
          image: registry.demo.local/demo/web:0.0.1
`

// pinnedAppPins pins web to 1.0.0, not the newest tag the policy allows (1.1.0,
// 1.2.0 for arm64): a render that used the registry would not pick it.
const pinnedAppPins = `# pinned by hand for this test
pins:
  web:
    image: registry.demo.local/demo/web
    reference: registry.demo.local/demo/web:1.0.0
    tag: 1.0.0
`

// TestPinModeUseFromGit: an app with pin-mode use whose directory holds a pins
// file renders, through Argo CD's cmp-server and the sidecar's daemon, the pinned
// reference without asking the registry: no request while it is up, the same
// bytes once it is gone. The same app with pin-mode off, the registry gone and a
// daemon that never saw the image, fails naming the image and the refused
// connection: the render above came from the pins, not from a cache.
func TestPinModeUseFromGit(t *testing.T) {
	start := time.Now()
	reg := harness.StartRegistry(t)
	reg.Seed(t, scenario)
	registries := reg.WriteRegistriesConfig(t)
	// --refresh off: the loop's passes would ask the registry in the background (the
	// passes of a pin-mode use app look for new tags to pin), and this test counts
	// the render's requests.
	daemon := harness.StartDaemon(t, registries, "--refresh", "off")
	harness.StartRepoPlugin(t)
	stderr := harness.CapturePluginStderr(t)

	repo := harness.NewGitRepo(t)
	repo.WriteFile(t, "apps/pinned/deployment.yaml", pinnedApp)
	repo.WriteFile(t, "apps/pinned/"+pinsFileName, pinnedAppPins)
	repo.Commit(t, "an app with a pin")
	app := func(pinMode string) harness.App {
		return harness.App{Name: "pinned", Namespace: "pinned", Path: "apps/pinned",
			Parameters: params("image-list", "web="+webRepo+":~1", "pin-mode", pinMode)}
	}
	t.Logf("registry, daemon and cmp-server up in %s", time.Since(start).Round(time.Millisecond))

	// What the policy picks from the registry: not the pin. A render without the
	// daemon (a socket nobody listens on), resolving directly with the registries
	// config, so that the daemon's cache stays cold for the last step.
	t.Run("the policy alone picks a newer tag", func(t *testing.T) {
		t.Setenv(harness.SocketEnv, filepath.Join(t.TempDir(), "nobody.sock"))
		t.Setenv(harness.RegistriesConfigEnv, registries)
		objs := harness.MustRender(t, repo, app("off"))
		expectImages(t, objs, map[string][]string{"Deployment/web": {webRepo + ":1.2.0"}})
		stderr.Reset()
	})

	// From here on generate reaches the daemon, and only the daemon has the
	// registries config (harness.Main cleared the shell's IMAGE_RESOLVER_*).
	t.Setenv(harness.SocketEnv, daemon.Socket)
	if v, ok := os.LookupEnv(harness.RegistriesConfigEnv); ok {
		t.Fatalf("%s=%q is set in the test process; generate must not reach the registry on its own", harness.RegistriesConfigEnv, v)
	}
	wantResolved := "web=" + webRepo + ":1.0.0 (pinned in " + pinsFileName + ")"
	checkPinned := func(t *testing.T, pass string) []string {
		t.Helper()
		manifests, err := harness.Render(repo, app("use"))
		if err != nil {
			t.Fatalf("%s: render with pin-mode use: %v", pass, err)
		}
		objs := objects(harness.Decode(t, manifests))
		web := objs.get(t, "Deployment/web")
		if got, want := images(web), []string{webRepo + ":1.0.0"}; !equal(got, want) {
			t.Errorf("%s: Deployment/web images = %v, want %v", pass, got, want)
		}
		if got := web.GetAnnotations()["argocd-image-resolver/resolved"]; got != wantResolved {
			t.Errorf("%s: argocd-image-resolver/resolved = %q, want %q", pass, got, wantResolved)
		}
		runs := stderr.Runs()
		if len(runs) != 1 {
			t.Errorf("%s: captured the stderr of %d plugin runs, want 1", pass, len(runs))
		}
		for _, s := range runs {
			if strings.Contains(s, "unreachable") || strings.Contains(s, "pins not committed") {
				t.Errorf("%s: plugin stderr: %s", pass, s)
			}
		}
		stderr.Reset()
		return manifests
	}

	mark := reg.Sync(t)
	up := checkPinned(t, "registry up")
	if reqs := reg.Requests()[mark:reg.Sync(t)]; len(reqs) != 0 {
		t.Errorf("a render of pinned images asked the registry %d times: %s", len(reqs), summarize(reqs))
	}

	reg.Stop()
	down := checkPinned(t, "registry down")
	if !slices.Equal(up, down) {
		t.Errorf("with the registry down the manifests differ:\n got %v\nwant %v", down, up)
	}

	// Without the pins the same app needs the registry, and says it is gone.
	msg := expectRenderError(t, repo, app("off"), "demo/web", "Deployment.apps/web", "connection refused")
	if !strings.Contains(msg, reg.Host) && !strings.Contains(msg, harness.DemoHost) {
		t.Errorf("error names neither the registry %s nor %s: %s", reg.Host, harness.DemoHost, msg)
	}
	if strings.Contains(daemon.Logs(), "pins committed") || strings.Contains(daemon.Logs(), "pin change") {
		t.Errorf("the daemon tried to commit pins of an app whose images are all pinned:\n%s", daemon.Logs())
	}
	t.Logf("done in %s", time.Since(start).Round(time.Millisecond))
}
