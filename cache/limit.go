package cache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/google/go-containerregistry/pkg/name"
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

// target is what a registry request is for, carried by its context.
type target struct {
	host string // registry host, Docker Hub folded into docker.io
	repo string // resolve.RepoKey of the repository; "" when unknown
}

type targetKey struct{}

// WithRepository tells the rate limiter and the request metrics which repository
// (resolve.RepoKey form: docker.io/library/nginx) a request is for. Token requests
// go to another host (auth.docker.io for docker.io), and a registry may be read
// through another endpoint; both count against the registry the image names.
func WithRepository(ctx context.Context, repoKey string) context.Context {
	host, _, _ := strings.Cut(repoKey, "/")
	return context.WithValue(ctx, targetKey{}, target{host: normaliseHost(host), repo: repoKey})
}

// NormalisePrefix checks host[:port][/path] and folds Docker Hub's aliases into
// docker.io, as resolve does for registry prefixes.
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

// normaliseHost folds Docker Hub's aliases into docker.io, as resolve.RepoKey does.
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
	m           *Metrics

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

// pingFallbackWait is how long a failed https ping waits for the plain-HTTP ping
// go-containerregistry starts right after it, before it counts as an error.
const pingFallbackWait = 5 * time.Second

// pingPairs pairs go-containerregistry's two pings of a registry that may be plain
// HTTP (transport.ping: https first, http when https fails or is slow; both to the
// same URL host) so that the failed https attempt is not counted as an error.
type pingPairs struct {
	mu      sync.Mutex
	wait    time.Duration            // pingFallbackWait; tests shorten it
	httpAt  map[string]time.Time     // by URL host: when its last plain-HTTP ping started
	pending map[string][]*failedPing // by URL host: failed https pings waiting for it
}

// failedPing is an https ping that failed; record counts it exactly once.
type failedPing struct {
	once   sync.Once
	record func(status string)
	status string // StatusError or StatusCanceled, when no http ping follows
	timer  *time.Timer
}

func (p *failedPing) resolve(fallback bool) {
	p.once.Do(func() {
		if fallback {
			p.record(StatusHTTPSFallback)
			return
		}
		p.record(p.status)
	})
}

// httpStarted notes a plain-HTTP ping of host: the https pings of host that failed
// and wait for it are fallbacks.
func (pp *pingPairs) httpStarted(host string) {
	pp.mu.Lock()
	if pp.httpAt == nil {
		pp.httpAt = map[string]time.Time{}
	}
	pp.httpAt[host] = time.Now()
	waiting := pp.pending[host]
	delete(pp.pending, host)
	pp.mu.Unlock()
	for _, p := range waiting {
		p.timer.Stop()
		p.resolve(true)
	}
}

// httpsFailed counts an https ping of host started at start that failed with
// status: as a fallback when a plain-HTTP ping of host started since (it raced this
// one) or starts within the wait, else as status once the wait is over.
func (pp *pingPairs) httpsFailed(host string, start time.Time, status string, record func(string)) {
	p := &failedPing{record: record, status: status}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if at, ok := pp.httpAt[host]; ok && !at.Before(start) {
		p.resolve(true)
		return
	}
	if pp.pending == nil {
		pp.pending = map[string][]*failedPing{}
	}
	pp.pending[host] = append(pp.pending[host], p)
	p.timer = time.AfterFunc(cmp.Or(pp.wait, pingFallbackWait), func() {
		pp.mu.Lock()
		pp.pending[host] = slices.DeleteFunc(pp.pending[host], func(q *failedPing) bool { return q == p })
		if len(pp.pending[host]) == 0 {
			delete(pp.pending, host)
		}
		pp.mu.Unlock()
		p.resolve(false)
	})
}

// DefaultPauseCap bounds the pause a Retry-After sets: a registry asking for a day
// (or an HTTP date far ahead) is asked again after this.
const DefaultPauseCap = 5 * time.Minute

// hostState is what all requests to one registry host share.
type hostState struct {
	gov *governor // nil: no bound on requests in flight
}

// pauseKey is what a Retry-After pauses: a registry host, or one repository of it
// (repo as the request path names it; "" for the whole host).
type pauseKey struct{ host, repo string }

// NewLimiter returns a Limiter. concurrency is the most requests in flight per
// registry host, where its adaptive governor starts (see governor.go; 0: no
// bound). A nil m records into a Metrics of its own.
func NewLimiter(limits []RateLimit, concurrency int, m *Metrics) *Limiter {
	if m == nil {
		m = NewMetrics()
	}
	l := &Limiter{concurrency: concurrency, m: m, maxWait: resolve.DefaultRetryPolicy.MaxWait, pauseCap: DefaultPauseCap,
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
func (l *Limiter) bucket(t target) *rate.Limiter {
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

// Wrap puts the limiter in front of next; give it to resolve.WithTransportWrapper.
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
	tg, ok := ctx.Value(targetKey{}).(target)
	if !ok || tg.host == "" {
		tg = target{host: normaliseHost(req.URL.Host)}
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
		if d, ok := resolve.RetryAfter(resp.Header.Get("Retry-After"), now); ok && d > 0 {
			t.l.pause(pk, now.Add(min(d, t.l.pauseCap)))
		}
	}
	return resp, err
}

// SetPauseCap sets the longest pause a Retry-After sets (default DefaultPauseCap;
// d <= 0 keeps it). Call it before the limiter is used.
func (l *Limiter) SetPauseCap(d time.Duration) {
	if d > 0 {
		l.pauseCap = d
	}
}

// pathRepository is the repository a registry request path names (/v2/REPO/tags/list,
// /v2/REPO/manifests/REF, /v2/REPO/blobs/DIGEST), "" for pings, token and other
// requests.
func pathRepository(p string) string {
	rest, ok := strings.CutPrefix(p, "/v2/")
	if !ok {
		return ""
	}
	if repo, ok := strings.CutSuffix(rest, "/tags/list"); ok {
		return repo
	}
	for _, m := range []string{"/manifests/", "/blobs/"} {
		if i := strings.LastIndex(rest, m); i > 0 {
			return rest[:i]
		}
	}
	return ""
}

// pause pauses k's requests until until (never shortening a pause), counts it and
// drops pauses that are over.
func (l *Limiter) pause(k pauseKey, until time.Time) {
	now := l.now()
	l.mu.Lock()
	for pk, u := range l.pauses {
		if !u.After(now) {
			delete(l.pauses, pk)
		}
	}
	if until.After(l.pauses[k]) {
		l.pauses[k] = until
	}
	l.pausedHosts[k.host] = true
	l.mu.Unlock()
	l.m.Pauses.WithLabelValues(k.host).Inc()
}

// pausedUntil is when the pauses that apply to k end: its host's and, when k
// names a repository, that repository's.
func (l *Limiter) pausedUntil(k pauseKey) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	until := l.pauses[pauseKey{host: k.host}]
	if k.repo != "" {
		if u := l.pauses[k]; u.After(until) {
			until = u
		}
	}
	return until
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

// pausedSeconds is, for every registry host ever paused, the seconds left of its
// longest pause (of the host or of one of its repositories), 0 when none.
func (l *Limiter) pausedSeconds() map[string]float64 {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]float64, len(l.pausedHosts))
	for h := range l.pausedHosts {
		out[h] = 0
	}
	for k, u := range l.pauses {
		if d := u.Sub(now).Seconds(); d > out[k.host] {
			out[k.host] = d
		}
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// waitPause waits while the request's registry host or repository is paused by a
// Retry-After. If the pause is longer than the maximum wait or than the request's
// deadline allows, it answers 429 itself.
func (l *Limiter) waitPause(req *http.Request, k pauseKey) (*http.Response, error) {
	ctx := req.Context()
	for {
		now := l.now()
		d := l.pausedUntil(k).Sub(now)
		if d <= 0 {
			return nil, nil
		}
		deadline, hasDeadline := ctx.Deadline()
		if d > l.maxWait || (hasDeadline && deadline.Sub(now) < d) {
			return throttled(req, d), nil
		}
		if err := l.sleep(ctx, d); err != nil {
			return nil, err
		}
	}
}

// throttled is the 429 the limiter answers for a paused registry.
func throttled(req *http.Request, d time.Duration) *http.Response {
	body := `{"errors":[{"code":"TOOMANYREQUESTS","message":"registry asked to wait (Retry-After); request not sent"}]}`
	secs := int((d + time.Second - 1) / time.Second)
	return &http.Response{
		Status:     "429 Too Many Requests",
		StatusCode: http.StatusTooManyRequests,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Retry-After":  {strconv.Itoa(secs)},
		},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
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
