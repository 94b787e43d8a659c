package cache

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func day(n int) time.Time { return t0.Add(time.Duration(n) * 24 * time.Hour) }

// fastRetry keeps retry tests quick while still exercising the waits.
var fastRetry = resolve.RetryPolicy{Attempts: 2, Backoff: 5 * time.Millisecond, MaxWait: 5 * time.Second}

// fakeClock is the cache's clock in tests: TTLs pass when the test says so.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type fixture struct {
	s        *rt.Server
	m        *Metrics
	limiter  *resolve.Limiter
	reg      *Registry
	resolver *resolve.Resolver
}

// newFixture builds the daemon's stack (limiter, Remote without memo, cache,
// resolver) over a registrytest server, as the daemon does.
func newFixture(t testing.TB, s *rt.Server, limits []resolve.RateLimit, remoteOpts []resolve.RemoteOption, opts ...Option) *fixture {
	t.Helper()
	m := NewMetrics()
	lim := resolve.NewLimiter(limits, resolve.DefaultRegistryConcurrency, m.Transport())
	ro := append([]resolve.RemoteOption{resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain()),
		resolve.WithoutMemo(), resolve.WithTransportWrapper(lim.Wrap)}, remoteOpts...)
	remote, err := resolve.NewRemote(ro...)
	if err != nil {
		t.Fatal(err)
	}
	reg := NewRegistry(remote, append([]Option{WithMetrics(m)}, opts...)...)
	t.Cleanup(reg.Close)
	r := resolve.NewResolver(reg)
	return &fixture{s: s, m: m, limiter: lim, reg: reg, resolver: r}
}

func (f *fixture) resolve(t testing.TB, repo string, spec resolve.PolicySpec) resolve.Answer {
	t.Helper()
	ans, err := f.resolver.ResolveBatch(context.Background(), "test", []resolve.Request{{Image: f.s.Ref(repo), Policy: spec}})
	if err != nil {
		t.Fatal(err)
	}
	return ans[0]
}

func (f *fixture) mustResolve(t testing.TB, repo string, spec resolve.PolicySpec) *resolve.Result {
	t.Helper()
	a := f.resolve(t, repo, spec)
	if a.Error != "" {
		t.Fatalf("resolve %s %+v: %s (%s)", repo, spec, a.Error, a.ErrorKind)
	}
	return a.Result
}

// waitIdle waits for background refreshes.
func (f *fixture) waitIdle() { f.reg.bg.Wait() }

// countOf reads a counter series.
func countOf(m *Metrics, which string, labels ...string) float64 {
	switch which {
	case "hits":
		return testutil.ToFloat64(m.CacheHits.WithLabelValues(labels...))
	case "misses":
		return testutil.ToFloat64(m.CacheMisses.WithLabelValues(labels...))
	case "stale":
		return testutil.ToFloat64(m.CacheStale.WithLabelValues(labels...))
	case "shared":
		return testutil.ToFloat64(m.Shared.WithLabelValues(labels...))
	case "refresh":
		return testutil.ToFloat64(m.RefreshAhead.WithLabelValues(labels...))
	case "pauses":
		return testutil.ToFloat64(m.Pauses.WithLabelValues(labels...))
	}
	panic("unknown counter " + which)
}

// pushTags pushes single-platform images, one per tag, built on successive days.
func pushTags(t testing.TB, s *rt.Server, repo, platform string, tags ...string) {
	t.Helper()
	for i, tag := range tags {
		s.Push(t, repo, tag, rt.Image(day(i), platform, rt.WithSeed(repo+tag)))
	}
}

func describeCounts(s *rt.Server) string {
	return fmt.Sprintf("%v (total %d)", s.Counts(), s.Total())
}
