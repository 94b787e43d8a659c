package cache

// The registry transport (resolve.Limiter) under the cache, as the daemon builds
// it: what a request is counted and paused under comes from the repository the
// cache's fetch names (resolve.ContextForRepository), and a throttled fetch that
// is retried after its pause is a fresh answer, not a stale one.

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// A 429 with Retry-After: 1 on repository a's tag list pauses a: the throttled
// request is retried after the pause; a request of another render, for repository
// b of the same registry, does not wait for it.
func TestRetryAfterPausesTheRepository(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "a", "linux/amd64", "1.0.0")
	pushTags(t, s, "b", "linux/amd64", "1.0.0")
	s.Inject(rt.Fault{Kind: rt.Tags, PathContains: "/v2/a/", Status: http.StatusTooManyRequests, RetryAfter: "1", Times: 1})
	f := newFixture(t, s, nil, nil)
	host := s.Host // an address: no Docker Hub alias to fold

	done := make(chan resolve.Answer, 1)
	go func() { done <- f.resolve(t, "a", resolve.PolicySpec{}) }()
	deadline := time.Now().Add(10 * time.Second)
	for countOf(f.m, "pauses", host) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no pause after the 429")
		}
		time.Sleep(time.Millisecond)
	}
	b := f.resolve(t, "b", resolve.PolicySpec{})
	a := <-done
	if a.Error != "" || b.Error != "" {
		t.Fatalf("a: %s; b: %s", a.Error, b.Error)
	}
	if len(a.Result.Stale) != 0 {
		t.Errorf("a retried answer is fresh, not stale: %v", a.Result.Stale)
	}

	var fault time.Time
	for _, r := range s.Requests() {
		if r.Fault {
			fault = r.At
		}
	}
	var afterA, afterB int
	for _, r := range s.Requests() {
		if !r.At.After(fault) {
			continue
		}
		if strings.HasPrefix(r.Path, "/v2/b/") {
			afterB++
			continue
		}
		if strings.HasPrefix(r.Path, "/v2/a/") {
			afterA++
			if gap := r.At.Sub(fault); gap < time.Second {
				t.Errorf("%s %s (%s) reached the registry %v after the 429, before Retry-After: 1", r.Method, r.Path, r.Kind, gap)
			}
		}
	}
	if fault.IsZero() || afterA == 0 || afterB == 0 { // a's retry, b's list at least
		t.Fatalf("fault at %v, %d requests of a and %d of b after it: %+v", fault, afterA, afterB, s.Requests())
	}
}

// requestSeries lists the registry_requests_total series as
// "registry kind method status" = count.
func requestSeries(t testing.TB, m *Metrics) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	go func() { m.Requests.Collect(ch); close(ch) }()
	series := map[string]float64{}
	for metric := range ch {
		var d dto.Metric
		if err := metric.Write(&d); err != nil {
			t.Fatal(err)
		}
		var labels []string
		for _, lp := range d.GetLabel() {
			labels = append(labels, lp.GetName()+"="+lp.GetValue())
		}
		series[strings.Join(labels, " ")] = d.GetCounter().GetValue()
	}
	return series
}

// A cold resolution against an insecure registry served over plain HTTP: the https
// ping go-containerregistry tries first fails, then plain HTTP answers. No
// status="error" series (a "registry errors" alert stays quiet), and the pings
// counted with an outcome are the pings the registry answered.
func TestInsecureRegistryPingIsNoError(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "demo/web", "linux/amd64", "1.0.0", "1.1.0")
	f := newFixture(t, s, nil, []resolve.RemoteOption{resolve.WithRegistries([]resolve.RegistryConfig{
		{Prefix: "registry.demo.local", API: s.Host, Insecure: true}})})
	ans, err := f.resolver.ResolveBatch(context.Background(), "test", []resolve.Request{{Image: "registry.demo.local/demo/web"}})
	if err != nil || ans[0].Error != "" {
		t.Fatalf("resolve: %v %s", err, ans[0].Error)
	}
	series := requestSeries(t, f.m)
	for k := range series {
		if strings.HasSuffix(k, " status="+resolve.StatusError) {
			t.Errorf("error series for a healthy insecure registry: %s; all: %v", k, series)
		}
	}
	ping := "kind=ping method=GET registry=registry.demo.local status="
	if series[ping+resolve.StatusHTTPSFallback] != 1 || series[ping+"200"] != float64(s.Count(rt.Ping)) || s.Count(rt.Ping) == 0 {
		t.Errorf("pings: %v; registry answered %d", series, s.Count(rt.Ping))
	}
}

// The same registry down: the failed https ping is still a fallback, and the
// plain-HTTP ping that followed is the one error per ping.
func TestInsecureRegistryDownPingIsOneError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	f := newFixture(t, rt.New(t), nil, []resolve.RemoteOption{resolve.WithRegistries([]resolve.RegistryConfig{
		{Prefix: "registry.demo.local", API: closed, Insecure: true}})})
	ans, err := f.resolver.ResolveBatch(context.Background(), "test", []resolve.Request{{Image: "registry.demo.local/demo/web"}})
	if err != nil || ans[0].Error == "" {
		t.Fatalf("resolve against a closed port: %v %+v", err, ans[0])
	}
	series := requestSeries(t, f.m)
	ping := "kind=ping method=GET registry=registry.demo.local status="
	if n := series[ping+resolve.StatusError]; n == 0 || series[ping+resolve.StatusHTTPSFallback] != n || len(series) != 2 {
		t.Errorf("pings of a registry down: %v, want as many errors as fallbacks", series)
	}
}
