package resolve_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// limitedResolver is a Resolver over a Remote without memo whose transport is
// wrapped by a Limiter, as the daemon builds it, recording into m.
func limitedResolver(t testing.TB, limits []resolve.RateLimit, m *resolve.TransportMetrics, opts ...resolve.RemoteOption) *resolve.Resolver {
	t.Helper()
	lim := resolve.NewLimiter(limits, resolve.DefaultRegistryConcurrency, m)
	return newResolver(t, append([]resolve.RemoteOption{resolve.WithoutMemo(), resolve.WithTransportWrapper(lim.Wrap)}, opts...)...)
}

func TestRateLimitAppliesToEveryAttempt(t *testing.T) {
	s := rt.New(t, rt.WithBearerAuth("robot", "pw"))
	pushTags(t, s, "app", "1.0.0", "1.1.0", "1.2.0")
	m := resolve.NewTransportMetrics(prometheus.NewRegistry())
	r := limitedResolver(t, []resolve.RateLimit{{Registry: s.Host, RPS: 50, Burst: 1}}, m,
		resolve.WithKeychain(staticKeychain{s.Host, "robot", "pw"}))
	mustResolve(t, r, s, "app", resolve.PolicySpec{Strategy: "newest-build"})
	host := s.Host // an address: no Docker Hub alias to fold
	// Every request the registry saw (ping, token, tags, manifests, blobs) went
	// through the bucket.
	waits := testutil.CollectAndCount(m.RateLimitWait)
	if waits != 1 {
		t.Fatalf("wait series: %d, want one (this registry)", waits)
	}
	var observed int
	for _, k := range []string{"ping", "token", "tags", "manifest", "blob"} {
		for _, method := range []string{"GET", "HEAD"} {
			for _, st := range []string{"200", "401"} {
				observed += int(testutil.ToFloat64(m.Requests.WithLabelValues(host, k, method, st)))
			}
		}
	}
	if observed != s.Total() {
		t.Errorf("requests counted %d, registry saw %d: %v", observed, s.Total(), s.Counts())
	}
	if s.Count(rt.Token) == 0 || s.Count(rt.Ping) == 0 {
		t.Errorf("no token or ping request: %v", s.Counts())
	}
}
