package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testio"
	"github.com/argocd-image-resolver/argocd-image-resolver/notify"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// watchedApp renders the app "web" (image:~1 for linux/amd64) through a daemon.
func watchedApp(t *testing.T, s *rt.Server, socket string) {
	t.Helper()
	image := s.Ref("web")
	policy := map[string]string{"image-list": "web=" + image + ":~1", "web.platforms": "linux/amd64"}
	if out := delegatedRender(t, socket, appDir(t, image+":1.0.0"), argoEnviron(t, "web", "0123abc", policy)); !strings.Contains(out, image+":1.1.0") {
		t.Fatalf("render:\n%s", out)
	}
}

// A restarted daemon goes on watching the apps its predecessor watched, without
// a render: the sidecar's restart (the watch list in a file beside the socket) and
// a new pod of a replica sharing Redis (the watch list in Redis). When a new tag
// appears meanwhile, the first pass of the new daemon refreshes the app.
func TestWatchListSurvivesRestart(t *testing.T) {
	for _, store := range []string{"file", "redis"} {
		t.Run(store, func(t *testing.T) {
			s := rt.New(t)
			pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0")
			cfg := testConfig()
			cfg.Socket = socketPath(t)
			cfg.RefreshAhead = 0
			cfg.TagTTL = time.Minute // Redis keeps the tag list for the new pod: until it expires
			// The daemons' clock, and Redis's, move on when the test says so.
			clock := newFakeClock()
			advance := clock.Advance
			if store == "redis" {
				rs := redistest.Start(t)
				useRedis(&cfg, rs.Addr)
				advance = func(d time.Duration) { clock.Advance(d); rs.Advance(t, d) }
			}
			first := startStoppable(t, cfg, WithNotifier(&fakeNotifier{}), WithRefreshEvery(time.Hour), withClock(clock))
			watchedApp(t, s, cfg.Socket)
			first.stop() // saves what changed since the last period

			if store == "file" {
				b, err := os.ReadFile(filepath.Join(filepath.Dir(cfg.Socket), watchFileName))
				if err != nil || !strings.Contains(string(b), `"app":"web"`) {
					t.Fatalf("watch list file: %v\n%s", err, b)
				}
			} else {
				cfg.Socket = socketPath(t) // another pod: its /tmp is new
			}
			pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0", "1.2.0")
			n := &fakeNotifier{}
			second := startStoppable(t, cfg, WithNotifier(n), WithRefreshEvery(time.Hour), withClock(clock))
			if got := names(second.d.Tracker); !reflect.DeepEqual(got, []string{"web"}) {
				t.Fatalf("restarted daemon watches %v, want [web] without a render", got)
			}
			advance(cfg.TagTTL + 100*time.Millisecond)
			second.d.Refresher.Pass(context.Background())
			if !reflect.DeepEqual(n.calls, []notify.App{{Namespace: "argocd", Name: "web"}}) {
				t.Fatalf("refreshes after the restart %v, want [argocd/web] (1.2.0 appeared)", n.calls)
			}
		})
	}
}

// What is kept and what is not: sources older than forgetAfter are dropped (and
// deleted from the store), a source rendered since the save wins over the saved
// one, pin-mode use sources and forgotten apps are not kept, and the limit on
// tracked apps holds.
func TestWatchListRestoreRules(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	newTracker := func(max int) *Tracker {
		tr := NewTracker(max, 25*time.Hour, "argocd", nil)
		tr.now = func() time.Time { return now }
		return tr
	}
	img := func(ref string) []RenderedImage {
		return []RenderedImage{{Alias: "web", Request: resolve.Request{Image: "reg/web", Policy: resolve.PolicySpec{Strategy: "semver"}}, Ref: ref}}
	}
	store := newFileStore(filepath.Join(t.TempDir(), watchFileName))
	ctx := context.Background()
	saved := []savedSource{
		{App: "fresh", RepoURL: "r", Path: "a", Rendered: now.Add(-time.Hour), Images: img("reg/web:1")},
		{App: "old", RepoURL: "r", Path: "a", Rendered: now.Add(-26 * time.Hour), Images: img("reg/web:1")},
		{App: "live", RepoURL: "r", Path: "a", Rendered: now.Add(-time.Hour), Images: img("reg/web:saved")},
		{App: "bad/name/x", RepoURL: "r", Path: "a", Rendered: now, Images: img("reg/web:1")},
	}
	if err := store.Put(ctx, saved, nil); err != nil {
		t.Fatal(err)
	}
	tr := newTracker(10)
	if err := tr.Remember(Render{App: "live", RepoURL: "r", Path: "a", Images: img("reg/web:rendered")}); err != nil {
		t.Fatal(err)
	}
	tr.changedSince() // what the live render changed is not the point here
	loaded, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	apps, stale := tr.restore(loaded)
	if apps != 1 || !reflect.DeepEqual(stale, []string{"bad/name/x\x00r\x00a", "old\x00r\x00a"}) {
		t.Errorf("restored %d apps, stale %q; want 1 (fresh) and [old, bad/name/x]", apps, stale)
	}
	if got := names(tr); !reflect.DeepEqual(got, []string{"live", "fresh"}) {
		t.Errorf("tracked %v, want [live fresh]", got)
	}
	if ref := tr.apps["live"].sources["r\x00a"].images[0].Ref; ref != "reg/web:rendered" {
		t.Errorf("live source's reference %s, want the one rendered after the save", ref)
	}

	// Changes since: a pin-mode use source is not kept; a forgotten app is deleted.
	tr.Remember(Render{App: "pinned", RepoURL: "r", Path: "p", Images: img("reg/web:1"), pins: &pinSource{repoURL: "r"}})
	tr.Forget("fresh", "app-gone")
	put, gone := tr.changedSince()
	if len(put) != 0 || !reflect.DeepEqual(gone, []string{"fresh\x00r\x00a", "pinned\x00r\x00p"}) {
		t.Errorf("changes: put %v, gone %q; want nothing to put, fresh and pinned gone", put, gone)
	}
	if err := store.Put(ctx, put, append(gone, stale...)); err != nil {
		t.Fatal(err)
	}
	var wf watchFile
	b, _ := os.ReadFile(store.path)
	if err := json.Unmarshal(b, &wf); err != nil || len(wf.Sources) != 1 || wf.Sources[0].App != "live" {
		t.Errorf("file holds %s, want the live source only", b)
	}

	// The limit on tracked apps holds over what is restored: the most recent stay.
	small := newTracker(1)
	if n, _ := small.restore(saved[:1:1]); n != 1 {
		t.Fatal("fresh not restored")
	}
	small.restore([]savedSource{{App: "older", RepoURL: "r", Path: "a", Rendered: now.Add(-2 * time.Hour), Images: img("reg/web:1")}})
	if got := names(small); !reflect.DeepEqual(got, []string{"fresh"}) {
		t.Errorf("tracked %v with room for one, want the most recently rendered [fresh]", got)
	}
}

// A watch list that cannot be read is said, and the daemon starts all the same.
func TestWatchListUnreadable(t *testing.T) {
	cfg := testConfig()
	cfg.Socket = socketPath(t)
	if err := os.WriteFile(filepath.Join(filepath.Dir(cfg.Socket), watchFileName), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testio.SyncBuffer{}
	r := startStoppable(t, cfg, WithNotifier(&fakeNotifier{}), WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	r.stop()
	if out := logs.String(); !strings.Contains(out, "watch list not restored") || !strings.Contains(out, watchFileName) {
		t.Errorf("logs do not say the watch list was not restored:\n%s", out)
	}
}

// Renders that change nothing are not written again until their saved time has
// aged by a tenth of forgetAfter; a changed reference is written at once.
func TestWatchListWritesChangesOnly(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tr := NewTracker(10, 10*time.Hour, "argocd", nil)
	tr.now = func() time.Time { return now }
	render := func(ref string) Render {
		return Render{App: "web", RepoURL: "r", Path: "a", Revision: "abc",
			Images: []RenderedImage{{Alias: "web", Request: resolve.Request{Image: "reg/web"}, Ref: ref}}}
	}
	writes := func() int {
		put, gone := tr.changedSince()
		return len(put) + len(gone)
	}
	tr.Remember(render("reg/web:1"))
	if n := writes(); n != 1 {
		t.Fatalf("first render: %d writes, want 1", n)
	}
	now = now.Add(59 * time.Minute)
	tr.Remember(render("reg/web:1"))
	if n := writes(); n != 0 {
		t.Errorf("same render 59m later: %d writes, want 0 (a tenth of forgetAfter is 1h)", n)
	}
	now = now.Add(2 * time.Minute)
	tr.Remember(render("reg/web:1"))
	if n := writes(); n != 1 {
		t.Errorf("same render 61m after the write: %d writes, want 1", n)
	}
	tr.Remember(render("reg/web:2"))
	if n := writes(); n != 1 {
		t.Errorf("changed reference: %d writes, want 1", n)
	}
	// Forgotten for its age, an app stays in the list (another replica sharing it
	// may render it still; a daemon that loads the list drops what is too old).
	now = now.Add(11 * time.Hour)
	tr.expire()
	if tr.Len() != 0 || writes() != 0 {
		t.Errorf("idle app: tracked %d, %d writes; want 0 and 0 (not deleted from the list)", tr.Len(), writes())
	}
}

// Replicas sharing Redis ask for one refresh per change between them: the first
// to see the change claims it, the others expect the new answers; without Redis
// each replica asks on its own.
func TestReplicasAskOnceForAChange(t *testing.T) {
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprintf("redis=%v", shared), func(t *testing.T) {
			s := rt.New(t)
			pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0")
			addr := ""
			// The daemons' clock, and Redis's, move on when the test says so.
			clock := newFakeClock()
			advance := clock.Advance
			if shared {
				rs := redistest.Start(t)
				addr = rs.Addr
				advance = func(d time.Duration) { clock.Advance(d); rs.Advance(t, d) }
			}
			var notifiers []*fakeNotifier
			var replicas []*replica
			for range 3 {
				cfg := testConfig()
				cfg.Socket = socketPath(t)
				if addr != "" {
					useRedis(&cfg, addr)
				}
				cfg.RefreshAhead = 0
				cfg.TagTTL = time.Minute
				n := &fakeNotifier{}
				r := startStoppable(t, cfg, WithNotifier(n), WithRefreshEvery(time.Hour), withClock(clock))
				watchedApp(t, s, cfg.Socket) // Argo CD spreads renders over the replicas
				notifiers, replicas = append(notifiers, n), append(replicas, r)
			}
			pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0", "1.2.0")
			advance(time.Minute + 100*time.Millisecond) // the tag lists expire
			calls := func() int {
				total := 0
				for _, n := range notifiers {
					total += n.count()
				}
				return total
			}
			for round := range 2 {
				for _, r := range replicas {
					r.d.Refresher.Pass(context.Background())
				}
				want := 1
				if !shared {
					want = 3
				}
				if got := calls(); got != want {
					t.Errorf("pass %d: %d refreshes asked for one change, want %d", round+1, got, want)
				}
			}
		})
	}
}

// SaveWatchList writes the watch list at once, not at the next period: what the
// sidecar asks for when a shutdown begins, so a pod killed before the daemon
// stops keeps what it watched.
func TestSaveWatchListAtOnce(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0")
	cfg := testConfig()
	cfg.Socket = socketPath(t)
	d := startStoppable(t, cfg, WithNotifier(&fakeNotifier{}), WithRefreshEvery(time.Hour))
	watchedApp(t, s, cfg.Socket)
	file := filepath.Join(filepath.Dir(cfg.Socket), watchFileName)
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("watch list written before the period or a request: %v", err)
	}
	d.d.SaveWatchList()
	deadline := time.Now().Add(5 * time.Second) // well under the 10s period
	for {
		b, err := os.ReadFile(file)
		if err == nil && strings.Contains(string(b), `"app":"web"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch list not written after SaveWatchList: %v %s", err, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
