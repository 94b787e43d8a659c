package argocde2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// shippedSidecar restarts the sidecar as shipped (tag TTL 2m, digest TTL 1h,
// refresh interval 3m: no TTL flags) with extra flags and configuration, and
// restores the lab's sidecar when the test ends.
func shippedSidecar(t *testing.T, lab *Lab, args []string, configYAML string) {
	t.Helper()
	cfg := ""
	if lab.Gitea != nil {
		b, err := os.ReadFile(lab.sidecarConfig())
		if err != nil {
			t.Fatal(err)
		}
		cfg = string(b)
	}
	path := filepath.Join(lab.Dir, "sidecar-config-shipped.yaml")
	if err := os.WriteFile(path, []byte(cfg+configYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	ttls, interval := lab.SidecarTTLs, lab.RefreshInterval
	lab.SidecarTTLs, lab.RefreshInterval, lab.SidecarArgs, lab.SidecarConfig = nil, "3m", args, path
	t.Cleanup(func() {
		lab.SidecarTTLs, lab.RefreshInterval, lab.SidecarArgs, lab.SidecarConfig = ttls, interval, nil, ""
		if err := lab.RestartSidecar(); err != nil {
			t.Errorf("restoring the lab's sidecar: %v", err)
		}
	})
	if err := lab.RestartSidecar(); err != nil {
		t.Fatal(err)
	}
}

// commitApp adds files to the lab's repository and pushes them.
func commitApp(t *testing.T, lab *Lab, msg string, files map[string]string) {
	t.Helper()
	work := lab.GitWork
	if _, err := lab.must("", "git", "-C", work, "pull", "-q", "--ff-only", "origin", "main"); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		p := filepath.Join(work, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range [][]string{
		{"git", "-C", work, "add", "-A"},
		{"git", "-C", work, "-c", "user.name=e2e", "-c", "user.email=e2e@127.0.0.1", "commit", "-q", "-m", msg},
		{"git", "-C", work, "push", "-q", "origin", "main"},
	} {
		if _, err := lab.must("", c...); err != nil {
			t.Fatal(err)
		}
	}
}

// deploymentOf is a plain-YAML app: one Deployment web running image.
func deploymentOf(image string) string {
	return `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 0
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: ` + image + "\n"
}

// waitOutOfSyncWith waits until app is OutOfSync and renders Deployment/web
// with image, polling as fast as the lab's helpers do (300ms).
func waitOutOfSyncWith(t *testing.T, lab *Lab, app, image string) {
	t.Helper()
	waitApp(t, lab, app, "OutOfSync with "+image, func(a *Application) error {
		if err := SyncStatus("OutOfSync")(a); err != nil {
			return err
		}
		if imgs := get(t, manifests(t, lab, app), "Deployment/web").Images(); !slices.Contains(imgs, image) {
			return fmt.Errorf("%w: images %v", ErrNotYet, imgs)
		}
		return nil
	})
}

// testRegistryWebhooks: the sidecar as shipped (tag TTL 2m, a pass every 30s,
// refresh interval 3m) with its registry webhook listener on, and a CNCF
// distribution registry sending its notifications there (Authorization: Bearer).
// An app follows hooks/web ~1 on it. Five tags pushed one after the other with
// go-containerregistry's remote.Write each make the app OutOfSync with the new
// image within seconds, with no hard refresh by hand: without the webhook the
// first would wait for the 2m TTL. The time from the push's end to OutOfSync is
// logged for each (e2e/README.md has the figures); the test fails past 60s, which
// only a TTL expiry could explain.
func testRegistryWebhooks(t *testing.T, lab *Lab) {
	secret := randomHex(24)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	hookAddr := fmt.Sprintf("127.0.0.1:%d", port)
	secretFile := filepath.Join(lab.Dir, "webhook-distribution.secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg, err := lab.StartDistribution("http://"+hookAddr+"/webhooks/distribution", secret)
	if err != nil {
		t.Fatal(err)
	}
	shippedSidecar(t, lab, []string{"--webhook-addr", hookAddr}, "webhooks:\n  distribution: {secretFile: "+secretFile+"}\n")

	repo := reg.Host + "/hooks/web"
	if err := lab.PushTag(reg.Host, "hooks/web", "1.0.0"); err != nil {
		t.Fatal(err)
	}
	commitApp(t, lab, "an app on the webhook registry", map[string]string{"apps/hooks-web/deployment.yaml": deploymentOf(repo + ":1.0.0")})
	createAppFromFile(t, lab, AppSpec{Name: "hooks", Path: "apps/hooks-web", Namespace: "hooks",
		Params: [][2]string{{"image-list", "web=" + repo + ":~1"}}})
	waitCompared(t, lab, "hooks")
	wantImages(t, "hooks", get(t, manifests(t, lab, "hooks"), "Deployment/web"), repo+":1.0.0")
	syncApp(t, lab, "hooks")

	var took []time.Duration
	for i := 1; i <= 5; i++ {
		tag := fmt.Sprintf("1.%d.0", i)
		if err := lab.PushTag(reg.Host, "hooks/web", tag); err != nil {
			t.Fatal(err)
		}
		pushed := time.Now()
		waitOutOfSyncWith(t, lab, "hooks", repo+":"+tag)
		took = append(took, time.Since(pushed))
		syncApp(t, lab, "hooks")
	}
	slices.Sort(took)
	t.Logf("push -> app OutOfSync with the new image (shipped TTLs, webhook), 5 pushes: min %s, median %s, max %s",
		took[0].Round(10*time.Millisecond), took[2].Round(10*time.Millisecond), took[4].Round(10*time.Millisecond))
	if took[4] > time.Minute {
		t.Errorf("a push took %s to reach the app: the webhook did not act (the tag TTL is 2m)", took[4])
	}
	if v, err := lab.MetricValue(`argocd_image_resolver_webhook_events_total{kind="distribution",outcome="accepted"}`); err != nil || v < 5 {
		t.Errorf("webhook events accepted: %v (%v), want at least 5", v, err)
	}
	if lines := lab.LogLines("sidecar", "refresh requested", "application=argocd/hooks "); len(lines) != 5 {
		t.Errorf("%d refresh requests of hooks, want 5 (one per push, the refresh interval notwithstanding)", len(lines))
	}
}

// testHardRefreshByHand: the sidecar as shipped (tag TTL 2m), no webhook for the
// registry: a person pushes a tag and at once runs argocd app get --hard-refresh.
// The render that causes is a render again of the app's revision, so it reads the
// tag list again: the new tag is in that render, 20 times out of 20. Each push
// comes at least revalidateAfter (5s) after the last read of its repository's
// list, the bound that makes a storm of hard refreshes cost one list
// (docs/freshness.md); the tries go round byHandApps apps, each with a
// repository of its own, so that the bound is kept without waiting it out.
func testHardRefreshByHand(t *testing.T, lab *Lab) {
	shippedSidecar(t, lab, nil, "")
	const byHandApps = 4
	type byHand struct {
		app, repoPath, repo string
		lastRead            time.Time
	}
	apps := make([]*byHand, byHandApps)
	files := map[string]string{}
	for k := range apps {
		a := &byHand{app: fmt.Sprintf("by-hand-%d", k), repoPath: fmt.Sprintf("demo/byhand-%d", k)}
		a.repo = DemoHost + "/" + a.repoPath
		if err := lab.SeedTag(a.repoPath, "1.0.0"); err != nil {
			t.Fatal(err)
		}
		files["apps/"+a.app+"/deployment.yaml"] = deploymentOf(a.repo + ":1.0.0")
		apps[k] = a
	}
	commitApp(t, lab, "apps for hard refreshes by hand", files)
	// The apps follow their commit, not main: other scenarios commit to main
	// meanwhile (pins), and a render of a new revision is a first render, not
	// the render again that a hard refresh is (CI missed a tag so).
	head, err := lab.must("", "git", "-C", lab.GitWork, "rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range apps {
		createAppFromFile(t, lab, AppSpec{Name: a.app, Path: "apps/" + a.app, Namespace: a.app, Revision: strings.TrimSpace(head),
			Params: [][2]string{{"image-list", "web=" + a.repo + ":~1"}}})
	}
	for _, a := range apps {
		waitCompared(t, lab, a.app)
		a.lastRead = time.Now()
	}
	const tries = 20
	var missed []string
	for i := 1; i <= tries; i++ {
		a := apps[i%byHandApps]
		if wait := 5*time.Second + 500*time.Millisecond - time.Since(a.lastRead); wait > 0 {
			time.Sleep(wait)
		}
		tag := fmt.Sprintf("1.0.%d", i)
		if err := lab.SeedTag(a.repoPath, tag); err != nil {
			t.Fatal(err)
		}
		hardRefresh(t, lab, a.app)
		imgs := get(t, manifests(t, lab, a.app), "Deployment/web").Images()
		// argocd app manifests may render again too (v2.14 does, under another
		// cache key), and its render is a hard refresh that may read the list
		// anew: the app's next push waits for the bound from the end of both.
		a.lastRead = time.Now()
		if !slices.Contains(imgs, a.repo+":"+tag) {
			missed = append(missed, fmt.Sprintf("%s of %s: rendered %s", tag, a.app, strings.Join(imgs, ", ")))
		}
	}
	t.Logf("push -> argocd app get --hard-refresh -> the new tag in that render: %d of %d (over %d apps)", tries-len(missed), tries, byHandApps)
	if len(missed) > 0 {
		t.Errorf("hard refreshes right after a push that missed the new tag:\n%s", strings.Join(missed, "\n"))
	}
}
