package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/argocd-image-resolver/argocd-image-resolver/notify"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pipeline"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Notifier asks Argo CD to render an app again (notify.Kubernetes). requested is
// false when a refresh was already pending on the Application; an error wrapping
// notify.ErrAppGone says the Application does not exist.
type Notifier interface {
	HardRefresh(ctx context.Context, app notify.App) (requested bool, err error)
}

// PinWriter commits pins to git (pin.Writer): Submit queues a change, Run commits
// the queue until its context ends.
type PinWriter interface {
	Submit(pin.Change)
	Run(ctx context.Context)
}

// Refresh outcomes, the values of the refreshes_total metric's label.
const (
	outcomePinSubmitted    = "pin-submitted"
	outcomeRequested       = "requested"
	outcomeAlreadyPending  = "already-pending"
	outcomeSkippedInterval = "skipped-interval"
	outcomeFailed          = "failed"
	outcomeAppGone         = "app-gone"
	outcomeOtherReplica    = "other-replica"
)

// Refresh loop defaults.
const (
	// DefaultRefreshRate bounds the refreshes requested per second over all apps
	// (with bursts of twice as many); client-go's own default is 5 with bursts of 10.
	DefaultRefreshRate = 5
	// passParallelism is how many apps one pass resolves at once.
	passParallelism = 4
	// backoff after a failed refresh: doubling from the first, up to the last.
	firstBackoff, maxBackoff = 5 * time.Second, 5 * time.Minute
)

// Refresher is the refresh loop: every pass it re-resolves what the tracked apps
// use, through the same cached view renders read (so it costs the registries no
// more than renders would: one tag list per repository per TTL, and HEADs of the
// candidates), and when an app's answer for any image differs from what the app
// rendered, asks Argo CD to render it again (at most once per interval per app,
// rate limited overall, failed requests retried with backoff). A stale answer or a
// failed resolution never triggers a refresh.
type Refresher struct {
	tracker  *Tracker
	batch    resolve.Batch
	notifier Notifier
	pins     PinWriter // nil: pin-mode use apps are refreshed like the others
	interval time.Duration
	every    time.Duration
	timeout  time.Duration
	limiter  *rate.Limiter
	log      *slog.Logger
	m        *Metrics
	// claims, when the replicas share Redis, lets one replica ask for the refresh
	// of one change; nil: each replica asks on its own.
	claims Claimer
	// landings asks Argo CD to look again at branches pins landed on (nil
	// without a notifier that can).
	landings *landings
}

// Claimer takes a name for a time if no replica holds it (cache.Redis.Claim).
type Claimer interface {
	Claim(ctx context.Context, name string, ttl time.Duration) (bool, error)
}

// NewRefresher returns the loop over tracker's apps, resolving through batch and
// refreshing through notifier: a pass every `every`, at most one refresh per app
// per interval, each app's resolution bounded by timeout.
func NewRefresher(tracker *Tracker, batch resolve.Batch, notifier Notifier, interval, every, timeout time.Duration, log *slog.Logger) *Refresher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Refresher{tracker: tracker, batch: batch, notifier: notifier, interval: interval, every: every, timeout: timeout,
		limiter: rate.NewLimiter(DefaultRefreshRate, 2*DefaultRefreshRate), log: log, m: tracker.m}
}

// Run makes a pass every period until ctx ends. The first pass is one period after
// the start: a daemon that starts tracks nothing, and what it learns comes from
// renders, so a restart never causes a burst of refreshes.
func (r *Refresher) Run(ctx context.Context) {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Pass(ctx)
		}
	}
}

// Pass checks every tracked app once: it forgets the apps not rendered for too
// long, re-resolves the others and refreshes those whose answer changed.
func (r *Refresher) Pass(ctx context.Context) {
	r.tracker.expire()
	if r.landings != nil {
		r.landings.check(ctx)
	}
	r.checkAll(ctx, r.tracker.snapshot(), time.Time{})
}

// PassPushed checks at once the tracked apps with an image in a repository that
// repo accepts, told of a push at pushedAt (a registry webhook): an app whose
// answer changed is refreshed even if it was refreshed less than an interval ago
// (the push is news, and its answers are compared as always: a push of a tag the
// policy does not choose changes nothing), still within the overall rate limit
// and any backoff after a failure.
func (r *Refresher) PassPushed(ctx context.Context, repo func(repoKey string) bool, pushedAt time.Time) {
	r.checkAll(ctx, r.tracker.using(repo), pushedAt)
}

// checkAll checks apps, passParallelism at a time.
func (r *Refresher) checkAll(ctx context.Context, apps []appCheck, pushedAt time.Time) {
	sem := make(chan struct{}, passParallelism)
	var wg sync.WaitGroup
	for _, c := range apps {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r.check(ctx, c, pushedAt)
		}()
	}
	wg.Wait()
}

// change is one image whose answer differs from what the app rendered.
type change struct {
	image    string
	alias    string
	req      resolve.Request
	old, new string
	res      *resolve.Result
	pins     *pinSource          // where the new pin goes (pin-mode use); nil: a refresh
	holds    map[string]pin.Hold // the holds of the image's source
}

// check re-resolves one app and refreshes it if an answer changed. pushedAt is
// when a push to one of its repositories was announced (zero for a pass on
// schedule): the refresh interval does not hold such a change back.
func (r *Refresher) check(ctx context.Context, c appCheck, pushedAt time.Time) {
	reqs := make([]resolve.Request, len(c.images))
	for i, im := range c.images {
		reqs[i] = im.Request
	}
	rctx, cancel := context.WithTimeout(ctx, r.timeout)
	answers, err := r.batch.ResolveBatch(rctx, c.name, reqs)
	cancel()
	if err != nil || len(answers) != len(reqs) {
		r.log.Debug("refresh check: resolution failed", "app", c.name, "err", err)
		return
	}
	var changes []change
	for i, a := range answers {
		if a.Error != "" || a.Result == nil {
			// The render that a refresh causes would fail: leave the app as it is.
			r.log.Debug("refresh check: an image does not resolve; no refresh", "app", c.name, "image", reqs[i].Image, "err", a.Error)
			return
		}
		if len(a.Result.Stale) > 0 {
			continue // not news: the registry could not be asked
		}
		if ref := a.Result.ReferenceFor(reqs[i].Image); ref != c.images[i].Ref {
			changes = append(changes, change{image: reqs[i].Image, alias: c.images[i].Alias, req: reqs[i], old: c.images[i].Ref, new: ref, res: a.Result,
				pins: c.pins[i], holds: c.holds[i]})
		}
	}
	if len(changes) > 0 {
		changes = r.tracker.reverted(c.name, changes)
	}
	if len(changes) == 0 {
		r.tracker.settle(c)
		return
	}
	interval := r.interval
	if !pushedAt.IsZero() {
		interval = 0
	}
	switch due, firstHold := r.tracker.due(c, interval); {
	case !due && firstHold:
		r.m.Refreshes.WithLabelValues(outcomeSkippedInterval).Inc()
		r.log.Info("refresh held back: the app was refreshed less than an interval ago", "app", c.name, "interval", r.interval)
		return
	case !due:
		return
	}
	if r.pins != nil && changes[0].pins != nil {
		// No Argo CD request: the pin writer batches what a pass submits into one
		// commit per repository and branch, so the refresh rate limit does not
		// pace it (it would spread 500 apps' pins over 100 s and 50 commits).
		r.commitPins(c, changes)
		r.observePushed(pushedAt)
		return
	}
	if err := r.limiter.Wait(ctx); err != nil {
		return
	}
	if r.notifier == nil {
		return // no Kubernetes API: only pins can be committed
	}
	if !r.claim(ctx, c, changes) {
		// Another replica saw the same change first and asks for it: expect the
		// new answers, as if this one had asked.
		r.tracker.refreshed(c, changes, true)
		r.m.Refreshes.WithLabelValues(outcomeOtherReplica).Inc()
		r.log.Debug("refresh asked by another replica", "app", c.name)
		return
	}
	requested, err := r.notifier.HardRefresh(ctx, c.app)
	switch {
	case errors.Is(err, notify.ErrAppGone):
		r.tracker.Forget(c.name, outcomeAppGone)
		r.m.Refreshes.WithLabelValues(outcomeAppGone).Inc()
		r.log.Info("refresh: the application no longer exists; forgotten", "app", c.name, "err", err)
	case err != nil:
		wait := r.tracker.failed(c.name)
		r.m.Refreshes.WithLabelValues(outcomeFailed).Inc()
		r.log.Warn("refresh failed", "app", c.name, "err", err, "retryIn", wait)
	default:
		// Only a refresh this call asked for is sure to render after the new
		// answers were seen: one already pending may be a render under way with the
		// old ones, so that case is checked again after the interval.
		r.tracker.refreshed(c, changes, requested)
		r.observePushed(pushedAt)
		outcome, msg := outcomeRequested, "refresh requested: a new image matches"
		if !requested {
			outcome, msg = outcomeAlreadyPending, "refresh already pending on the Application; checked again after the interval"
		}
		r.m.Refreshes.WithLabelValues(outcome).Inc()
		var images, olds, news []string
		for _, ch := range changes {
			images, olds, news = append(images, ch.image), append(olds, ch.old), append(news, ch.new)
		}
		r.log.Info(msg, "app", c.name, "application", c.app.String(), "image", strings.Join(images, ", "),
			"old", strings.Join(olds, ", "), "new", strings.Join(news, ", "), "outcome", outcome)
	}
}

// observePushed records the time from a push's announcement to the refresh (or
// pin commit) it led to.
func (r *Refresher) observePushed(pushedAt time.Time) {
	if !pushedAt.IsZero() {
		r.m.PushToRefresh.Observe(time.Since(pushedAt).Seconds())
	}
}

// claim reports whether this replica asks for the refresh of app c for changes:
// with shared Redis, the first replica to see a change claims it for two passes,
// long enough for the others, which read the same shared tag lists, to see it too;
// a render that lands on a replica with an older list and shows the old tag is
// asked for again after that, as without Redis. Without Redis, or while it is
// unavailable, every replica asks.
func (r *Refresher) claim(ctx context.Context, c appCheck, changes []change) bool {
	if r.claims == nil {
		return true
	}
	parts := []string{c.app.String()}
	for _, ch := range changes {
		parts = append(parts, ch.req.Key()+"\x00"+ch.old+"\x00"+ch.new)
	}
	slices.Sort(parts[1:]) // the same change, however a replica ordered it
	h := sha256.Sum256([]byte(strings.Join(parts, "\x01")))
	ok, err := r.claims.Claim(ctx, "refresh:"+hex.EncodeToString(h[:16]), 2*r.every)
	return ok || err != nil
}

// commitPins queues the new pins of a pin-mode use app: the commit makes Argo CD
// render the app again by itself, and a revert of it rolls the app back. The
// changes are taken as rendered: the writer never writes a pin twice, and a
// person's edit of the pin in between wins.
func (r *Refresher) commitPins(c appCheck, changes []change) {
	bySource := map[*pinSource]*pin.Edit{}
	var order []*pinSource
	for _, ch := range changes {
		if ch.pins == nil {
			continue
		}
		e := bySource[ch.pins]
		if e == nil {
			e = &pin.Edit{App: c.name, Dir: ch.pins.dir, Target: ch.pins.target, Base: map[string]string{}, DetectHolds: true}
			bySource[ch.pins] = e
			order = append(order, ch.pins)
		}
		e.Pins = append(e.Pins, pipeline.PinOf(ch.alias, ch.req, ch.res))
		e.Base[ch.alias] = ch.old
	}
	for _, src := range order {
		r.pins.Submit(pin.Change{RepoURL: src.repoURL, Branch: src.branch, Edit: *bySource[src], Push: src.push, PRGroup: src.prGroup})
	}
	r.tracker.pinned(c.name, changes)
	// A direct pin commit is what the app renders next; a pull request is not,
	// until it merges: the app keeps rendering the base branch's pins, which
	// a newer pin's edit is then based on.
	direct := slices.ContainsFunc(order, func(src *pinSource) bool { return src.push != pin.PushPullRequest })
	r.tracker.refreshed(c, changes, direct)
	r.m.Refreshes.WithLabelValues(outcomePinSubmitted).Inc()
	var olds, news []string
	for _, ch := range changes {
		olds, news = append(olds, ch.old), append(news, ch.new)
	}
	r.log.Info("new pins queued for commit: a new image matches", "app", c.name, "old", strings.Join(olds, ", "), "new", strings.Join(news, ", "))
}

// due says whether c's app may be refreshed now, and marks its change pending. It
// is false when the app rendered again since the snapshot (its answers are news to
// nobody), within the interval of its last refresh (firstHold the first time that
// holds a change back), or while backing off after a failure.
func (t *Tracker) due(c appCheck, interval time.Duration) (due, firstHold bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a, ok := t.apps[c.name]
	if !ok || !a.rendered.Equal(c.rendered) {
		return false, false
	}
	now := t.now()
	newlyPending := a.pendingSince.IsZero()
	if newlyPending {
		a.pendingSince = now
	}
	if !a.lastRefresh.IsZero() && now.Sub(a.lastRefresh) < interval {
		return false, newlyPending
	}
	return !now.Before(a.nextAttempt), false
}

// refreshed records a refresh. When this call requested it (adopt), the app is
// expected to render the new answers, so they are what later passes compare
// against: another replica may do the render, and without this every replica that
// tracks the app would ask again each interval. An app that rendered during the
// call keeps what it rendered.
func (t *Tracker) refreshed(c appCheck, changes []change, adopt bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a, ok := t.apps[c.name]
	if !ok {
		return
	}
	a.lastRefresh = t.now()
	a.attempts, a.nextAttempt = 0, time.Time{}
	if !adopt || !a.rendered.Equal(c.rendered) {
		return
	}
	a.pendingSince = time.Time{}
	t.markAppLocked(a) // the references adopted are what a restarted daemon compares against
	for _, s := range a.sources {
		for i, im := range s.images {
			for _, ch := range changes {
				if im.key == ch.req.Key() && im.Ref == ch.old {
					s.images[i].Ref = ch.new
				}
			}
		}
	}
}

// failed records a failed refresh and returns the backoff before the next try.
func (t *Tracker) failed(name string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	a, ok := t.apps[name]
	if !ok {
		return 0
	}
	a.attempts++
	wait := firstBackoff << min(a.attempts-1, 10)
	if wait > maxBackoff {
		wait = maxBackoff
	}
	a.nextAttempt = t.now().Add(wait)
	return wait
}
