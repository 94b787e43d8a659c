package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/e2e/harness"
)

// sampleAppDefaults are the four apps of testdata/apps with their own policy files
// and no parameters, and the images TestSampleApps expects of them.
var sampleAppDefaults = []struct {
	app  harness.App
	want map[string][]string // "Kind/name" ("Kind/": the only one) -> images
}{
	{harness.App{Name: "helm-web", Namespace: "demo", Path: "apps/helm-web"},
		map[string][]string{"Deployment/": {webRepo + ":1.2.0"}}},
	{harness.App{Name: "kustomize-overlay", Namespace: "demo", Path: "apps/kustomize-overlay/overlay"},
		map[string][]string{"Deployment/api": {harness.DemoHost + "/demo/api:1.4.2"}}},
	{harness.App{Name: "plain-cron", Namespace: "demo", Path: "apps/plain-cron"},
		map[string][]string{
			"CronJob/nightly-report": {batchRepo + ":12"},
			"Deployment/web":         {webRepo + ":1.2.0", webRepo + ":1.2.0"},
		}},
	{harness.App{Name: "arm64-pinned", Namespace: "demo", Path: "apps/arm64-pinned"},
		map[string][]string{"Deployment/web-arm": {webRepo + ":1.2.0"}}},
}

// TestSampleAppsThroughDaemon runs the sidecar as deployed with the daemon: `serve`
// as a process holding the registries config, and generate (run by Argo CD's
// cmp-server) with IMAGE_RESOLVER_SOCKET and no registries config of its own, so it
// can only get answers from the daemon. Every sample app is rendered through
// GenerateManifests three times: cold, which fills the daemon's cache; again at a new
// commit, which must not reach the registry at all and must give the same bytes; and
// with the daemon stopped, when generate falls back to resolving directly.
func TestSampleAppsThroughDaemon(t *testing.T) {
	start := time.Now()
	reg := harness.StartRegistry(t)
	reg.Seed(t, scenario)
	registries := reg.WriteRegistriesConfig(t)
	// The cache's defaults (tag lists fresh 2m, refresh-ahead in their last 20%)
	// would not fire within this test either; explicit, a slow machine cannot turn a
	// background refresh into a request of the second pass.
	daemon := harness.StartDaemon(t, registries, "--tag-ttl", "10m", "--head-ttl", "1h", "--refresh-ahead", "0")
	t.Setenv(harness.SocketEnv, daemon.Socket)
	// harness.Main cleared the shell's IMAGE_RESOLVER_* variables, and nothing here
	// sets the registries config: registry.demo.local does not resolve, so a
	// generate that did not ask the daemon would fail.
	if v, ok := os.LookupEnv(harness.RegistriesConfigEnv); ok {
		t.Fatalf("%s=%q is set in the test process; generate must not reach the registry on its own", harness.RegistriesConfigEnv, v)
	}
	harness.StartRepoPlugin(t)
	stderr := harness.CapturePluginStderr(t)
	repo := sampleRepo(t)
	t.Logf("registry, daemon and cmp-server up in %s", time.Since(start).Round(time.Millisecond))

	// renderAll renders every sample app at the repository's HEAD, checks its
	// images and returns each app's manifests as GenerateManifests gave them.
	renderAll := func(t *testing.T, pass string) map[string][]string {
		t.Helper()
		begin := time.Now()
		out := map[string][]string{}
		for _, tc := range sampleAppDefaults {
			manifests, err := harness.Render(repo, tc.app)
			if err != nil {
				t.Fatalf("%s: rendering %s at %s: %v", pass, tc.app.Name, repo.SHA[:8], err)
			}
			objs := objects(harness.Decode(t, manifests))
			for key, want := range tc.want {
				obj := objs.get(t, key)
				if got := images(obj); !equal(got, want) {
					t.Errorf("%s: %s %s %s images = %v, want %v", pass, tc.app.Name, obj.GetKind(), obj.GetName(), got, want)
				}
				if resolverAnnotations(obj) == "" {
					t.Errorf("%s: %s %s %s has no resolver annotation", pass, tc.app.Name, obj.GetKind(), obj.GetName())
				}
			}
			out[tc.app.Name] = manifests
		}
		t.Logf("%s: %d apps rendered in %s", pass, len(out), time.Since(begin).Round(time.Millisecond))
		return out
	}
	// sameManifests fails unless got is byte for byte want, app by app.
	sameManifests := func(t *testing.T, pass string, want, got map[string][]string) {
		t.Helper()
		for _, tc := range sampleAppDefaults {
			w, g := want[tc.app.Name], got[tc.app.Name]
			if slices.Equal(w, g) {
				continue
			}
			if len(w) != len(g) {
				t.Errorf("%s: %s rendered %d manifests, the cold render %d", pass, tc.app.Name, len(g), len(w))
				continue
			}
			for i := range w {
				if w[i] != g[i] {
					t.Errorf("%s: %s manifest %d differs from the cold render:\n got %s\nwant %s", pass, tc.app.Name, i, g[i], w[i])
				}
			}
		}
	}
	// noFallback fails if a generate run resolved without the daemon.
	noFallback := func(t *testing.T, pass string) {
		t.Helper()
		runs := stderr.Runs()
		if len(runs) != len(sampleAppDefaults) {
			t.Errorf("%s: captured the stderr of %d plugin runs, want %d", pass, len(runs), len(sampleAppDefaults))
		}
		for i, s := range runs {
			if strings.Contains(s, "unreachable") {
				t.Errorf("%s: run %d fell back to resolving directly: %s", pass, i, s)
			}
		}
		stderr.Reset()
	}

	mark0 := reg.Sync(t)

	// 1. Cold: the daemon fetches everything once.
	cold := renderAll(t, "cold, through the daemon")
	noFallback(t, "cold")
	mark1 := reg.Sync(t)
	coldReqs := reg.Requests()[mark0:mark1]
	if len(coldReqs) == 0 {
		t.Fatal("the daemon made no registry request for four cold renders")
	}
	t.Logf("cold: the daemon made %d registry requests: %s", len(coldReqs), summarize(coldReqs))

	// 2. Warm, at a new commit: GenerateManifests runs the plugin again (there is no
	// repo-server cache in this path, and the revision differs anyway); every answer
	// comes from the daemon's cache.
	firstSHA := repo.SHA
	repo.WriteFile(t, "NOTES.md", "an unrelated change\n")
	if repo.Commit(t, "unrelated change") == firstSHA {
		t.Fatal("the second commit has the first one's SHA")
	}
	warm := renderAll(t, "warm, through the daemon")
	noFallback(t, "warm")
	mark2 := reg.Sync(t)
	if warmReqs := reg.Requests()[mark1:mark2]; len(warmReqs) != 0 {
		t.Errorf("warm: the registry saw %d requests, want 0 (all within the daemon's TTLs): %s", len(warmReqs), summarize(warmReqs))
	}
	sameManifests(t, "warm", cold, warm)

	// 3. The daemon is gone: generate says so in one stderr line and resolves
	// directly. Pointed at a registry endpoint where nothing listens, that fails,
	// naming the daemon and the endpoint it could not reach (a closed loopback port,
	// so the outcome does not depend on how this machine resolves registry.demo.local)...
	daemon.Stop()
	if daemon.Running() {
		t.Fatal("daemon still running after Stop")
	}
	closed := filepath.Join(t.TempDir(), "closed.yaml")
	if err := os.WriteFile(closed, []byte("registries:\n- prefix: "+harness.DemoHost+"\n  api: 127.0.0.1:1\n  insecure: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(harness.RegistriesConfigEnv, closed)
	_, err := harness.Render(repo, sampleAppDefaults[0].app)
	switch {
	case err == nil:
		t.Errorf("with the daemon stopped and the registry unreachable, %s rendered", sampleAppDefaults[0].app.Name)
	case !strings.Contains(err.Error(), "daemon unreachable") || !strings.Contains(err.Error(), "127.0.0.1:1"):
		t.Errorf("with the daemon stopped and the registry unreachable, the error must name %q and 127.0.0.1:1: %v", "daemon unreachable", err)
	default:
		t.Logf("fallback to an unreachable registry: %v", err)
	}
	stderr.Reset()

	// ...and with one, every app renders as before. The cmp-server builds each
	// plugin run's environment from os.Environ() at that run
	// (cmpserver/plugin.runCommand), so setting it here reaches the next generate.
	t.Setenv(harness.RegistriesConfigEnv, registries)
	direct := renderAll(t, "daemon stopped, direct")
	mark3 := reg.Sync(t)
	directReqs := reg.Requests()[mark2:mark3]
	if len(directReqs) == 0 {
		t.Error("with the daemon stopped the registry saw no request: where did the answers come from?")
	}
	t.Logf("daemon stopped: generate made %d registry requests directly (the daemon's cold pass made %d): %s",
		len(directReqs), len(coldReqs), summarize(directReqs))
	runs := stderr.Runs()
	if len(runs) != len(sampleAppDefaults) {
		t.Errorf("daemon stopped: captured the stderr of %d plugin runs, want %d", len(runs), len(sampleAppDefaults))
	}
	for i, s := range runs {
		if lines := strings.Split(strings.TrimSpace(s), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "daemon unreachable") {
			t.Errorf("daemon stopped: run %d must say %q in one stderr line, said %q", i, "daemon unreachable", s)
		}
	}
	sameManifests(t, "daemon stopped", cold, direct)
	t.Logf("total %s", time.Since(start).Round(time.Millisecond))
}

// summarize counts requests by method and the path up to its last element
// ("GET /v2/demo/web/tags/list x3").
func summarize(reqs []harness.Request) string {
	counts := map[string]int{}
	var keys []string
	for _, r := range reqs {
		path, _, _ := strings.Cut(r.URI, "?")
		if i := strings.LastIndex(path, "/"); i > 0 && (strings.Contains(path, "/manifests/") || strings.Contains(path, "/blobs/")) {
			path = path[:i] + "/*"
		}
		k := fmt.Sprintf("%s %s %d", r.Method, path, r.Status)
		if counts[k] == 0 {
			keys = append(keys, k)
		}
		counts[k]++
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %s x%d", k, counts[k])
	}
	return b.String()
}
