package cache

import (
	"context"
	"errors"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// A 429 with Retry-After: 1 pauses the whole registry: the throttled request is
// retried after the pause, and a request of another render, for another
// repository, waits for it too.
func TestRetryAfterPausesTheRegistry(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "a", "linux/amd64", "1.0.0")
	pushTags(t, s, "b", "linux/amd64", "1.0.0")
	s.Inject(rt.Fault{Kind: rt.Tags, PathContains: "/v2/a/", Status: http.StatusTooManyRequests, RetryAfter: "1", Times: 1})
	f := newFixture(t, s, nil, nil)
	host := normaliseHost(s.Host)

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
	var after int
	for _, r := range s.Requests() {
		if !r.At.After(fault) {
			continue
		}
		after++
		if gap := r.At.Sub(fault); gap < time.Second {
			t.Errorf("%s %s (%s) reached the registry %v after the 429, before Retry-After: 1", r.Method, r.Path, r.Kind, gap)
		}
	}
	if fault.IsZero() || after < 2 { // a's retry, b's ping and list at least
		t.Fatalf("fault at %v, %d requests after it: %+v", fault, after, s.Requests())
	}
}

func TestRateLimitAppliesToEveryAttempt(t *testing.T) {
	s := rt.New(t, rt.WithBearerAuth("robot", "pw"))
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0", "1.2.0")
	f := newFixture(t, s, []RateLimit{{Registry: s.Host, RPS: 50, Burst: 1}},
		[]resolve.RemoteOption{resolve.WithKeychain(basicKeychain{"robot", "pw"})})
	f.mustResolve(t, "app", resolve.PolicySpec{Strategy: "newest-build"})
	host := normaliseHost(s.Host)
	// Every request the registry saw (ping, token, tags, manifests, blobs) went
	// through the bucket.
	waits := testutil.CollectAndCount(f.m.RateLimitWait)
	if waits != 1 {
		t.Fatalf("wait series: %d, want one (this registry)", waits)
	}
	var observed int
	for _, k := range []string{"ping", "token", "tags", "manifest", "blob"} {
		for _, method := range []string{"GET", "HEAD"} {
			for _, st := range []string{"200", "401"} {
				observed += int(testutil.ToFloat64(f.m.Requests.WithLabelValues(host, k, method, st)))
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

func TestRateLimitBucketIsShared(t *testing.T) {
	lim := NewLimiter([]RateLimit{{Registry: "registry.test", RPS: 10, Burst: 1}}, 0, nil)
	var calls int
	var mu sync.Mutex
	tr := lim.Wrap(roundTripper(func(*http.Request) (*http.Response, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	}))
	ctx := WithRepository(context.Background(), "registry.test/x")
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://mirror.test/v2/x/tags/list", nil)
			if _, err := tr.RoundTrip(req); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if h := testutil.CollectAndCount(lim.m.RateLimitWait); h != 1 || calls != 5 {
		t.Fatalf("series %d calls %d", h, calls)
	}
	// 5 requests at once, 10/s, bursts of 1: the bucket makes them wait 0, .1, .2,
	// .3 and .4s (a lower bound: they cannot go faster).
	count, sum := histogram(t, lim.m.RateLimitWait, "registry.test")
	if count != 5 || sum < 0.9 {
		t.Errorf("rate-limit waits: %d observations, %.2fs in all; want 5 and at least 0.9s", count, sum)
	}
	if got := testutil.ToFloat64(lim.m.Requests.WithLabelValues("registry.test", "tags", "GET", "200")); got != 5 {
		t.Errorf("requests counted under the registry named by the context: %v, want 5", got)
	}
}

func TestPauseLongerThanMaxAnswers429Locally(t *testing.T) {
	lim := NewLimiter(nil, 0, nil)
	var calls int
	tr := lim.Wrap(roundTripper(func(*http.Request) (*http.Response, error) {
		calls++
		h := http.Header{"Retry-After": {"3600"}}
		return &http.Response{StatusCode: http.StatusTooManyRequests, Header: h, Body: http.NoBody}, nil
	}))
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, "http://registry.test/v2/x/tags/list", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("resp %v err %v", resp, err)
		}
	}
	if calls != 1 {
		t.Errorf("the registry was asked %d times during its hour-long pause, want once", calls)
	}
}

func TestRequestKind(t *testing.T) {
	for path, want := range map[string]string{
		"/v2/":                           "ping",
		"/token?scope=repository:x:pull": "token",
		"/v2/token?service=gcr.io":       "token",
		"/oauth2/token":                  "token",
		"/v2/org/app/tags/list?n=1000":   "tags",
		"/v2/org/app/manifests/1.0":      "manifest",
		"/v2/org/app/blobs/sha256:ab":    "blob",
		"/v2/_catalog":                   "other",
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://r.test"+path, nil)
		if got := requestKind(req); got != want {
			t.Errorf("%s: %s, want %s", path, got, want)
		}
	}
}

func histogram(t testing.TB, h *prometheus.HistogramVec, labels ...string) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := h.WithLabelValues(labels...).(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestRateLimitByPrefix(t *testing.T) {
	lim := NewLimiter([]RateLimit{{Registry: "ghcr.io/org", RPS: 0.001, Burst: 1}, {Registry: "*", RPS: 1000, Burst: 1000}}, 0, nil)
	tr := lim.Wrap(roundTripper(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	}))
	do := func(repo string) error {
		ctx, cancel := context.WithTimeout(WithRepository(context.Background(), repo), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://ghcr.io/v2/", nil)
		_, err := tr.RoundTrip(req)
		return err
	}
	if err := do("ghcr.io/org/a"); err != nil {
		t.Fatal(err)
	}
	// The org's bucket is empty for the next 1000s: its next request fails at once
	// (it cannot wait past its deadline); other repositories of the host do not share it.
	if err := do("ghcr.io/org/b"); err == nil {
		t.Error("second request under ghcr.io/org was not limited")
	}
	for _, repo := range []string{"ghcr.io/other/a", "ghcr.io/organisation/a", "docker.io/library/nginx"} {
		if err := do(repo); err != nil {
			t.Errorf("%s shares ghcr.io/org's bucket: %v", repo, err)
		}
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
		if strings.HasSuffix(k, " status="+StatusError) {
			t.Errorf("error series for a healthy insecure registry: %s; all: %v", k, series)
		}
	}
	ping := "kind=ping method=GET registry=registry.demo.local status="
	if series[ping+StatusHTTPSFallback] != 1 || series[ping+"200"] != float64(s.Count(rt.Ping)) || s.Count(rt.Ping) == 0 {
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
	if n := series[ping+StatusError]; n == 0 || series[ping+StatusHTTPSFallback] != n || len(series) != 2 {
		t.Errorf("pings of a registry down: %v, want as many errors as fallbacks", series)
	}
}

// go-containerregistry races the two pings (transport.pingParallel): http starts
// when https fails, or after 300ms while https is still trying; the loser is
// canceled. Each ping is counted once, with the outcome that mattered.
func TestPingFallbackCounting(t *testing.T) {
	for _, tt := range []struct {
		name    string
		events  []string         // "start SCHEME" or "end SCHEME", in order
		outcome map[string]error // by scheme; nil: 200; context.Canceled: its context is canceled
		want    map[string]float64
	}{
		{"https fails, http answers",
			[]string{"start https", "end https", "start http", "end http"},
			map[string]error{"https": errTLS},
			map[string]float64{StatusHTTPSFallback: 1, "200": 1}},
		{"https fails, http fails too",
			[]string{"start https", "end https", "start http", "end http"},
			map[string]error{"https": errRefused, "http": errRefused},
			map[string]float64{StatusHTTPSFallback: 1, StatusError: 1}},
		{"https slow, http answers first, https canceled",
			[]string{"start https", "start http", "end http", "end https"},
			map[string]error{"https": context.Canceled},
			map[string]float64{"200": 1, StatusHTTPSFallback: 1}},
		{"https slow and fails after http answered",
			[]string{"start https", "start http", "end http", "end https"},
			map[string]error{"https": errRefused},
			map[string]float64{"200": 1, StatusHTTPSFallback: 1}},
		{"https answers, http racer canceled",
			[]string{"start https", "start http", "end https", "end http"},
			map[string]error{"http": context.Canceled},
			map[string]float64{"200": 1, StatusCanceled: 1}},
		{"secure registry: https fails, no http",
			[]string{"start https", "end https"},
			map[string]error{"https": errRefused},
			map[string]float64{StatusError: 1}},
		{"secure registry: https abandoned by its caller",
			[]string{"start https", "end https"},
			map[string]error{"https": context.Canceled},
			map[string]float64{StatusCanceled: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lim := NewLimiter(nil, 0, nil)
			lim.pings.wait = 50 * time.Millisecond
			entered := map[string]chan struct{}{"https": make(chan struct{}), "http": make(chan struct{})}
			release := map[string]chan struct{}{"https": make(chan struct{}), "http": make(chan struct{})}
			tr := lim.Wrap(roundTripper(func(req *http.Request) (*http.Response, error) {
				close(entered[req.URL.Scheme])
				<-release[req.URL.Scheme]
				if err := tt.outcome[req.URL.Scheme]; err != nil {
					return nil, err
				}
				return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
			}))
			cancels, done := map[string]context.CancelFunc{}, map[string]chan struct{}{}
			for _, ev := range tt.events {
				verb, scheme, _ := strings.Cut(ev, " ")
				if verb == "start" {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					cancels[scheme], done[scheme] = cancel, make(chan struct{})
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://10.0.0.5:5000/v2/", nil)
					go func() {
						defer close(done[scheme])
						_, _ = tr.RoundTrip(req)
					}()
					<-entered[scheme]
					continue
				}
				if tt.outcome[scheme] == context.Canceled {
					cancels[scheme]()
				}
				close(release[scheme])
				<-done[scheme]
			}
			want := map[string]float64{}
			for st, n := range tt.want {
				want["kind=ping method=GET registry=10.0.0.5:5000 status="+st] = n
			}
			// A failed https ping that no http one follows is counted after the wait.
			deadline := time.Now().Add(10 * time.Second)
			for got := requestSeries(t, lim.m); !maps.Equal(got, want); got = requestSeries(t, lim.m) {
				if time.Now().After(deadline) {
					t.Fatalf("series %v, want %v", got, want)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

var (
	errTLS     = errors.New(`http: server gave HTTP response to HTTPS client`)
	errRefused = errors.New("dial tcp 10.0.0.5:5000: connect: connection refused")
)
