package compose

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testio"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// confirmFixture is a real registry, a real git server with one repository of
// n apps, and a writer that confirms pins through the daemon's registry client.
type confirmFixture struct {
	reg  *rt.Server
	git  *gittest.Server
	url  string
	prom *prometheus.Registry
	log  *testio.SyncBuffer
	w    *pin.Writer
}

const confirmRepo = "apps.git"

func newConfirmFixture(t *testing.T, apps int, opts ...pin.WriterOption) *confirmFixture {
	t.Helper()
	f := &confirmFixture{reg: rt.New(t), git: gittest.New(t), prom: prometheus.NewRegistry(), log: &testio.SyncBuffer{}}
	files := map[string]string{"README.md": "apps\n"}
	for i := range apps {
		files[fmt.Sprintf("apps/app-%d/kustomization.yaml", i)] = "resources: []\n"
	}
	f.url = f.git.Init(t, confirmRepo, files)
	remote, _, err := NewRemote(config.DefaultConfig(), nil, nil, resolve.WithoutMemo(),
		resolve.WithRetry(resolve.RetryPolicy{Attempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	base := []pin.WriterOption{pin.WithConfirmer(PinConfirmer(remote)), pin.WithMetrics(f.prom), pin.WithRetry(1, time.Millisecond),
		pin.WithLogger(slog.New(slog.NewTextHandler(f.log, nil)))}
	f.w = pin.NewWriter(append(base, opts...)...)
	return f
}

// push pushes a distinct image to repo:tag and returns its digest.
func (f *confirmFixture) push(t *testing.T, repo, tag, seed string) string {
	t.Helper()
	img := rt.Image(time.Unix(0, 0), "linux/amd64", rt.WithSeed(seed))
	f.reg.Push(t, repo, tag, img)
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// change pins app's alias web to image:tag, resolved at digest.
func (f *confirmFixture) change(t *testing.T, app, repo, tag, digest string) pin.Change {
	t.Helper()
	target, err := pin.ParseTarget(pin.TargetPins, nil)
	if err != nil {
		t.Fatal(err)
	}
	image := f.reg.Ref(repo)
	return pin.Change{RepoURL: f.url, Edit: pin.Edit{App: app, Dir: "apps/" + app, Target: target, Base: map[string]string{"web": ""},
		Pins: []pin.Pin{{Alias: "web", Image: image, Reference: image + ":" + tag, Tag: tag, Digest: digest}}}}
}

// pinned says what app's pins file holds ("" when it has none).
func (f *confirmFixture) pinned(t *testing.T, app string) string {
	t.Helper()
	path := "apps/" + app + "/" + pin.PinsFile
	if !strings.Contains(f.git.Git(t, confirmRepo, "ls-tree", "-r", "--name-only", "refs/heads/main"), path) {
		return ""
	}
	return f.git.File(t, confirmRepo, "main", path)
}

// Right before it commits, the writer asks the registry (one HEAD per distinct
// image and tag, not per app: 500 apps sharing one image cost one HEAD) and
// commits only what the registry confirms: a tag the registry does not have
// and a tag that moved to another digest since it was resolved are not
// committed (no such reference ever reaches git), and the other apps' pins go
// ahead in the same commit.
func TestPinConfirmedByTheRegistryAtCommitTime(t *testing.T) {
	const apps = 500
	f := newConfirmFixture(t, apps+2)
	good := f.push(t, "org/web", "1.0.0", "web-1.0.0")
	old := f.push(t, "org/web", "1.1.0", "web-1.1.0-first")
	moved := f.push(t, "org/web", "1.1.0", "web-1.1.0-second") // the tag moved after "resolution"
	if old == moved {
		t.Fatal("the test needs two digests")
	}
	var changes []pin.Change
	for i := range apps {
		changes = append(changes, f.change(t, fmt.Sprintf("app-%d", i), "org/web", "1.0.0", good))
	}
	ghost := fmt.Sprintf("app-%d", apps)
	stale := fmt.Sprintf("app-%d", apps+1)
	changes = append(changes, f.change(t, ghost, "org/web", "9.9.9", good), f.change(t, stale, "org/web", "1.1.0", old))
	f.reg.ResetCounts()

	res, err := f.w.Write(context.Background(), changes)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.reg.Count(rt.ManifestHead); got != 3 {
		t.Errorf("%d manifest HEADs for 3 distinct references of %d apps, want 3 (one each)", got, apps+2)
	}
	if len(res.Applied) != apps || !res.Pushed {
		t.Errorf("%d pins applied, pushed %v; want %d", len(res.Applied), res.Pushed, apps)
	}
	if got := f.git.Log(t, confirmRepo, "main"); len(got) != 2 {
		t.Errorf("commits %q, want the initial one and one of pins", got)
	}
	if got := f.pinned(t, "app-0"); !strings.Contains(got, f.reg.Ref("org/web")+":1.0.0") {
		t.Errorf("app-0's pins file:\n%s", got)
	}
	for _, app := range []string{ghost, stale} {
		if got := f.pinned(t, app); got != "" {
			t.Errorf("%s: an unconfirmed pin was committed:\n%s", app, got)
		}
	}
	want := map[string]string{ghost: pin.UnconfirmedNotFound, stale: pin.UnconfirmedMoved}
	if len(res.Unconfirmed) != 2 {
		t.Fatalf("unconfirmed %+v, want %s and %s", res.Unconfirmed, ghost, stale)
	}
	for _, u := range res.Unconfirmed {
		if want[u.App] != u.Reason || !errors.Is(u.Err, pin.ErrUnconfirmed) {
			t.Errorf("%s: reason %q (want %q), error %v", u.App, u.Reason, want[u.App], u.Err)
		}
		if u.App == stale && !strings.Contains(u.Err.Error(), moved) {
			t.Errorf("%s: the error does not name the digest the tag points at now: %v", stale, u.Err)
		}
	}
	for reason, n := range map[string]float64{pin.UnconfirmedNotFound: 1, pin.UnconfirmedMoved: 1, pin.UnconfirmedRegistryError: 0} {
		if got := unconfirmed(t, f.prom, reason); got != n {
			t.Errorf("pin_unconfirmed_total{reason=%q} = %v, want %v", reason, got, n)
		}
	}
	if !strings.Contains(f.log.String(), "the registry did not confirm a pin") {
		t.Errorf("no log line:\n%s", f.log)
	}
}

// unconfirmed is pin_unconfirmed_total{reason} as gathered from reg.
func unconfirmed(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if mf.GetName() == "argocd_image_resolver_pin_unconfirmed_total" && l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no pin_unconfirmed_total{reason=%q}", reason)
	return 0
}

// A registry that cannot answer (503) confirms nothing: nothing is committed
// that round, the change is queued again, and it is committed in a later round
// once the registry answers, with the digest it then confirms.
func TestPinNotCommittedWhileTheRegistryFails(t *testing.T) {
	f := newConfirmFixture(t, 2, pin.WithBatchWindow(time.Millisecond))
	d := f.push(t, "org/web", "1.0.0", "web-1.0.0")
	f.reg.Inject(rt.Fault{Kind: rt.ManifestHead, Status: 503})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.w.Run(ctx)
	f.w.Submit(f.change(t, "app-0", "org/web", "1.0.0", d))
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(f.log.String(), "pins queued again") })
	if got := f.pinned(t, "app-0"); got != "" {
		t.Errorf("committed while the registry failed:\n%s", got)
	}
	if got := unconfirmed(t, f.prom, pin.UnconfirmedRegistryError); got < 1 {
		t.Errorf("pin_unconfirmed_total{reason=registry_error} = %v", got)
	}
	if f.w.Pending() != 1 {
		t.Errorf("pending %d, want the pin kept for the next round", f.w.Pending())
	}
	f.reg.ClearFaults()
	waitFor(t, 30*time.Second, func() bool { return f.w.Pending() == 0 })
	if got := f.pinned(t, "app-0"); !strings.Contains(got, f.reg.Ref("org/web")+":1.0.0") {
		t.Errorf("not committed once the registry answered:\n%s", got)
	}
}

func waitFor(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
