package resolve

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// pauseClock is the limiter's clock in tests: sleeping advances it.
type pauseClock struct {
	mu     sync.Mutex
	t      time.Time
	sleeps []time.Duration
}

func (c *pauseClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *pauseClock) sleep(_ context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.t = c.t.Add(d)
	return nil
}

func (c *pauseClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *pauseClock) slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sleeps)
}

// throttlingLimiter is a limiter on a fake clock in front of a registry that
// answers 429 with retryAfter to the paths in throttle (once each), 200 otherwise,
// and records the paths it was asked for.
func throttlingLimiter(retryAfter string, throttle ...string) (*Limiter, *pauseClock, func(path string) *http.Response, func() []string) {
	clock := &pauseClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := NewLimiter(nil, 0, nil)
	lim.now, lim.sleep = clock.now, clock.sleep
	var mu sync.Mutex
	var seen []string
	pending := map[string]bool{}
	for _, p := range throttle {
		pending[p] = true
	}
	tr := lim.Wrap(roundTripper(func(req *http.Request) (*http.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, req.URL.Path)
		if pending[req.URL.Path] {
			delete(pending, req.URL.Path)
			return &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {retryAfter}}, Body: http.NoBody}, nil
		}
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	}))
	do := func(path string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, "http://registry.test"+path, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			panic(err)
		}
		return resp
	}
	return lim, clock, do, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// A registry asking for a day (in seconds or as an HTTP date) pauses for at most
// the cap: requests meanwhile are answered 429 locally with a Retry-After within
// the cap, and once the cap is over the registry is asked again.
func TestRetryAfterPauseIsCapped(t *testing.T) {
	day := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC).Format(http.TimeFormat)
	for _, ra := range []string{"86400", day} {
		t.Run(ra, func(t *testing.T) {
			lim, clock, do, seen := throttlingLimiter(ra, "/v2/a/tags/list")
			if resp := do("/v2/a/tags/list"); resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("first answer %d", resp.StatusCode)
			}
			if got := lim.pausedSeconds()["registry.test"]; got <= 0 || got > DefaultPauseCap.Seconds() {
				t.Errorf("paused %vs, want within the cap %v", got, DefaultPauseCap)
			}
			resp := do("/v2/a/manifests/1.0")
			secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			if resp.StatusCode != http.StatusTooManyRequests || secs <= 0 || secs > int(DefaultPauseCap.Seconds()) {
				t.Errorf("during the pause: %d with Retry-After %q, want a local 429 within the cap", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			clock.advance(DefaultPauseCap)
			if resp := do("/v2/a/manifests/1.0"); resp.StatusCode != http.StatusOK {
				t.Errorf("after the cap: %d, want the registry asked again", resp.StatusCode)
			}
			if want := []string{"/v2/a/tags/list", "/v2/a/manifests/1.0"}; !slices.Equal(seen(), want) {
				t.Errorf("registry asked for %v, want %v", seen(), want)
			}
			if got := lim.pausedSeconds()["registry.test"]; got != 0 {
				t.Errorf("paused %vs after the pause, want 0", got)
			}
		})
	}
}

// A 429 on repository a pauses a only: repository b of the same registry is asked
// at once, without waiting; a's next request waits out Retry-After; a 429 on a
// request naming no repository (the ping) pauses the whole registry.
func TestRetryAfterPausesOnlyTheRepositoryAsked(t *testing.T) {
	lim, clock, do, seen := throttlingLimiter("10", "/v2/a/tags/list", "/v2/")
	do("/v2/a/tags/list")
	for _, p := range []string{"/v2/b/tags/list", "/v2/b/manifests/1.0", "/v2/org/a/tags/list", "/v2/a/b/blobs/sha256:00"} {
		if resp := do(p); resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
	if s := clock.slept(); len(s) != 0 {
		t.Fatalf("requests of other repositories waited %v", s)
	}
	if resp := do("/v2/a/manifests/1.0"); resp.StatusCode != http.StatusOK {
		t.Errorf("a after its pause: %d", resp.StatusCode)
	}
	if s := clock.slept(); !slices.Equal(s, []time.Duration{10 * time.Second}) {
		t.Errorf("a waited %v, want its Retry-After: 10s", s)
	}
	if n := testutil.ToFloat64(lim.m.Pauses.WithLabelValues("registry.test")); n != 1 {
		t.Errorf("pauses counted %v, want 1", n)
	}

	// The ping names no repository: the whole host pauses.
	do("/v2/")
	do("/v2/b/tags/list")
	if s := clock.slept(); len(s) != 2 || s[1] != 10*time.Second {
		t.Errorf("after a 429 to the ping, b waited %v, want 10s", s)
	}
	if want := []string{"/v2/a/tags/list", "/v2/b/tags/list", "/v2/b/manifests/1.0", "/v2/org/a/tags/list", "/v2/a/b/blobs/sha256:00",
		"/v2/a/manifests/1.0", "/v2/", "/v2/b/tags/list"}; !slices.Equal(seen(), want) {
		t.Errorf("registry asked for %v\nwant %v", seen(), want)
	}
}

// The paused seconds gauge has one series per registry host (no repository
// label), counting down to 0.
func TestPausedSecondsGauge(t *testing.T) {
	lim, clock, do, _ := throttlingLimiter("60", "/v2/a/tags/list", "/v2/org/b/tags/list")
	do("/v2/a/tags/list")
	do("/v2/org/b/tags/list")
	clock.advance(15 * time.Second)
	want := `
# HELP argocd_image_resolver_ratelimit_paused_seconds Seconds left of the longest Retry-After pause of a registry (of the whole host or of one of its repositories), 0 when none; a series for every registry paused since start.
# TYPE argocd_image_resolver_ratelimit_paused_seconds gauge
argocd_image_resolver_ratelimit_paused_seconds{registry="registry.test"} 45
`
	if err := testutil.CollectAndCompare(lim.m.paused, strings.NewReader(want), "argocd_image_resolver_ratelimit_paused_seconds"); err != nil {
		t.Error(err)
	}
	clock.advance(time.Minute)
	if err := testutil.CollectAndCompare(lim.m.paused, strings.NewReader(strings.Replace(want, "} 45", "} 0", 1)), "argocd_image_resolver_ratelimit_paused_seconds"); err != nil {
		t.Error(err)
	}
	if n := testutil.ToFloat64(lim.m.Pauses.WithLabelValues("registry.test")); n != 2 {
		t.Errorf("pauses counted %v, want 2", n)
	}
}

func TestPathRepository(t *testing.T) {
	for p, want := range map[string]string{
		"/v2/": "", "/v2": "", "/token": "", "/v2/_catalog": "",
		"/v2/a/tags/list": "a", "/v2/org/app/manifests/1.0": "org/app",
		"/v2/org/app/blobs/sha256:ab": "org/app", "/v2/x/manifests/manifests/1": "x/manifests",
	} {
		if got := pathRepository(p); got != want {
			t.Errorf("%s: %q, want %q", p, got, want)
		}
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
	ctx := ContextForRepository(context.Background(), "registry.test/x")
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
		ctx, cancel := context.WithTimeout(ContextForRepository(context.Background(), repo), time.Second)
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
func requestSeries(t testing.TB, m *TransportMetrics) map[string]float64 {
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

// Limiters that are gone (a configuration reloaded) leave the gauge: the Metrics
// do not keep them.
func TestPausedSecondsForgetsDroppedLimiters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewTransportMetrics(reg)
	for range 100 {
		lim := NewLimiter(nil, 0, m)
		lim.pause(pauseKey{host: "registry.test"}, time.Now().Add(time.Hour))
	}
	runtime.GC()
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	m.paused.mu.Lock()
	n := len(m.paused.sources)
	m.paused.mu.Unlock()
	if n > 10 {
		t.Errorf("%d limiters kept after they were dropped", n)
	}
}
