package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// detachedBatch resolves each request of a batch in the daemon's time, not the
// caller's: a cold resolution (a newest-build over a thousand tags) goes on reading
// the registry after the render that started it gave up at its deadline, so that
// Argo CD's retry is answered from the filled registry view instead of starting
// over and giving up again. Its work over the tag list (filters, ordering) is for
// its callers only: it stops when none waits any more (resolve.WithWaiter).
// Identical requests of one app in flight, from one batch or from concurrent
// callers, share one resolution (singleflight): a render's two fields of one image
// reach the registry view once. Each is bounded by timeout and stopped when the
// daemon stops.
type detachedBatch struct {
	resolver *resolve.Resolver
	reads    *readingRegistry // the resolver's registry view; nil: not known
	timeout  time.Duration
	life     context.Context // ends when the daemon stops
	sf       singleflight.Group
	// resolved, when set (a test hook), is told when a resolution has ended.
	resolved func(app string, req resolve.Request)

	mu      sync.Mutex
	flights map[string]*waiters // by flight key
}

// waiters are the callers waiting for one flight; work ends when none is left.
type waiters struct {
	n    int
	work context.Context
	stop context.CancelCauseFunc
}

// errNoWaiter is the error of a flight that stopped its work because all its
// callers had left: a caller that joined it meanwhile starts it again.
var errNoWaiter = errors.New("no caller waits")

// waitGrace bounds how long a caller whose context ended waits for a resolution
// that is not reading the registry to say how it ended (its work over the tag
// list stops at once when no caller waits).
const waitGrace = time.Second

func newDetachedBatch(life context.Context, r *resolve.Resolver, reads *readingRegistry, timeout time.Duration) *detachedBatch {
	return &detachedBatch{resolver: r, reads: reads, timeout: timeout, life: life, flights: map[string]*waiters{}}
}

// ResolveBatch implements resolve.Batch: one Answer per request, in order. A
// request still resolving when ctx ends is answered with an error that says what
// it was doing: still reading the registry (which goes on), or how it ended.
func (b *detachedBatch) ResolveBatch(ctx context.Context, app string, reqs []resolve.Request) ([]resolve.Answer, error) {
	answers := make([]resolve.Answer, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() { answers[i] = b.one(ctx, app, req) })
	}
	wg.Wait()
	return answers, nil
}

func (b *detachedBatch) one(ctx context.Context, app string, req resolve.Request) resolve.Answer {
	key := app + "\x00" + req.Key()
	for {
		a, again := b.join(ctx, key, app, req)
		if !again {
			return a
		}
	}
}

// join waits for key's flight, starting it if none is in flight; again when the
// flight joined had stopped for want of callers while this one still waits.
func (b *detachedBatch) join(ctx context.Context, key, app string, req resolve.Request) (a resolve.Answer, again bool) {
	work, leave := b.wait(ctx, key)
	defer leave()
	ch := b.sf.DoChan(key, func() (any, error) { return b.resolve(ctx, work, app, req) })
	select {
	case res := <-ch:
		if errors.Is(res.Err, errNoWaiter) && ctx.Err() == nil {
			return resolve.Answer{}, true
		}
		return res.Val.(resolve.Answer), false
	case <-ctx.Done():
		return b.afterCaller(ch, req), false
	}
}

// resolve runs one flight: in the caller's values (not its deadline), the daemon's
// lifetime and a bound, its work over tags stopping when work ends.
func (b *detachedBatch) resolve(ctx, work context.Context, app string, req resolve.Request) (any, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	stop := context.AfterFunc(b.life, cancel)
	defer stop()
	if b.resolved != nil {
		defer b.resolved(app, req)
	}
	answers, err := b.resolver.ResolveBatch(resolve.WithWaiter(rctx, work), app, []resolve.Request{req})
	if err != nil {
		return resolve.Answer{Error: err.Error(), ErrorKind: resolve.KindInternal}, nil
	}
	a := answers[0]
	if a.Error != "" && work.Err() != nil {
		return a, errNoWaiter
	}
	return a, nil
}

// wait counts the caller of ctx as waiting for key's flight until ctx ends or
// leave is called; work ends, with the cause of the last caller's context, when
// no caller waits.
func (b *detachedBatch) wait(ctx context.Context, key string) (work context.Context, leave func()) {
	b.mu.Lock()
	w := b.flights[key]
	if w == nil {
		w = &waiters{}
		w.work, w.stop = context.WithCancelCause(context.Background())
		b.flights[key] = w
	}
	w.n++
	b.mu.Unlock()
	var once sync.Once
	release := func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if w.n--; w.n == 0 {
				w.stop(context.Cause(ctx))
				if b.flights[key] == w {
					delete(b.flights, key)
				}
			}
		})
	}
	stopAfter := context.AfterFunc(ctx, release)
	return w.work, func() {
		stopAfter()
		release()
	}
}

// afterCaller answers a caller whose context ended while its flight went on:
// "still being filled" only while the daemon reads the registry for the image's
// repository; else the flight's own answer (its work stops now that nobody waits),
// or, past waitGrace, that it has not answered.
func (b *detachedBatch) afterCaller(ch <-chan singleflight.Result, req resolve.Request) resolve.Answer {
	repo := ""
	if r, err := resolve.RepoOf(req.Image); err == nil {
		repo = r.String()
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	grace := time.NewTimer(waitGrace)
	defer grace.Stop()
	for {
		if b.reads == nil || (repo != "" && b.reads.reading(repo)) {
			return resolve.Answer{ErrorKind: resolve.KindRegistry, Error: fmt.Sprintf(
				"%s: the registry view is still being filled (the daemon goes on reading it, for up to %s); "+
					"Argo CD retries the render and the retry is answered from it", req.Image, b.timeout)}
		}
		select {
		case res := <-ch:
			return res.Val.(resolve.Answer)
		case <-grace.C:
			return resolve.Answer{ErrorKind: resolve.KindInternal, Error: fmt.Sprintf(
				"%s: no answer when the render ended, and the daemon is not reading the registry for it", req.Image)}
		case <-tick.C:
		}
	}
}
