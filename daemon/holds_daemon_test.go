package daemon

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// setTrackerClock makes d's refresh loop read its time (the refresh interval)
// from c, as withClock does for its registry cache.
func setTrackerClock(d *Daemon, c *fakeClock) {
	d.Tracker.mu.Lock()
	d.Tracker.now = c.Now
	d.Tracker.mu.Unlock()
}

// pinReplica is one daemon of a test that stops and starts daemons: a restart is
// a new one on the same git and registry.
type pinReplica struct {
	d       *Daemon
	written pinFlushes
	stop    func()
}

// startPinReplica starts a daemon with cfg whose loop and cache run on clock; stop
// ends it (and the test's end does).
func startPinReplica(t *testing.T, cfg config.Config, clock *fakeClock) *pinReplica {
	t.Helper()
	cfg.Socket = socketPath(t)
	written, watch := watchPinWrites()
	d, err := New(cfg, WithLogger(slog.New(slog.DiscardHandler)), WithRemoteOptions(resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain())),
		WithNotifier(&fakeNotifier{}), WithRefreshEvery(time.Hour), withClock(clock), watch)
	if err != nil {
		t.Fatal(err)
	}
	setTrackerClock(d, clock)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-errc:
		cancel()
		t.Fatalf("daemon: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-errc; err != nil {
				t.Errorf("daemon: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &pinReplica{d: d, written: written, stop: stop}
}

// submitted counts the pin changes r's refresh loop submitted.
func (r *pinReplica) submitted() int {
	return int(testutil.ToFloat64(r.d.Metrics.Refreshes.WithLabelValues(outcomePinSubmitted)))
}

func (r *pinReplica) held() int { return int(testutil.ToFloat64(r.d.Metrics.HeldImages)) }

// TestHoldsAcrossRestartsAndReplicas: a person's revert of a pin commit holds
// the reverted reference in git. Two daemons that never saw the pin being made
// (a restart, and another replica) both offer it again once: the writer reads
// the revert from the history and writes one hold, not the pin. From then on
// every daemon, restarted or not, reads the hold from the render and submits
// nothing; a newer tag is pinned once and lifts the hold.
func TestHoldsAcrossRestartsAndReplicas(t *testing.T) {
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
	cfg.Git.BatchWindow = config.Duration(20 * time.Millisecond)
	cfg.Git.Credentials = []config.GitCredential{{Prefix: g.URL + "/", Username: "bot", PasswordEnv: "PIN_TOKEN"}}
	clock := newFakeClock()
	params := map[string]string{"image-list": "web=" + image + ":~1", "pin-mode": "use", "web.platforms": "linux/amd64"}
	pinsPath := "apps/web/" + pin.PinsFile
	render := func(r *pinReplica) *api.GenerateResponse {
		t.Helper()
		resp, err := api.Call(context.Background(), r.d.cfg.Socket, api.GenerateRequest{Dir: checkout(t, g, "apps.git"), Environ: pinEnviron(t, repoURL, params)})
		if err != nil || resp.ExitCode != 0 {
			t.Fatalf("render: %v %+v", err, resp)
		}
		return resp
	}
	// pass makes a pass of each replica after the tag lists and the refresh
	// interval expired, and waits for what they submitted to be written.
	pass := func(rs ...*pinReplica) {
		t.Helper()
		clock.Advance(cfg.RefreshInterval + cfg.TagTTL)
		for _, r := range rs {
			r.d.Refresher.Pass(context.Background())
		}
		for _, r := range rs {
			r.written.waitWritten(t, r.d)
		}
	}
	commits := func(want int) {
		t.Helper()
		if log := g.Log(t, "apps.git", "main"); len(log) != want {
			t.Fatalf("%d commits, want %d: %q", len(log), want, log)
		}
	}

	// A pins 1.1.0 (first render), then 1.2.0 (a new tag); a person reverts
	// 1.2.0; A stops before it sees the revert.
	a := startPinReplica(t, cfg, clock)
	render(a)
	a.written.waitWritten(t, a.d)
	firstPins := g.File(t, "apps.git", "main", pinsPath)
	pushTags(t, reg, "web", "linux/amd64", "1.0.0", "1.1.0", "1.2.0")
	pass(a)
	commits(3)
	g.Commit(t, "apps.git", "main", map[string]string{pinsPath: firstPins}, "Revert the pin of web to 1.2.0")
	a.stop()

	// B (the restart) and C (another replica) render the revert; each offers
	// 1.2.0 once; one hold is written, no pin.
	b, c := startPinReplica(t, cfg, clock), startPinReplica(t, cfg, clock)
	for _, r := range []*pinReplica{b, c} {
		if out := string(render(r).Stdout); !strings.Contains(out, image+":1.1.0") {
			t.Fatalf("render of the revert:\n%s", out)
		}
	}
	pass(b, c)
	commits(5)
	if log := g.Log(t, "apps.git", "main"); log[0] != "argocd-image-resolver: hold web 1.2.0 (web)" {
		t.Errorf("tip %q, want the hold", log[0])
	}
	if b.submitted() != 1 || c.submitted() != 1 {
		t.Errorf("submissions: B %d, C %d; want 1 each", b.submitted(), c.submitted())
	}
	content := g.File(t, "apps.git", "main", pinsPath)
	holds, err := pin.ReadHolds([]byte(content))
	if err != nil || holds["web"].Reference != image+":1.2.0" || !strings.Contains(content, "reference: "+image+":1.1.0") {
		t.Fatalf("pins file (%v):\n%s", err, content)
	}

	// Both render the hold commit: nothing is submitted again, however many
	// passes; a render says the image is held; so does the gauge.
	for _, r := range []*pinReplica{b, c} {
		if resp := render(r); !strings.Contains(resp.Stderr, "held: web "+image+":1.2.0 is not pinned again") {
			t.Errorf("stderr of a render of the hold: %q", resp.Stderr)
		}
	}
	pass(b, c)
	pass(b, c)
	commits(5)
	if b.submitted() != 1 || c.submitted() != 1 || b.held() != 1 || c.held() != 1 {
		t.Errorf("after the hold: submissions B %d C %d, held_images B %d C %d; want 1 1 1 1", b.submitted(), c.submitted(), b.held(), c.held())
	}

	// Another restart: D learns the hold from its first render.
	b.stop()
	d := startPinReplica(t, cfg, clock)
	render(d)
	pass(d, c)
	commits(5)
	if d.submitted() != 0 || d.held() != 1 {
		t.Errorf("restarted: %d submissions, held_images %d; want 0 and 1", d.submitted(), d.held())
	}

	// A newer tag: pinned once, the hold lifted in that commit.
	pushTags(t, reg, "web", "linux/amd64", "1.0.0", "1.1.0", "1.2.0", "1.3.0")
	pass(d, c)
	commits(6)
	content = g.File(t, "apps.git", "main", pinsPath)
	if !strings.Contains(content, "reference: "+image+":1.3.0") || strings.Contains(content, "held") {
		t.Errorf("pins file after the newer tag:\n%s", content)
	}
	g.NoForcePush(t, "apps.git", "main")
}
