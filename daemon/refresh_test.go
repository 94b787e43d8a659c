package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"

	"github.com/argocd-image-resolver/argocd-image-resolver/notify"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pipeline"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// fakeBatch answers each image with the tag set for it ("" fails; a tag ending in
// "~stale" is served stale).
type fakeBatch struct {
	mu    sync.Mutex
	tags  map[string]string
	calls int
}

func (f *fakeBatch) set(image, tag string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tags[image] = tag
}

func (f *fakeBatch) ResolveBatch(_ context.Context, _ string, reqs []resolve.Request) ([]resolve.Answer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	out := make([]resolve.Answer, len(reqs))
	for i, r := range reqs {
		tag := f.tags[r.Image]
		if tag == "" {
			out[i] = resolve.Answer{Error: "list tags of " + r.Image + ": 503", ErrorKind: resolve.KindRegistry}
			continue
		}
		res := &resolve.Result{Image: r.Image, Tag: tag}
		if t, ok := cutSuffix(tag, "~stale"); ok {
			res.Tag, res.Stale = t, []string{"tags of " + r.Image}
		}
		out[i] = resolve.Answer{Result: res}
	}
	return out, nil
}

func cutSuffix(s, suffix string) (string, bool) {
	if len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix {
		return s[:len(s)-len(suffix)], true
	}
	return s, false
}

// fakeNotifier records refreshes; err, when set, is returned for every app.
type fakeNotifier struct {
	mu      sync.Mutex
	calls   []notify.App
	err     error
	pending bool         // answer "already pending"
	during  func()       // runs during the call (a render arriving meanwhile)
	normal  []notify.App // normal refreshes (a pin landed)
}

func (f *fakeNotifier) NormalRefresh(_ context.Context, app notify.App) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.normal = append(f.normal, app)
	return true, nil
}

// waitNormal waits until n normal refreshes were asked (they are asked right
// after a push lands, from the writer's goroutine), and returns them.
func (f *fakeNotifier) waitNormal(t *testing.T, n int) []notify.App {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		f.mu.Lock()
		got := slices.Clone(f.normal)
		f.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fakeNotifier) HardRefresh(_ context.Context, app notify.App) (bool, error) {
	if f.during != nil {
		f.during()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, app)
	if f.err != nil {
		return false, f.err
	}
	return !f.pending, nil
}

func (f *fakeNotifier) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// clock is a settable time for the tracker.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

type loopFixture struct {
	batch    *fakeBatch
	notifier *fakeNotifier
	clock    *clock
	tracker  *Tracker
	loop     *Refresher
	m        *Metrics
}

func newLoop(t *testing.T, maxApps int) *loopFixture {
	t.Helper()
	f := &loopFixture{batch: &fakeBatch{tags: map[string]string{}}, notifier: &fakeNotifier{}, clock: &clock{t: t0}, m: NewMetrics(nil)}
	f.tracker = NewTracker(maxApps, 25*time.Hour, "argocd", f.m)
	f.tracker.now = f.clock.now
	f.loop = NewRefresher(f.tracker, f.batch, f.notifier, 3*time.Minute, time.Hour, time.Minute, nil)
	return f
}

func trackedRender(app string, images map[string]string) Render {
	r := Render{App: app, RepoURL: "https://git.example/apps.git", Path: "apps/" + app, Revision: "abc123"}
	keys := make([]string, 0, len(images))
	for k := range images {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, image := range keys {
		ref := ""
		if images[image] != "" {
			ref = image + ":" + images[image]
		}
		r.Images = append(r.Images, RenderedImage{Request: resolve.Request{Image: image, Policy: resolve.PolicySpec{Strategy: "semver"}}, Ref: ref})
	}
	return r
}

func (f *loopFixture) remember(t *testing.T, r Render) {
	t.Helper()
	if err := f.tracker.Remember(r); err != nil {
		t.Fatal(err)
	}
}

func (f *loopFixture) refreshes(outcome string) int {
	return int(testutil.ToFloat64(f.m.Refreshes.WithLabelValues(outcome)))
}

func (f *loopFixture) forgotten(reason string) int {
	return int(testutil.ToFloat64(f.m.Forgotten.WithLabelValues(reason)))
}

func TestRefreshOnlyWhatChanged(t *testing.T) {
	f := newLoop(t, 100)
	f.batch.set("reg/web", "1.0.0")
	f.batch.set("reg/api", "2.0.0")
	f.remember(t, trackedRender("web", map[string]string{"reg/web": "1.0.0"}))
	f.remember(t, trackedRender("team-a_api", map[string]string{"reg/api": "2.0.0"}))
	f.remember(t, trackedRender("both", map[string]string{"reg/web": "1.0.0", "reg/api": "2.0.0"}))

	f.loop.Pass(context.Background())
	if n := f.notifier.count(); n != 0 {
		t.Fatalf("%d refreshes with nothing new", n)
	}

	f.batch.set("reg/web", "1.1.0")
	f.loop.Pass(context.Background())
	got := slices.Clone(f.notifier.calls)
	slices.SortFunc(got, func(a, b notify.App) int { return cmpStr(a.String(), b.String()) })
	want := []notify.App{{Namespace: "argocd", Name: "both"}, {Namespace: "argocd", Name: "web"}}
	if !slices.Equal(got, want) {
		t.Fatalf("refreshed %v, want %v", got, want)
	}
	if n := f.refreshes(outcomeRequested); n != 2 {
		t.Errorf("requested = %d, want 2", n)
	}

	// The refreshed apps are expected to render 1.1.0: no second refresh for the
	// same change, even before they render again (another replica may render them).
	f.clock.advance(time.Hour)
	f.loop.Pass(context.Background())
	if n := f.notifier.count(); n != 2 {
		t.Errorf("%d refreshes after a second pass, want still 2", n)
	}

	// An app outside the control-plane namespace is named ns_name.
	f.batch.set("reg/api", "2.1.0")
	f.loop.Pass(context.Background())
	if last := f.notifier.calls[len(f.notifier.calls)-2:]; !slices.Contains(last, notify.App{Namespace: "team-a", Name: "api"}) {
		t.Errorf("refreshed %v, want team-a/api among them", last)
	}
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestRefreshNeverOnStaleOrFailed(t *testing.T) {
	for _, tc := range []struct {
		name string
		now  map[string]string // what the registry answers now
		want int
	}{
		{"stale answer", map[string]string{"reg/web": "1.1.0~stale", "reg/api": "2.0.0"}, 0},
		{"failed resolution of the changed image", map[string]string{"reg/web": "", "reg/api": "2.0.0"}, 0},
		// A render now would fail on api: refreshing would replace good manifests
		// with an error.
		{"another image fails", map[string]string{"reg/web": "1.1.0", "reg/api": ""}, 0},
		{"a stale image beside a fresh change", map[string]string{"reg/web": "1.1.0", "reg/api": "2.0.0~stale"}, 1},
		{"fresh change", map[string]string{"reg/web": "1.1.0", "reg/api": "2.0.0"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLoop(t, 100)
			f.remember(t, trackedRender("app", map[string]string{"reg/web": "1.0.0", "reg/api": "2.0.0"}))
			for image, tag := range tc.now {
				f.batch.set(image, tag)
			}
			f.loop.Pass(context.Background())
			if n := f.notifier.count(); n != tc.want {
				t.Errorf("%d refreshes, want %d", n, tc.want)
			}
		})
	}
}

func TestRefreshAfterAFailedRender(t *testing.T) {
	// The render failed (registry down): Argo CD shows the error and, after 3
	// failures, stops rendering for an hour. Once the registry answers, the loop
	// asks for the render.
	f := newLoop(t, 100)
	f.remember(t, trackedRender("app", map[string]string{"reg/web": ""}))
	f.loop.Pass(context.Background())
	if n := f.notifier.count(); n != 0 {
		t.Fatalf("%d refreshes while the registry fails", n)
	}
	f.batch.set("reg/web", "1.0.0")
	f.loop.Pass(context.Background())
	if n := f.notifier.count(); n != 1 {
		t.Fatalf("%d refreshes once the registry answers, want 1", n)
	}
}

func TestRefreshIntervalPerApp(t *testing.T) {
	f := newLoop(t, 100)
	f.batch.set("reg/web", "1.1.0")
	f.remember(t, trackedRender("web", map[string]string{"reg/web": "1.0.0"}))
	f.loop.Pass(context.Background())
	if f.notifier.count() != 1 {
		t.Fatalf("first change: %d refreshes", f.notifier.count())
	}

	// A second change one minute later is held back until 3m after the first.
	f.clock.advance(time.Minute)
	f.batch.set("reg/web", "1.2.0")
	f.loop.Pass(context.Background())
	f.clock.advance(time.Minute)
	f.loop.Pass(context.Background())
	if n := f.notifier.count(); n != 1 {
		t.Fatalf("%d refreshes within the interval, want 1", n)
	}
	if n := f.refreshes(outcomeSkippedInterval); n != 1 {
		t.Errorf("skipped-interval = %d, want 1 (counted once per held change)", n)
	}
	if age := f.tracker.oldestPending(); age != time.Minute {
		t.Errorf("oldest pending change %s, want 1m", age)
	}
	f.clock.advance(time.Minute + time.Second)
	f.loop.Pass(context.Background())
	if n := f.notifier.count(); n != 2 {
		t.Errorf("%d refreshes after the interval, want 2", n)
	}
	if age := f.tracker.oldestPending(); age != 0 {
		t.Errorf("oldest pending change %s after the refresh, want 0", age)
	}
}

func TestRefreshFailedIsRetriedWithBackoff(t *testing.T) {
	f := newLoop(t, 100)
	f.notifier.err = errors.New("patch application argocd/web: forbidden")
	f.batch.set("reg/web", "1.1.0")
	f.remember(t, trackedRender("web", map[string]string{"reg/web": "1.0.0"}))
	f.loop.Pass(context.Background())
	f.loop.Pass(context.Background()) // within the backoff: not tried
	if n := f.notifier.count(); n != 1 {
		t.Fatalf("%d attempts, want 1 before the backoff ends", n)
	}
	f.clock.advance(firstBackoff)
	f.loop.Pass(context.Background())
	if n := f.notifier.count(); n != 2 {
		t.Fatalf("%d attempts, want 2 after %s", n, firstBackoff)
	}
	f.clock.advance(firstBackoff) // the second backoff is twice as long
	f.loop.Pass(context.Background())
	if n := f.notifier.count(); n != 2 {
		t.Fatalf("%d attempts, want still 2 within the doubled backoff", n)
	}
	if n := f.refreshes(outcomeFailed); n != 2 {
		t.Errorf("failed = %d, want 2", n)
	}
	f.notifier.err = nil
	f.clock.advance(firstBackoff)
	f.loop.Pass(context.Background())
	if n := f.refreshes(outcomeRequested); n != 1 {
		t.Errorf("requested = %d after the API works again, want 1", n)
	}
}

func TestRefreshAppGoneIsForgotten(t *testing.T) {
	f := newLoop(t, 100)
	f.notifier.err = fmt.Errorf("read application argocd/web: %w", notify.ErrAppGone)
	f.batch.set("reg/web", "1.1.0")
	f.remember(t, trackedRender("web", map[string]string{"reg/web": "1.0.0"}))
	f.loop.Pass(context.Background())
	if f.tracker.Len() != 0 || f.refreshes(outcomeAppGone) != 1 || f.forgotten("app-gone") != 1 {
		t.Errorf("tracked %d, app-gone %d, forgotten %d; want 0, 1, 1", f.tracker.Len(), f.refreshes(outcomeAppGone), f.forgotten("app-gone"))
	}
}

func TestRefreshAlreadyPending(t *testing.T) {
	// Someone else's refresh is pending: it may be a render under way with the old
	// answer, so the loop does not take the new answer as rendered; after the
	// interval, if the app did not render again meanwhile, it asks itself.
	f := newLoop(t, 100)
	f.notifier.pending = true
	f.batch.set("reg/web", "1.1.0")
	f.remember(t, trackedRender("web", map[string]string{"reg/web": "1.0.0"}))
	f.loop.Pass(context.Background())
	if f.refreshes(outcomeAlreadyPending) != 1 || f.refreshes(outcomeRequested) != 0 {
		t.Fatalf("already-pending %d requested %d", f.refreshes(outcomeAlreadyPending), f.refreshes(outcomeRequested))
	}
	f.notifier.pending = false
	f.clock.advance(time.Minute)
	f.loop.Pass(context.Background())
	if n := f.notifier.count(); n != 1 {
		t.Fatalf("%d calls within the interval, want 1", n)
	}
	f.clock.advance(2 * time.Minute)
	f.loop.Pass(context.Background())
	if f.refreshes(outcomeRequested) != 1 {
		t.Fatalf("requested %d after the interval, want 1", f.refreshes(outcomeRequested))
	}
	f.clock.advance(time.Hour)
	f.loop.Pass(context.Background())
	if n := f.notifier.count(); n != 2 {
		t.Errorf("%d calls, want 2: the requested refresh settles it", n)
	}

	// An app that renders (and so is remembered) after the pending refresh settles
	// it without a second call.
	g := newLoop(t, 100)
	g.notifier.pending = true
	g.batch.set("reg/web", "1.1.0")
	g.remember(t, trackedRender("web", map[string]string{"reg/web": "1.0.0"}))
	g.loop.Pass(context.Background())
	g.remember(t, trackedRender("web", map[string]string{"reg/web": "1.1.0"}))
	g.clock.advance(time.Hour)
	g.loop.Pass(context.Background())
	if n := g.notifier.count(); n != 1 {
		t.Errorf("%d calls, want 1", n)
	}
}

func TestRefreshKeepsARenderThatArrivedDuringTheCall(t *testing.T) {
	// The app rendered 1.0.0 again (say, from a replica whose cache was older)
	// while the patch was under way: that render is what the app shows, so the
	// next pass sees the change again (after the interval).
	f := newLoop(t, 100)
	f.batch.set("reg/web", "1.1.0")
	f.remember(t, trackedRender("web", map[string]string{"reg/web": "1.0.0"}))
	f.notifier.during = func() {
		f.clock.advance(time.Second)
		f.remember(t, trackedRender("web", map[string]string{"reg/web": "1.0.0"}))
	}
	f.loop.Pass(context.Background())
	f.notifier.during = nil
	f.clock.advance(3 * time.Minute)
	f.loop.Pass(context.Background())
	if n := f.refreshes(outcomeRequested); n != 2 {
		t.Errorf("requested %d, want 2", n)
	}
}

func TestTrackerDropsWhatAppsNoLongerUse(t *testing.T) {
	f := newLoop(t, 10)
	a := trackedRender("app", map[string]string{"reg/web": "1.0.0"})
	b := trackedRender("app", map[string]string{"reg/api": "2.0.0"})
	b.Path = "apps/old-path"
	f.remember(t, b)
	f.clock.advance(24 * time.Hour)
	f.remember(t, a)
	f.clock.advance(2 * time.Hour)
	f.tracker.expire() // the old path was last rendered 26h ago
	if snap := f.tracker.snapshot(); len(snap) != 1 || len(snap[0].images) != 1 || snap[0].images[0].Request.Image != "reg/web" {
		t.Errorf("after the old path's forgetAfter: %+v", snap)
	}
	// The app's render now resolves no image: nothing left to watch.
	a.Images = nil
	f.remember(t, a)
	if f.tracker.Len() != 0 || f.forgotten("no-images") != 1 {
		t.Errorf("tracked %v after a render without images", names(f.tracker))
	}
}

func TestRefreshRateLimit(t *testing.T) {
	f := newLoop(t, 100)
	// Two at once, then one an hour: a pass bounded by a second refreshes two.
	f.loop.limiter = rate.NewLimiter(rate.Every(time.Hour), 2)
	f.batch.set("reg/web", "1.1.0")
	for i := range 5 {
		f.remember(t, trackedRender(fmt.Sprintf("web-%d", i), map[string]string{"reg/web": "1.0.0"}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	f.loop.Pass(ctx)
	if n := f.notifier.count(); n != 2 {
		t.Errorf("%d refreshes, want 2 (the burst)", n)
	}
	if n := f.refreshes(outcomeFailed); n != 0 {
		t.Errorf("a refresh held by the rate limit counted as failed (%d)", n)
	}
}

func TestTrackerBounds(t *testing.T) {
	f := newLoop(t, 3)
	for i := range 5 {
		f.remember(t, trackedRender(fmt.Sprintf("app-%d", i), map[string]string{"reg/web": "1.0.0"}))
		f.clock.advance(time.Minute)
	}
	// app-0 and app-1 were the least recently rendered.
	if got := names(f.tracker); !slices.Equal(got, []string{"app-4", "app-3", "app-2"}) {
		t.Errorf("tracked %v", got)
	}
	if n := f.forgotten("limit"); n != 2 {
		t.Errorf("forgotten for the limit = %d, want 2", n)
	}
	if v := testutil.ToFloat64(f.m.TrackedApps); v != 3 {
		t.Errorf("tracked_apps = %v", v)
	}

	// A render moves an app to the front; idle apps go after forgetAfter.
	f.remember(t, trackedRender("app-2", map[string]string{"reg/web": "1.0.0"}))
	f.clock.advance(25 * time.Hour)
	f.tracker.expire()
	if got := names(f.tracker); !slices.Equal(got, []string{"app-2"}) {
		t.Errorf("after 25h, tracked %v, want [app-2] (rendered 1m after app-4)", got)
	}
	if n := f.forgotten("idle"); n != 2 {
		t.Errorf("forgotten idle = %d, want 2", n)
	}

	// Opting out forgets the app.
	r := trackedRender("app-2", map[string]string{"reg/web": "1.0.0"})
	r.Refresh = plugin.RefreshOff
	f.remember(t, r)
	if f.tracker.Len() != 0 || f.forgotten("opted-out") != 1 {
		t.Errorf("after refresh: off, tracked %v", names(f.tracker))
	}
	if err := f.tracker.Remember(trackedRender("Bad_Name_x", nil)); err == nil {
		t.Error("an app name that names no Application was accepted")
	}
}

func TestTrackerSourcesOfOneApp(t *testing.T) {
	// A multi-source app: each source's render is kept; a change in either counts.
	f := newLoop(t, 10)
	a := trackedRender("app", map[string]string{"reg/web": "1.0.0"})
	b := trackedRender("app", map[string]string{"reg/api": "2.0.0"})
	b.Path = "apps/other"
	f.remember(t, a)
	f.remember(t, b)
	f.batch.set("reg/web", "1.0.0")
	f.batch.set("reg/api", "2.1.0")
	f.loop.Pass(context.Background())
	if n := f.notifier.count(); n != 1 {
		t.Errorf("%d refreshes, want 1", n)
	}
}

func names(t *Tracker) []string {
	var out []string
	for _, c := range t.snapshot() {
		out = append(out, c.name)
	}
	return out
}

func TestRenderOf(t *testing.T) {
	req := resolve.Request{Image: "reg/web", Policy: resolve.PolicySpec{Strategy: "semver"}}
	web := &plugin.ImagePolicy{Alias: "web"}
	report := &pipeline.Report{Refresh: plugin.RefreshHard, Substitutions: []*pipeline.Substitution{
		{Policy: web, Request: req, Answer: resolve.Answer{Result: &resolve.Result{Tag: "1.0.0", Digest: "sha256:aa", Pinned: true}}},
		{Policy: web, Request: req, Answer: resolve.Answer{Result: &resolve.Result{Tag: "1.0.0", Digest: "sha256:aa", Pinned: true}}},
		{Policy: &plugin.ImagePolicy{Alias: "api"}, Request: resolve.Request{Image: "reg/api"}, Answer: resolve.Answer{Error: "boom", ErrorKind: resolve.KindRegistry}},
	}}
	env := &plugin.Env{AppName: "web", SourceRepoURL: "https://git/x.git", SourcePath: "apps/web", Revision: "abc"}
	r, ok := renderOf(env, report)
	if !ok || len(r.Images) != 2 || r.Images[0].Ref != "reg/web:1.0.0@sha256:aa" || r.Images[1].Ref != "" || r.Revision != "abc" {
		t.Errorf("RenderOf = %+v, %v", r, ok)
	}
	for _, env := range []*plugin.Env{
		{AppName: "web", Revision: plugin.StreamedRevision, Streamed: true},
		{AppName: ""},
	} {
		if _, ok := renderOf(env, report); ok {
			t.Errorf("remembered %+v", env)
		}
	}
	if r, ok := renderOf(env, &pipeline.Report{}); !ok || len(r.Images) != 0 {
		t.Errorf("a render that resolved nothing: %+v, %v; want a Render without images", r, ok)
	}
}

// fakePins records the pin changes the loop submits.
type fakePins struct {
	mu      sync.Mutex
	changes []pin.Change
}

func (f *fakePins) Submit(c pin.Change) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changes = append(f.changes, c)
}

func (f *fakePins) Run(context.Context) {}

func TestRefreshCommitsPinsOfUseApps(t *testing.T) {
	f := newLoop(t, 10)
	pins := &fakePins{}
	f.loop.pins = pins
	target, err := pin.ParseTarget("", nil)
	if err != nil {
		t.Fatal(err)
	}
	r := trackedRender("web", map[string]string{"reg/web": "1.0.0"})
	r.Images[0].Alias = "web"
	r.pins = &pinSource{repoURL: "https://git.example/apps.git", branch: "main", dir: "apps/web", target: target}
	f.remember(t, r)
	f.batch.set("reg/web", "1.1.0")
	f.loop.Pass(context.Background())
	if len(pins.changes) != 1 || f.notifier.count() != 0 {
		t.Fatalf("changes %+v, hard refreshes %d; want one pin change and no refresh", pins.changes, f.notifier.count())
	}
	c := pins.changes[0]
	if c.RepoURL != "https://git.example/apps.git" || c.Branch != "main" || c.Edit.Dir != "apps/web" || c.Edit.Pins[0].Reference != "reg/web:1.1.0" || c.Edit.Base["web"] != "reg/web:1.0.0" {
		t.Errorf("change %+v", c)
	}

	if !c.Edit.DetectHolds {
		t.Errorf("a pin of a use app without revert detection: %+v", c.Edit)
	}

	// A person reverts: the app renders 1.0.0 again. The loop offers 1.1.0 once
	// more: the writer reads the revert in git and writes a hold, not the pin.
	f.clock.advance(time.Hour)
	f.remember(t, r)
	f.loop.Pass(context.Background())
	if len(pins.changes) != 2 || pins.changes[1].Edit.Pins[0].Reference != "reg/web:1.1.0" || !pins.changes[1].Edit.DetectHolds {
		t.Fatalf("after the revert: %+v", pins.changes)
	}
	// The render of the hold commit carries the hold: 1.1.0 is never offered
	// again, by this tracker or a new one (a restart).
	held := r
	held.holds = map[string]pin.Hold{"web": {Alias: "web", Reference: "reg/web:1.1.0"}}
	f.clock.advance(time.Hour)
	f.remember(t, held)
	f.loop.Pass(context.Background())
	if len(pins.changes) != 2 {
		t.Errorf("a held reference was submitted: %+v", pins.changes[2:])
	}
	if got := testutil.ToFloat64(f.tracker.m.HeldImages); got != 1 {
		t.Errorf("held_images %v, want 1", got)
	}
	// A newer image is.
	f.batch.set("reg/web", "1.2.0")
	f.clock.advance(time.Hour)
	f.loop.Pass(context.Background())
	if len(pins.changes) != 3 || pins.changes[2].Edit.Pins[0].Reference != "reg/web:1.2.0" {
		t.Fatalf("changes %+v", pins.changes)
	}
	// The write fails: the loop offers the pin again after the interval.
	f.tracker.pinFailed("web")
	f.clock.advance(time.Minute)
	f.loop.Pass(context.Background())
	if len(pins.changes) != 3 {
		t.Errorf("submitted again within the interval")
	}
	f.clock.advance(3 * time.Minute)
	f.loop.Pass(context.Background())
	if len(pins.changes) != 4 || pins.changes[3].Edit.Pins[0].Reference != "reg/web:1.2.0" || pins.changes[3].Edit.Base["web"] != "reg/web:1.0.0" {
		t.Errorf("after a failed write: %+v", pins.changes)
	}
}
