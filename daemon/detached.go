package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// detachedBatch resolves each request of a batch in the daemon's time, not the
// caller's: a cold resolution (a newest-build over a thousand tags) goes on after
// the render that started it gave up at its deadline, so that Argo CD's retry is
// answered from the filled registry view instead of starting over and giving up
// again. Identical requests of one app in flight, from one batch or from
// concurrent callers, share one resolution (singleflight): a render's two fields of
// one image reach the registry view once. Each is bounded by timeout and stopped
// when the daemon stops.
type detachedBatch struct {
	resolver *resolve.Resolver
	timeout  time.Duration
	life     context.Context // ends when the daemon stops
	sf       singleflight.Group
	// resolved, when set (a test hook), is told when a resolution has ended.
	resolved func(app string, req resolve.Request)
}

func newDetachedBatch(life context.Context, r *resolve.Resolver, timeout time.Duration) *detachedBatch {
	return &detachedBatch{resolver: r, timeout: timeout, life: life}
}

// ResolveBatch implements resolve.Batch: one Answer per request, in order. A
// request still resolving when ctx ends is answered with an error that says so;
// its resolution goes on.
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
	ch := b.sf.DoChan(app+"\x00"+req.Key(), func() (any, error) {
		// The caller's values (not its deadline), the daemon's lifetime, a bound.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
		defer cancel()
		stop := context.AfterFunc(b.life, cancel)
		defer stop()
		if b.resolved != nil {
			defer b.resolved(app, req)
		}
		answers, err := b.resolver.ResolveBatch(rctx, app, []resolve.Request{req})
		if err != nil {
			return resolve.Answer{Error: err.Error(), ErrorKind: resolve.KindInternal}, nil
		}
		return answers[0], nil
	})
	select {
	case res := <-ch:
		return res.Val.(resolve.Answer)
	case <-ctx.Done():
		return resolve.Answer{ErrorKind: resolve.KindRegistry, Error: fmt.Sprintf(
			"%s: the registry view is still being filled (the daemon goes on reading it, for up to %s); "+
				"Argo CD retries the render and the retry is answered from it", req.Image, b.timeout)}
	}
}
