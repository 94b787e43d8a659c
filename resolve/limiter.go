package resolve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// AnyRegistry is the RateLimit.Registry value that applies to every registry no
// other entry names; each such registry gets a bucket of its own.
const AnyRegistry = "*"

// RateLimit is a token bucket: RPS requests per second on average, bursts of up to
// Burst, for the requests of one registry or of the repositories under a prefix.
type RateLimit struct {
	// Registry is a registry host[:port] (docker.io, ghcr.io, 10.0.0.5:5000),
	// optionally with a path (ghcr.io/org: that org's repositories), or "*".
	Registry string  `json:"registry"`
	RPS      float64 `json:"rps"`
	Burst    int     `json:"burst,omitempty"`
}

func (l RateLimit) String() string {
	return fmt.Sprintf("%s=%s:%d", l.Registry, strconv.FormatFloat(l.RPS, 'f', -1, 64), l.Burst)
}

// requestTarget is what a registry request is for, carried by its context.
type requestTarget struct {
	host string // registry host, Docker Hub folded into docker.io
	repo string // RepoKey of the repository; "" when unknown
}

type requestTargetKey struct{}

// ContextForRepository returns ctx telling the Limiter and the request metrics
// which repository (RepoKey form: docker.io/library/nginx) the registry requests
// made with it are for. Token requests go to another host (auth.docker.io for
// docker.io), and a registry may be read through another endpoint; both count
// against the registry the image names.
func ContextForRepository(ctx context.Context, repoKey string) context.Context {
	host, _, _ := strings.Cut(repoKey, "/")
	return context.WithValue(ctx, requestTargetKey{}, requestTarget{host: normaliseHost(host), repo: repoKey})
}

// NormalisePrefix checks host[:port][/path], the registry of a RateLimit, and folds
// Docker Hub's aliases into docker.io, as ParseRegistries does for the prefixes of
// registries entries (normalisePrefix, which does not check the path).
func NormalisePrefix(p string) (string, error) {
	p = strings.TrimSuffix(strings.TrimSpace(p), "/")
	host, path, hasPath := strings.Cut(p, "/")
	if _, err := name.NewRegistry(host, name.StrictValidation); err != nil || host == "" {
		return "", errors.New("not a registry host[:port], optionally followed by /path")
	}
	if hasPath {
		if _, err := name.NewRepository("registry.test/"+path, name.StrictValidation); err != nil {
			return "", errors.New("not a registry host[:port], optionally followed by /path")
		}
	}
	host = normaliseHost(host)
	if path != "" {
		return host + "/" + path, nil
	}
	return host, nil
}

// normaliseHost folds Docker Hub's aliases into docker.io, as RepoKey does.
func normaliseHost(h string) string {
	switch h {
	case "index.docker.io", "registry-1.docker.io":
		return "docker.io"
	}
	return h
}

// Limiter applies token buckets to every HTTP attempt, ping and token requests
// included, bounds the requests in flight per registry host, and counts them. A
// bucket belongs to the longest RateLimit prefix naming the request's repository,
// else to the request's registry host with the "*" limit. A 429 with Retry-After
// pauses what the registry throttled until then, for at most the pause cap
// (DefaultPauseCap): the repository when the request's path names one
// (/v2/REPO/...), else the whole registry host. A request that would have to wait
// longer than the maximum wait gets a 429 answer without reaching the registry,
// so the caller fails (or serves the last good answer) instead of hanging.
type Limiter struct {
	limits      []RateLimit // longest prefix first, "*" excluded
	any         *RateLimit
	concurrency int
	maxWait     time.Duration // longest a request waits out a pause; longer: a local 429
	pauseCap    time.Duration // longest pause a Retry-After sets
	m           *TransportMetrics

	// now and sleep are the clock; tests replace them.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu          sync.Mutex
	buckets     map[string]*rate.Limiter // by prefix, or host under "*"; nil: unlimited
	hosts       map[string]*hostState
	pauses      map[pauseKey]time.Time // until when; expired entries are dropped as new ones come
	pausedHosts map[string]bool        // hosts ever paused: their gauge series

	pings pingPairs
}

// Request statuses besides HTTP codes (the status label of registry_requests_total).
const (
	StatusError = "error" // no HTTP answer: connection, TLS, timeout
	// StatusHTTPSFallback is a failed https ping that go-containerregistry followed
	// with a plain-HTTP ping of the same registry (insecure, loopback or private
	// address): that ping is counted with its own outcome, so a healthy plain-HTTP
	// registry shows no error.
	StatusHTTPSFallback = "https-fallback"
	// StatusCanceled is an attempt its caller stopped waiting for (context
	// canceled, not a deadline): the losing ping of the https/http race, an
	// abandoned render. It says nothing about the registry.
	StatusCanceled = "canceled"
)

// hostState is what all requests to one registry host share.
type hostState struct {
	gov *governor // nil: no bound on requests in flight
}

// NewLimiter returns a Limiter. concurrency is the most requests in flight per
// registry host, where its adaptive governor starts (see governor.go; 0: no
// bound). A nil m records into TransportMetrics of its own.
func NewLimiter(limits []RateLimit, concurrency int, m *TransportMetrics) *Limiter {
	if m == nil {
		m = NewTransportMetrics(prometheus.NewRegistry())
	}
	l := &Limiter{concurrency: concurrency, m: m, maxWait: DefaultRetryPolicy.MaxWait, pauseCap: DefaultPauseCap,
		now: time.Now, sleep: sleepCtx,
		buckets: map[string]*rate.Limiter{}, hosts: map[string]*hostState{},
		pauses: map[pauseKey]time.Time{}, pausedHosts: map[string]bool{}}
	m.addPauseSource(l)
	for _, rl := range limits {
		if rl.Registry == AnyRegistry {
			l.any = &rl
			continue
		}
		if p, err := NormalisePrefix(rl.Registry); err == nil {
			rl.Registry = p
		}
		l.limits = append(l.limits, rl)
	}
	slices.SortStableFunc(l.limits, func(a, b RateLimit) int { return len(b.Registry) - len(a.Registry) })
	return l
}

// bucket returns the token bucket of a request (nil: no limit).
func (l *Limiter) bucket(t requestTarget) *rate.Limiter {
	key, limit := t.host, l.any
	for i := range l.limits {
		p := l.limits[i].Registry
		if p == t.host || (t.repo != "" && (t.repo == p || strings.HasPrefix(t.repo, p+"/"))) {
			key, limit = p, &l.limits[i]
			break
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		if limit != nil && limit.RPS > 0 {
			b = rate.NewLimiter(rate.Limit(limit.RPS), max(limit.Burst, 1))
		}
		l.buckets[key] = b
	}
	return b
}

func (l *Limiter) host(h string) *hostState {
	l.mu.Lock()
	defer l.mu.Unlock()
	hs, ok := l.hosts[h]
	if !ok {
		hs = &hostState{}
		if l.concurrency > 0 {
			hs.gov = newGovernor(l.concurrency, time.Now)
		}
		l.hosts[h] = hs
	}
	return hs
}

// Wrap puts the limiter in front of next; give it to WithTransportWrapper.
//
// When next is an *http.Transport (the Remote's own), its idle pool is raised to
// the requests the limiter lets run per registry: with net/http's default of 2 idle
// connections per host, every request beyond 2 in flight would close its connection
// afterwards and the next one would dial (and handshake TLS) again.
func (l *Limiter) Wrap(next http.RoundTripper) http.RoundTripper {
	if tr, ok := next.(*http.Transport); ok {
		want := l.concurrency
		if want <= 0 {
			want = DefaultRegistryConcurrency
		}
		if tr.MaxIdleConnsPerHost < want {
			tr.MaxIdleConnsPerHost = want
		}
		if tr.MaxIdleConns != 0 && tr.MaxIdleConns < 4*want {
			tr.MaxIdleConns = 4 * want
		}
	}
	return &limitedTransport{l: l, next: next}
}

type limitedTransport struct {
	l    *Limiter
	next http.RoundTripper
}

func (t *limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	tg, ok := ctx.Value(requestTargetKey{}).(requestTarget)
	if !ok || tg.host == "" {
		tg = requestTarget{host: normaliseHost(req.URL.Host)}
	}
	hs := t.l.host(tg.host)
	start := time.Now()
	kind := requestKind(req)
	if kind == "ping" && req.URL.Scheme == "http" {
		// Before any wait: the failed https ping this one may follow is waiting.
		t.l.pings.httpStarted(req.URL.Host)
	}
	pk := pauseKey{host: tg.host, repo: pathRepository(req.URL.Path)}
	if resp, err := t.l.waitPause(req, pk); resp != nil || err != nil {
		return resp, err
	}
	if b := t.l.bucket(tg); b != nil {
		if err := b.Wait(ctx); err != nil {
			return nil, fmt.Errorf("rate limit of %s: %w", tg.host, err)
		}
	}
	var sent time.Time
	if hs.gov != nil {
		var err error
		if sent, err = hs.gov.acquire(ctx); err != nil {
			return nil, err
		}
	}
	t.l.m.RateLimitWait.WithLabelValues(tg.host).Observe(time.Since(start).Seconds())

	resp, err := t.next.RoundTrip(req)
	if hs.gov != nil {
		hs.gov.release(sent, signalOf(ctx, resp, err))
	}
	record := func(status string) { t.l.m.Requests.WithLabelValues(tg.host, kind, req.Method, status).Inc() }
	switch {
	case err == nil:
		record(strconv.Itoa(resp.StatusCode))
	case kind == "ping" && req.URL.Scheme == "https":
		t.l.pings.httpsFailed(req.URL.Host, start, failureStatus(ctx), record)
	default:
		record(failureStatus(ctx))
	}
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		now := t.l.now()
		if d, ok := RetryAfter(resp.Header.Get("Retry-After"), now); ok && d > 0 {
			t.l.pause(pk, now.Add(min(d, t.l.pauseCap)))
		}
	}
	return resp, err
}

// concurrency is, for every registry host with a governor, its current limit and
// requests in flight.
func (l *Limiter) concurrencyState() map[string][2]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][2]int, len(l.hosts))
	for h, hs := range l.hosts {
		if hs.gov != nil {
			limit, inFlight := hs.gov.state()
			out[h] = [2]int{limit, inFlight}
		}
	}
	return out
}

// failureStatus is the status of an attempt that got no HTTP answer.
func failureStatus(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.Canceled) {
		return StatusCanceled
	}
	return StatusError
}

// requestKind classifies a registry request for metrics.
func requestKind(req *http.Request) string {
	p := req.URL.Path
	switch {
	case p == "/v2/" || p == "/v2":
		return "ping"
	case strings.HasPrefix(p, "/v2/") && strings.HasSuffix(p, "/tags/list"):
		return "tags"
	case strings.HasPrefix(p, "/v2/") && strings.Contains(p, "/manifests/"):
		return "manifest"
	case strings.HasPrefix(p, "/v2/") && strings.Contains(p, "/blobs/"):
		return "blob"
	case strings.Contains(p, "token") || strings.Contains(p, "oauth") ||
		req.URL.Query().Has("scope") || req.URL.Query().Has("service"):
		return "token"
	}
	return "other"
}
