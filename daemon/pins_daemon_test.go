package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/notify"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// checkout writes the app directory apps/web of the repository's main branch into
// a fresh directory, as Argo CD extracts a commit for a render.
func checkout(t *testing.T, g *gittest.Server, repo string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"deployment.yaml", pin.PinsFile} {
		if !g.HasFile(t, repo, "main", "apps/web/"+f) {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(g.File(t, repo, "main", "apps/web/"+f)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func pinEnviron(t *testing.T, repoURL string, params map[string]string) []string {
	t.Helper()
	var ps []map[string]string
	for k, v := range params {
		ps = append(ps, map[string]string{"name": k, "string": v})
	}
	b, _ := json.Marshal(ps)
	return []string{"ARGOCD_APP_NAME=web", "ARGOCD_APP_NAMESPACE=default", "ARGOCD_APP_REVISION=0123456789abcdef0123456789abcdef01234567",
		"ARGOCD_APP_SOURCE_REPO_URL=" + repoURL, "ARGOCD_APP_SOURCE_PATH=apps/web", "ARGOCD_APP_SOURCE_TARGET_REVISION=main",
		"ARGOCD_APP_PARAMETERS=" + string(b)}
}

// waitCommits waits until d's pin writer has written what was submitted, then
// wants the branch to have at least n commits.
func waitCommits(t *testing.T, g *gittest.Server, d *Daemon, written pinFlushes, repo string, n int) []string {
	t.Helper()
	written.waitWritten(t, d)
	log := g.Log(t, repo, "main")
	if len(log) < n {
		t.Fatalf("%d commits on main once the pins were written, want %d: %q", len(log), n, log)
	}
	return log
}

// TestPinModeUseThroughTheDaemon: an app with pin-mode use, on a real git server
// over HTTP with basic auth and a real registry. Its first render resolves live and
// the daemon commits the pin; later renders come from git, also with the registry
// gone; a new tag makes the refresh loop commit the new pin (no Kubernetes call);
// a revert of that commit brings the old image back.
func TestPinModeUseThroughTheDaemon(t *testing.T) {
	reg := rt.New(t)
	pushTags(t, reg, "web", "linux/amd64", "1.0.0", "1.1.0")
	image := reg.Ref("web")
	g := gittest.New(t, gittest.WithBasicAuth("bot", "s3cret-token"))
	repoURL := g.Init(t, "apps.git", map[string]string{"apps/web/deployment.yaml": deploymentOf(image + ":1.0.0")})

	t.Setenv("PIN_TOKEN", "s3cret-token")
	cfg := testConfig()
	cfg.TagTTL = time.Second
	cfg.RefreshAhead = 0
	cfg.Git.Author = "Pin Bot <pins@example.com>"
	cfg.Git.BatchWindow = config.Duration(50 * time.Millisecond)
	cfg.Git.Credentials = []config.GitCredential{{Prefix: g.URL + "/", Username: "bot", PasswordEnv: "PIN_TOKEN"}}
	notifier := &fakeNotifier{}
	clock := newFakeClock()
	written, watch := watchPinWrites()
	d, _ := startDaemon(t, cfg, WithNotifier(notifier), WithRefreshEvery(time.Hour), withClock(clock), watch)
	setTrackerClock(d, clock)
	params := map[string]string{"image-list": "web=" + image + ":~1", "pin-mode": "use", "web.platforms": "linux/amd64"}

	// 1. No pin yet: live, and pinned.
	out := delegatedRender(t, d.cfg.Socket, checkout(t, g, "apps.git"), pinEnviron(t, repoURL, params))
	if !strings.Contains(out, image+":1.1.0") {
		t.Fatalf("first render:\n%s", out)
	}
	log := waitCommits(t, g, d, written, "apps.git", 2)
	// The pin commit landed on the branch the app renders: Argo CD is asked to
	// look again (a normal refresh), not left to its 3-minute poll.
	if got := notifier.waitNormal(t, 1); len(got) != 1 || got[0] != (notify.App{Namespace: "argocd", Name: "web"}) {
		t.Errorf("normal refreshes after the pin commit: %v, want argocd/web once", got)
	}
	pins := g.File(t, "apps.git", "main", "apps/web/"+pin.PinsFile)
	if !strings.Contains(pins, "reference: "+image+":1.1.0") || !strings.Contains(log[0], "web") {
		t.Fatalf("commit %q, pins file:\n%s", log[0], pins)
	}
	if got := g.Show(t, "apps.git", "main", "-s", "--format=%an <%ae>"); !strings.Contains(got, "Pin Bot <pins@example.com>") {
		t.Errorf("author %q", got)
	}

	firstPins := pins

	// 2. A new tag: the refresh loop commits the new pin; no Kubernetes call.
	pushTags(t, reg, "web", "linux/amd64", "1.0.0", "1.1.0", "1.2.0")
	clock.Advance(cfg.TagTTL + 100*time.Millisecond) // the tag list expires
	d.Refresher.Pass(context.Background())
	log = waitCommits(t, g, d, written, "apps.git", 3)
	if got := notifier.waitNormal(t, 2); len(got) != 2 {
		t.Errorf("normal refreshes after the second pin commit: %v, want 2 in all", got)
	}
	if pins := g.File(t, "apps.git", "main", "apps/web/"+pin.PinsFile); !strings.Contains(pins, "reference: "+image+":1.2.0") {
		t.Fatalf("after the new tag, commit %q, pins file:\n%s", log[0], pins)
	}
	out = delegatedRender(t, d.cfg.Socket, checkout(t, g, "apps.git"), pinEnviron(t, repoURL, params))
	if !strings.Contains(out, image+":1.2.0") {
		t.Fatalf("render of the new pin commit:\n%s", out)
	}

	// 3. A person reverts that commit: the app renders 1.1.0 again, and the loop
	// does not pin 1.2.0 again: the writer reads the revert in git and holds 1.2.0.
	g.Commit(t, "apps.git", "main", map[string]string{"apps/web/" + pin.PinsFile: firstPins}, "Revert the pin of web to 1.2.0")
	out = delegatedRender(t, d.cfg.Socket, checkout(t, g, "apps.git"), pinEnviron(t, repoURL, params))
	if !strings.Contains(out, image+":1.1.0") {
		t.Fatalf("render after the revert:\n%s", out)
	}
	clock.Advance(cfg.RefreshInterval + cfg.TagTTL) // the interval since the last pin, and the tag list
	d.Refresher.Pass(context.Background())
	written.waitWritten(t, d) // what the render and the pass submitted: a commit would have landed
	if log := g.Log(t, "apps.git", "main"); len(log) != 5 || log[0] != "argocd-image-resolver: hold web 1.2.0 (web)" {
		t.Errorf("commits after the revert: %q, want the hold of 1.2.0 last", log)
	}
	if pins := g.File(t, "apps.git", "main", "apps/web/"+pin.PinsFile); !strings.Contains(pins, "reference: "+image+":1.1.0") {
		t.Errorf("pins file after the revert:\n%s", pins)
	}

	// 4. From git, with the registry gone.
	reg.Close()
	out = delegatedRender(t, d.cfg.Socket, checkout(t, g, "apps.git"), pinEnviron(t, repoURL, params))
	if !strings.Contains(out, image+":1.1.0") || !strings.Contains(out, "(pinned in "+pin.PinsFile+")") {
		t.Fatalf("render from pins with the registry down:\n%s", out)
	}

	g.NoForcePush(t, "apps.git", "main")
	if notifier.count() != 0 {
		t.Errorf("%d hard refreshes for a pin-mode use app", notifier.count())
	}
}

func deploymentOf(image string) string {
	return "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n        - name: web\n          image: " + image + "\n"
}

// TestPinModeWriteThroughTheDaemon: pin-mode write renders live and records the
// references in git, a commit only when they change; a push the server refuses
// leaves the app rendering and says why in its next render's stderr.
func TestPinModeWriteThroughTheDaemon(t *testing.T) {
	reg := rt.New(t)
	pushTags(t, reg, "web", "linux/amd64", "1.0.0", "1.1.0")
	image := reg.Ref("web")
	g := gittest.New(t, gittest.WithBasicAuth("bot", "right"))
	repoURL := g.Init(t, "apps.git", map[string]string{"apps/web/deployment.yaml": deploymentOf(image + ":1.0.0")})
	t.Setenv("PIN_TOKEN", "wrong")
	cfg := testConfig()
	cfg.Git.BatchWindow = config.Duration(20 * time.Millisecond)
	cfg.Git.Credentials = []config.GitCredential{{Prefix: g.URL + "/", Username: "bot", PasswordEnv: "PIN_TOKEN"}}
	written, watch := watchPinWrites()
	d, _ := startDaemon(t, cfg, WithNotifier(&fakeNotifier{}), WithRefreshEvery(time.Hour), watch)
	params := map[string]string{"image-list": "web=" + image + ":~1", "pin-mode": "write"}

	render := func() *api.GenerateResponse {
		t.Helper()
		resp, err := api.Call(context.Background(), d.cfg.Socket, api.GenerateRequest{Dir: checkout(t, g, "apps.git"), Environ: pinEnviron(t, repoURL, params)})
		if err != nil || resp.ExitCode != 0 {
			t.Fatalf("render: %v %+v", err, resp)
		}
		return resp
	}
	// Refused credentials: the render works; the next one after the refused
	// write says why nothing was committed.
	render()
	select {
	case <-written: // the write was refused, and the daemon told (it then queues it again)
	case <-time.After(time.Minute):
		t.Fatal("the pins of the first render were not tried within a minute")
	}
	resp := render()
	if !strings.Contains(resp.Stderr, "pins not committed") || !strings.Contains(resp.Stderr, "refused the credentials") || strings.Contains(resp.Stderr, "wrong") {
		t.Fatalf("stderr after a refused push: %q", resp.Stderr)
	}
	if !strings.Contains(string(resp.Stdout), image+":1.1.0") {
		t.Errorf("the app stopped rendering live: %s", resp.Stdout)
	}

	// The right token: the pin is committed (once).
	t.Setenv("PIN_TOKEN", "right")
	render()
	waitCommits(t, g, d, written, "apps.git", 2)
	if pins := g.File(t, "apps.git", "main", "apps/web/"+pin.PinsFile); !strings.Contains(pins, "reference: "+image+":1.1.0") {
		t.Fatalf("pins file:\n%s", pins)
	}
	render()
	render()
	written.waitWritten(t, d)
	if log := g.Log(t, "apps.git", "main"); len(log) != 2 {
		t.Errorf("renders with the same answer made commits: %q", log)
	}
}

// TestPinsOnARevisionThatIsNoBranch: an app following a tag pattern has no branch
// to commit to; its render says so and nothing is queued.
func TestPinsOnARevisionThatIsNoBranch(t *testing.T) {
	reg := rt.New(t)
	pushTags(t, reg, "web", "linux/amd64", "1.0.0")
	image := reg.Ref("web")
	g := gittest.New(t)
	repoURL := g.Init(t, "apps.git", map[string]string{"apps/web/deployment.yaml": deploymentOf(image + ":1.0.0")})
	written, watch := watchPinWrites()
	d, _ := startDaemon(t, testConfig(), WithNotifier(&fakeNotifier{}), WithRefreshEvery(time.Hour), watch)
	env := pinEnviron(t, repoURL, map[string]string{"image-list": "web=" + image + ":~1", "pin-mode": "write"})
	for i, kv := range env {
		if strings.HasPrefix(kv, "ARGOCD_APP_SOURCE_TARGET_REVISION=") {
			env[i] = "ARGOCD_APP_SOURCE_TARGET_REVISION=v1.*"
		}
	}
	resp, err := api.Call(context.Background(), d.cfg.Socket, api.GenerateRequest{Dir: checkout(t, g, "apps.git"), Environ: env})
	if err != nil || resp.ExitCode != 0 {
		t.Fatalf("render: %v %+v", err, resp)
	}
	if !strings.Contains(resp.Stderr, "pins not committed") || !strings.Contains(resp.Stderr, `"v1.*"`) || !strings.Contains(resp.Stderr, "pin-branch") {
		t.Errorf("stderr %q", resp.Stderr)
	}
	// Nothing queued (a render submits before it answers), so nothing to wait
	// for: no batch window to sleep through.
	if n := d.pins.(*pin.Writer).Pending(); n != 0 {
		t.Errorf("%d pins queued for a revision that is no branch", n)
	}
	written.waitWritten(t, d)
	if log := g.Log(t, "apps.git", "main"); len(log) != 1 {
		t.Errorf("commits: %q", log)
	}
}
