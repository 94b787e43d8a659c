package daemon

import (
	"container/list"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/notify"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pipeline"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Render is what the refresh loop remembers of one render of an app: who it was
// for, from which source, and per image the request and the reference it wrote.
// The daemon remembers every render it serves (afterRender); the watch list keeps
// them across restarts.
type Render struct {
	// App is the application name as Argo CD passes it (ARGOCD_APP_NAME): "name",
	// or "ns_name" for an Application outside the control-plane namespace.
	App      string `json:"app"`
	RepoURL  string `json:"repoURL"`
	Path     string `json:"path"`
	Revision string `json:"revision"`
	// Refresh is plugin.RefreshOff when the app opted out of the refresh loop.
	Refresh string          `json:"refresh,omitempty"`
	Images  []RenderedImage `json:"images"`

	// pins is set for an app with pin-mode use rendered in this process: its
	// changes are committed as new pins rather than asked for as a refresh.
	pins *pinSource
	// holds are the references held in the app's pins file at this render
	// (pin.Hold): never submitted as pins.
	holds map[string]pin.Hold
}

// pinSource is where a pin-mode use app's pins are committed.
type pinSource struct {
	repoURL, branch, dir string
	target               pin.Target
	push, prGroup        string // pin-push and pin-pr-group
	// rendered says the app renders branch (no pin-branch elsewhere): a pin
	// landing there changes what it renders.
	rendered bool
}

// RenderedImage is one distinct image request of a render and what it gave.
type RenderedImage struct {
	// Alias is the image's alias in the app's policy.
	Alias   string          `json:"alias,omitempty"`
	Request resolve.Request `json:"request"`
	// Ref is the reference written into the manifests ("" when the resolution
	// failed, so that a later success refreshes the app).
	Ref string `json:"ref,omitempty"`

	key  string // Request.Key(), set when remembered: passes compare it often
	repo string // resolve.RepoKey of the image's repository, set when remembered ("" if unparsable)
}

// prepare sets what is derived from the request, when an image is remembered.
func (im *RenderedImage) prepare() {
	im.key = im.Request.Key()
	if img, err := resolve.ParseImage(im.Request.Image); err == nil {
		im.repo = img.Key()
	}
}

// renderOf is the Render to remember of a render of env that produced report. It
// returns false for what is not remembered: streamed sources (argocd app diff
// --local, whose revision is no commit) and renders without an app name (preview,
// a CLI run). A render that resolved nothing has no Images: remembering it drops
// what the source watched before.
func renderOf(env *plugin.Env, report *pipeline.Report) (Render, bool) {
	if env == nil || report == nil || env.Streamed || env.AppName == "" {
		return Render{}, false
	}
	r := Render{App: env.AppName, RepoURL: env.SourceRepoURL, Path: env.SourcePath, Revision: env.Revision, Refresh: report.Refresh, holds: report.Holds}
	if report.PinMode == plugin.PinUse {
		r.pins = &pinSource{repoURL: env.SourceRepoURL, branch: PinBranch(report.Pins.Branch, env.SourceTargetRevision), dir: env.SourcePath, target: report.Pins.Target,
			push: report.Pins.Push, prGroup: report.Pins.PRGroup,
			rendered: report.Pins.Branch == "" || report.Pins.Branch == env.SourceTargetRevision}
	}
	for _, s := range report.Substitutions {
		if slices.ContainsFunc(r.Images, func(im RenderedImage) bool { return sameRequest(im.Request, s.Request) }) {
			continue
		}
		im := RenderedImage{Alias: s.Policy.Alias, Request: s.Request}
		switch {
		case s.FromPin != nil:
			im.Ref = s.FromPin.Reference
		case s.Answer.Error == "" && s.Answer.Result != nil:
			im.Ref = s.Answer.Result.ReferenceFor(s.Request.Image)
		}
		r.Images = append(r.Images, im)
	}
	return r, true
}

func sameRequest(a, b resolve.Request) bool { return a.Key() == b.Key() }

// trackedSource is the last render of one source (repository and path) of an app;
// an app with several sources using the plugin has one each.
type trackedSource struct {
	repoURL, path, revision string
	images                  []RenderedImage
	rendered                time.Time
	pins                    *pinSource
	holds                   map[string]pin.Hold // held in the source's pins file, by alias
	saved                   time.Time           // rendered time as last written to the watch list
}

// sameSource reports whether two renders of a source watch the same thing.
func sameSource(a, b *trackedSource) bool {
	return a.revision == b.revision && (a.pins == nil) == (b.pins == nil) && maps.Equal(a.holds, b.holds) &&
		slices.EqualFunc(a.images, b.images, func(x, y RenderedImage) bool {
			return x.key == y.key && x.Ref == y.Ref && x.Alias == y.Alias
		})
}

// trackedApp is an app the refresh loop watches.
type trackedApp struct {
	name     string // as Argo CD passes it
	app      notify.App
	sources  map[string]*trackedSource // by repoURL + "\x00" + path
	rendered time.Time                 // last render
	elem     *list.Element             // in Tracker.order, most recently rendered at the front

	// committed is, per alias, the last pin this daemon queued for a pin-mode use
	// app: for pinFailed, and so that a pull request's pin is not submitted at
	// every pass while the app renders the base branch. Whether a reverted
	// reference is pinned again is not decided here but in git: the writer reads
	// the branch's history and writes a hold (pin.Hold), which the app's next
	// render carries (holds).
	committed map[string]string
	// before is, per alias queued, the reference the app rendered before: what it
	// is set back to when the write fails.
	before map[string]string

	lastRefresh  time.Time // last refresh requested
	pendingSince time.Time // a change seen and not yet refreshed; zero when none
	attempts     int       // failed refreshes since the last success
	nextAttempt  time.Time // no refresh before (backoff after a failure)
}

// Tracker is the refresh loop's memory: the apps rendered through the daemon, their
// requests and what each rendered, bounded in count and age. It is safe for
// concurrent use.
type Tracker struct {
	mu          sync.Mutex
	apps        map[string]*trackedApp
	order       *list.List // of *trackedApp, most recently rendered first
	max         int
	forgetAfter time.Duration
	namespace   string // control-plane namespace
	now         func() time.Time
	m           *Metrics
	// dirty are the sources (app, repository, path) changed since the watch list
	// was last saved (watchlist.go).
	dirty map[string]struct{}
}

// NewTracker returns a Tracker keeping at most max apps for forgetAfter after their
// last render; names without a namespace are in controlPlaneNamespace.
func NewTracker(max int, forgetAfter time.Duration, controlPlaneNamespace string, m *Metrics) *Tracker {
	if m == nil {
		m = NewMetrics(nil)
	}
	t := &Tracker{apps: map[string]*trackedApp{}, order: list.New(), max: max, forgetAfter: forgetAfter,
		namespace: controlPlaneNamespace, now: time.Now, m: m}
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: cache.Namespace, Name: "refresh_pending_oldest_seconds",
		Help: "Age of the oldest change the refresh loop has seen and not yet asked Argo CD to render (held back by the interval or a failing API); 0 when none."},
		func() float64 { return t.oldestPending().Seconds() })
	if err := m.Registry.Register(pending); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err)
		}
	}
	return t
}

// Remember records a render. An app that opted out (refresh: off) is forgotten.
// It returns an error for an app name that names no Application.
func (t *Tracker) Remember(r Render) error {
	if r.Refresh == plugin.RefreshOff {
		t.Forget(r.App, "opted-out")
		return nil
	}
	app, err := notify.ParseApp(r.App, t.namespace)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	key := r.RepoURL + "\x00" + r.Path
	a, ok := t.apps[r.App]
	if len(r.Images) == 0 {
		// Nothing to watch in this source (any more).
		if ok {
			t.markLocked(r.App, key)
			delete(a.sources, key)
			if len(a.sources) == 0 {
				t.dropLocked(a, "no-images")
			}
			t.gaugesLocked()
		}
		return nil
	}
	if !ok {
		a = &trackedApp{name: r.App, app: app, sources: map[string]*trackedSource{}}
		a.elem = t.order.PushFront(a)
		t.apps[r.App] = a
	} else {
		t.order.MoveToFront(a.elem)
	}
	a.rendered = now
	images := slices.Clone(r.Images)
	for i := range images {
		images[i].prepare()
	}
	src := &trackedSource{repoURL: r.RepoURL, path: r.Path, revision: r.Revision, images: images, rendered: now, pins: r.pins, holds: r.holds}
	// The watch list is written when a source changes, not at every render of it:
	// an unchanged source is written again only once its saved time has aged by a
	// tenth of forgetAfter (so a restart forgets it at most that much early).
	if old := a.sources[key]; old != nil && sameSource(old, src) && now.Sub(old.saved) < t.forgetAfter/10 {
		src.saved = old.saved
	} else {
		t.markLocked(r.App, key)
	}
	a.sources[key] = src
	// The app rendered again: what it shows now is what the loop compares against.
	a.pendingSince, a.attempts, a.nextAttempt = time.Time{}, 0, time.Time{}
	for len(t.apps) > t.max {
		oldest := t.order.Back().Value.(*trackedApp)
		t.dropLocked(oldest, "limit")
	}
	t.gaugesLocked()
	return nil
}

// Forget stops watching app (as Argo CD names it), counting why.
func (t *Tracker) Forget(name, reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a, ok := t.apps[name]; ok {
		t.dropLocked(a, reason)
		t.gaugesLocked()
	}
}

func (t *Tracker) dropLocked(a *trackedApp, reason string) {
	// An app dropped for its age or the limit stays in the watch list: with Redis
	// another replica may render it still, and a daemon that loads the list drops
	// what is too old itself. The others (gone, opted out, nothing to watch) go.
	if reason != "idle" && reason != "limit" {
		t.markAppLocked(a)
	}
	t.order.Remove(a.elem)
	delete(t.apps, a.name)
	t.m.Forgotten.WithLabelValues(reason).Inc()
}

// expire forgets the apps not rendered within forgetAfter, and the sources of an
// app not rendered within forgetAfter (a path the app no longer uses).
func (t *Tracker) expire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	cutoff := t.now().Add(-t.forgetAfter)
	for e := t.order.Back(); e != nil; {
		a := e.Value.(*trackedApp)
		e = e.Prev()
		for k, s := range a.sources {
			if s.rendered.Before(cutoff) {
				delete(a.sources, k) // kept in the watch list, as an idle app (dropLocked)
			}
		}
		if len(a.sources) == 0 {
			t.dropLocked(a, "idle")
		}
	}
	t.gaugesLocked()
}

// Len is the number of apps tracked.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.apps)
}

// appCheck is a snapshot of one app for a pass of the loop, taken under the lock
// and checked without it.
type appCheck struct {
	name     string
	app      notify.App
	rendered time.Time
	images   []RenderedImage       // every distinct request of every source
	pins     []*pinSource          // of each image: where its pin goes (pin-mode use), else nil
	holds    []map[string]pin.Hold // of each image: the holds of its source
}

// snapshot copies what a pass of the loop checks.
func (t *Tracker) snapshot() []appCheck { return t.snapshotWhere(nil) }

// using copies what a pass checks of the apps with an image in a repository
// (by resolve.RepoKey) that repo accepts.
func (t *Tracker) using(repo func(repoKey string) bool) []appCheck {
	return t.snapshotWhere(func(a *trackedApp) bool {
		for _, s := range a.sources {
			if slices.ContainsFunc(s.images, func(im RenderedImage) bool { return repo(im.repo) }) {
				return true
			}
		}
		return false
	})
}

// repos returns the repositories (by resolve.RepoKey) of the tracked apps'
// images that match accepts.
func (t *Tracker) repos(match func(repoKey string) bool) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, a := range t.apps {
		for _, s := range a.sources {
			for _, im := range s.images {
				if im.repo != "" && !slices.Contains(out, im.repo) && match(im.repo) {
					out = append(out, im.repo)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// snapshotWhere copies what a pass checks of the apps keep accepts (all: nil).
func (t *Tracker) snapshotWhere(keep func(*trackedApp) bool) []appCheck {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]appCheck, 0, len(t.apps))
	for e := t.order.Front(); e != nil; e = e.Next() {
		a := e.Value.(*trackedApp)
		if keep != nil && !keep(a) {
			continue
		}
		c := appCheck{name: a.name, app: a.app, rendered: a.rendered}
		keys := make([]string, 0, len(a.sources))
		for k := range a.sources {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			for _, im := range a.sources[k].images {
				if !slices.ContainsFunc(c.images, func(x RenderedImage) bool { return x.key == im.key && x.Ref == im.Ref }) {
					c.images = append(c.images, im)
					c.pins = append(c.pins, a.sources[k].pins)
					c.holds = append(c.holds, a.sources[k].holds)
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// settle clears the pending change of c's app: its answers are what it rendered.
func (t *Tracker) settle(c appCheck) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a, ok := t.apps[c.name]; ok && a.rendered.Equal(c.rendered) {
		a.pendingSince = time.Time{}
	}
}

// oldestPending is the age of the oldest change seen and not yet refreshed (0 when
// none).
func (t *Tracker) oldestPending() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var oldest time.Time
	for _, a := range t.apps {
		if !a.pendingSince.IsZero() && (oldest.IsZero() || a.pendingSince.Before(oldest)) {
			oldest = a.pendingSince
		}
	}
	if oldest.IsZero() {
		return 0
	}
	return t.now().Sub(oldest)
}

// PinBranch is the branch pins of an app are committed to: pin-branch, else the
// app's target revision; "" (and HEAD) mean the repository's default branch.
func PinBranch(pinBranch, targetRevision string) string {
	if pinBranch != "" {
		return pinBranch
	}
	if targetRevision == "HEAD" {
		return ""
	}
	return targetRevision
}

// reverted drops the pin changes whose new reference the app's render holds
// (held: in its pins file): a person rolled it back, and a revert is a decision.
// Every daemon, restarted or not, reads the same holds from the render; a revert
// not yet held is submitted, and the writer, reading the branch's history,
// writes the hold instead of the pin (pin.Edit.DetectHolds). A pin this daemon
// submitted as a pull request is not submitted again while the app renders the
// base branch (the pull request is open, or was closed).
func (t *Tracker) reverted(name string, changes []change) []change {
	t.mu.Lock()
	defer t.mu.Unlock()
	var committed map[string]string
	if a, ok := t.apps[name]; ok {
		committed = a.committed
	}
	var out []change
	for _, ch := range changes {
		if ch.pins == nil {
			out = append(out, ch)
			continue
		}
		if h, held := ch.holds[ch.alias]; held && h.Reference == ch.new {
			continue
		}
		if ch.pins.push == pin.PushPullRequest && committed[ch.alias] == ch.new {
			continue
		}
		out = append(out, ch)
	}
	return out
}

// gaugesLocked sets the tracker's gauges: apps tracked, and images held (per
// app, the aliases any of its sources holds). t.mu is held.
func (t *Tracker) gaugesLocked() {
	t.m.TrackedApps.Set(float64(len(t.apps)))
	held := 0
	for _, a := range t.apps {
		aliases := map[string]bool{}
		for _, s := range a.sources {
			for alias := range s.holds {
				aliases[alias] = true
			}
		}
		held += len(aliases)
	}
	t.m.HeldImages.Set(float64(held))
}

// pinned records the pins queued for an app.
func (t *Tracker) pinned(name string, changes []change) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a, ok := t.apps[name]
	if !ok {
		return
	}
	if a.committed == nil {
		a.committed, a.before = map[string]string{}, map[string]string{}
	}
	for _, ch := range changes {
		if ch.pins != nil {
			a.committed[ch.alias] = ch.new
			a.before[ch.alias] = ch.old
		}
	}
}

// pinFailed undoes what pinned and refreshed recorded for an app whose pins did
// not reach git: its rendered references are set back, and the pins are no longer
// taken as committed, so the next pass offers them again.
func (t *Tracker) pinFailed(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a, ok := t.apps[name]
	if !ok {
		return
	}
	for alias, ref := range a.committed {
		for _, s := range a.sources {
			for i, im := range s.images {
				if im.Alias == alias && im.Ref == ref {
					s.images[i].Ref = a.before[alias]
				}
			}
		}
	}
	a.committed, a.before = nil, nil
}
