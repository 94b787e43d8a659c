// Package registrytest serves a real OCI/Docker registry over HTTP for tests
// and for the demo.
//
// The registry itself is go-containerregistry's in-memory registry
// (pkg/registry). In front of it sits a middleware that behaves like the
// registries the resolver meets in the field:
//
//   - tags/list pagination with RFC 5988 Link headers, byte for byte as the
//     distribution registry writes them (WithPageSize), or a registry that
//     rejects the `n` parameter (WithRejectPageSize);
//   - Basic or Bearer (token server) authentication (WithBasicAuth,
//     WithBearerAuth);
//   - latency (WithLatency) and injected faults such as 429 with Retry-After
//     or 503 (Inject), and hostile answers: a request that hangs, a body that
//     never comes, a huge or gzip-bomb tags page (GzipBomb), a Link back to a
//     page already served, a lying Docker-Content-Digest (Fault.Body, Header,
//     PassThrough, Hang, HangBody);
//   - the OCI 1.1 referrers API (GET /v2/<repo>/referrers/<digest>), or a
//     registry without it that answers 404 (WithoutReferrers);
//   - request counters by kind (Count, Counts, Total, Requests), so tests can
//     assert how many registry calls a resolution cost.
//
// Seeding (Push, PushIndex, Tag, SeedScenario) writes straight to the inner
// registry handler, bypassing the middleware, authentication, faults and
// counters. SeedRemote pushes a Scenario to any registry over HTTP.
package registrytest

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// Kind classifies a registry request.
type Kind string

// Request kinds counted by the Server.
const (
	Ping         Kind = "ping"          // GET /v2/
	Token        Kind = "token"         // GET /token (the bearer token endpoint)
	Tags         Kind = "tags"          // GET /v2/<repo>/tags/list
	ManifestHead Kind = "manifest-head" // HEAD /v2/<repo>/manifests/<ref>
	ManifestGet  Kind = "manifest-get"  // GET /v2/<repo>/manifests/<ref>
	BlobGet      Kind = "blob-get"      // GET /v2/<repo>/blobs/<digest>
	Referrers    Kind = "referrers"     // GET /v2/<repo>/referrers/<digest> (OCI 1.1)
	Other        Kind = "other"         // everything else (blob HEAD, uploads, PUT, catalog, ...)
)

// Kinds lists every Kind in a stable order.
var Kinds = []Kind{Ping, Token, Tags, ManifestHead, ManifestGet, BlobGet, Referrers, Other}

// Request records one HTTP request that went through the middleware.
// The value of the Authorization header is never stored.
type Request struct {
	Method   string
	Path     string
	RawQuery string
	Kind     Kind
	Repo     string // repository named by the path, "" for ping/token/other
	// Status is the status code answered; 0 while the request is in flight or
	// when the client went away before an answer was written.
	Status        int
	At            time.Time
	Authorization bool // whether an Authorization header was present
	Fault         bool // whether an injected Fault answered the request
	// BytesWritten is how many body bytes were written (before any transport
	// compression; a Fault's Body as given, so a gzip bomb's compressed size).
	BytesWritten int64
}

type authMode int

const (
	authNone authMode = iota
	authBasic
	authBearer
)

type config struct {
	pageSize       int
	rejectPageSize bool
	auth           authMode
	user, pass     string
	latency        time.Duration
	tls            bool
	noReferrers    bool
}

// Option configures a Server.
type Option func(*config)

// WithPageSize makes tags/list return at most n tags per page (a client's
// smaller `n` is honoured), with a `Link: </v2/<repo>/tags/list?last=TAG&n=N>;
// rel="next"` header when more tags follow, as the distribution registry does.
func WithPageSize(n int) Option { return func(c *config) { c.pageSize = n } }

// WithRejectPageSize makes any tags/list request that carries `n` fail with
// 400 PAGINATION_NUMBER_INVALID. Without `n` the server page size applies and
// the Link header carries only `last`.
func WithRejectPageSize() Option { return func(c *config) { c.rejectPageSize = true } }

// WithBasicAuth requires HTTP Basic credentials on every request; without
// them the answer is 401 with `WWW-Authenticate: Basic realm="registrytest"`.
func WithBasicAuth(user, pass string) Option {
	return func(c *config) { c.auth, c.user, c.pass = authBasic, user, pass }
}

// WithBearerAuth puts the registry behind a token server at <URL>/token:
// registry requests need `Authorization: Bearer <token>`, else 401 with
// `WWW-Authenticate: Bearer realm="<URL>/token",service="registrytest",scope=...`.
// GET /token requires these Basic credentials (anonymous gets 401).
func WithBearerAuth(user, pass string) Option {
	return func(c *config) { c.auth, c.user, c.pass = authBearer, user, pass }
}

// WithLatency delays every request by d (see also SetLatency).
func WithLatency(d time.Duration) Option { return func(c *config) { c.latency = d } }

// WithTLS serves HTTPS with a certificate for 127.0.0.1, ::1 and localhost
// signed by a freshly generated CA (Server.CACertPEM, Server.Client).
//
// Note: go-containerregistry always speaks plain HTTP to loopback registries
// (name.Registry.Scheme), so ggcr's remote package cannot use a TLS Server;
// this is for clients that build their own URLs and trust configuration.
func WithTLS() Option { return func(c *config) { c.tls = true } }

// WithoutReferrers makes a registry without the OCI 1.1 referrers API: GET
// /v2/<repo>/referrers/<digest> answers 404, as registries before OCI 1.1 do, and
// a client that pushes a manifest with a subject maintains the referrers tag
// schema (sha256-<hex>) itself. By default the API is served: the inner
// registry's referrers list, each entry's artifactType taken from its manifest
// (artifactType, else the config's media type) as the distribution spec says,
// sorted by digest, and the artifactType query filter applied.
func WithoutReferrers() Option { return func(c *config) { c.noReferrers = true } }

// Server is a registry served over HTTP on 127.0.0.1.
type Server struct {
	URL       string // http://127.0.0.1:port (https:// WithTLS)
	Host      string // 127.0.0.1:port
	CACertPEM []byte // the test CA's certificate, WithTLS only

	cfg     config
	latency atomic.Int64
	inner   http.Handler
	seed    http.RoundTripper
	srv     *httptest.Server
	once    sync.Once

	mu       sync.Mutex
	faults   []*faultState
	counts   map[Kind]int
	total    int
	requests []*Request
	tokens   map[string]time.Time
	closing  chan struct{} // closed by Close: releases hanging handlers
	onReq    func(r Request, total int)

	// writes counts the inner registry's writes (twice each: as it begins and
	// ends); tagLists holds each repository's sorted tags as of a count.
	writes   atomic.Uint64
	tagsMu   sync.Mutex
	tagLists map[string]sortedTags
	pushed   map[string]time.Time // "repo:tag" -> push time (describe.go)
	// pushVersion counts push-time changes; described keeps Describe's answers.
	pushVersion atomic.Uint64
	described   map[string]describedRepo
}

// New starts a Server that is closed when the test ends.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := NewServer(opts...)
	if err != nil {
		t.Fatalf("registrytest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// NewServer starts a Server; the caller must Close it.
func NewServer(opts ...Option) (*Server, error) {
	s := &Server{
		counts:  map[Kind]int{},
		tokens:  map[string]time.Time{},
		closing: make(chan struct{}),
	}
	for _, o := range opts {
		o(&s.cfg)
	}
	if s.cfg.pageSize < 0 {
		return nil, fmt.Errorf("page size %d: must be >= 0", s.cfg.pageSize)
	}
	s.latency.Store(int64(s.cfg.latency))
	s.inner = writeCounter{h: registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(!s.cfg.noReferrers)), n: &s.writes}
	s.seed = handlerTransport{h: s.inner}

	s.srv = httptest.NewUnstartedServer(s)
	if s.cfg.tls {
		if err := s.startTLS(); err != nil {
			s.srv.Close()
			return nil, err
		}
	} else {
		s.srv.Start()
	}
	s.URL = s.srv.URL
	s.Host = strings.TrimPrefix(strings.TrimPrefix(s.srv.URL, "http://"), "https://")
	return s, nil
}

// Close shuts the server down. It is safe to call more than once.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.closing)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
}

// Ref returns the repository reference as clients spell it: "127.0.0.1:port/repo".
func (s *Server) Ref(repo string) string { return s.Host + "/" + repo }

// Client returns an *http.Client that trusts the server (its CA WithTLS).
func (s *Server) Client() *http.Client { return s.srv.Client() }

// SetLatency changes the latency added to every request from now on.
func (s *Server) SetLatency(d time.Duration) { s.latency.Store(int64(d)) }

// ---- counters ----

// Count returns how many requests of kind k came over HTTP.
func (s *Server) Count(k Kind) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[k]
}

// Counts returns a copy of the per-kind counters (kinds never seen are absent).
func (s *Server) Counts() map[Kind]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[Kind]int, len(s.counts))
	for k, v := range s.counts {
		m[k] = v
	}
	return m
}

// Total returns how many HTTP requests came in, of every kind.
func (s *Server) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Requests returns a copy of the request log, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		out[i] = *r
	}
	return out
}

// OnRequest sets f to be called for every request that comes in, in its handler,
// once it is counted and before anything else (latency, faults, the answer), with
// a copy of its log entry and the Total so far; nil removes it. A request is not
// answered before f returns, so a test acts at a chosen point of a run (e.g.
// stops a dependency at the 20th request, or holds a tag list until the others
// wait for it) rather than polling the counters. f may be called concurrently.
func (s *Server) OnRequest(f func(r Request, total int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onReq = f
}

// ResetCounts clears the counters and the request log.
func (s *Server) ResetCounts() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts = map[Kind]int{}
	s.total = 0
	s.requests = nil
}

// ---- the middleware ----

// classify returns the kind of a request and the repository it names.
func classify(r *http.Request) (Kind, string) {
	p := r.URL.Path
	if p == "/v2/" || p == "/v2" {
		return Ping, ""
	}
	if p == "/token" {
		return Token, ""
	}
	if !strings.HasPrefix(p, "/v2/") {
		return Other, ""
	}
	elems := strings.Split(strings.TrimPrefix(p, "/v2/"), "/")
	n := len(elems)
	if n >= 3 && elems[n-2] == "tags" && elems[n-1] == "list" {
		return Tags, strings.Join(elems[:n-2], "/")
	}
	if n >= 3 && elems[n-2] == "manifests" {
		repo := strings.Join(elems[:n-2], "/")
		switch r.Method {
		case http.MethodHead:
			return ManifestHead, repo
		case http.MethodGet:
			return ManifestGet, repo
		}
		return Other, repo
	}
	if n >= 3 && elems[n-2] == "referrers" && r.Method == http.MethodGet {
		return Referrers, strings.Join(elems[:n-2], "/")
	}
	if n >= 3 && elems[n-2] == "blobs" && elems[n-1] != "uploads" {
		repo := strings.Join(elems[:n-2], "/")
		if r.Method == http.MethodGet {
			return BlobGet, repo
		}
		return Other, repo
	}
	return Other, ""
}

// statusWriter records the status in the request log before the answer
// reaches the client, so a client that has read its answer always finds its
// request counted and its status set.
type statusWriter struct {
	http.ResponseWriter
	s     *Server
	rec   *Request
	wrote bool
	// override replaces headers of the answer (a PassThrough fault's Header).
	override http.Header
	// hang, when set, blocks after the header until it is closed (HangBody).
	hang <-chan struct{}
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		for k, v := range w.override {
			w.ResponseWriter.Header()[k] = v
		}
		w.wrote = true
		w.s.mu.Lock()
		w.rec.Status = code
		w.s.mu.Unlock()
	}
	w.ResponseWriter.WriteHeader(code)
	if w.hang != nil {
		if f, ok := w.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		<-w.hang
	}
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	w.s.mu.Lock()
	w.rec.BytesWritten += int64(len(b))
	w.s.mu.Unlock()
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ServeHTTP implements the middleware: count, delay, fault, authenticate,
// paginate, then hand over to the in-memory registry.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind, repo := classify(r)
	rec := &Request{
		Method:        r.Method,
		Path:          r.URL.Path,
		RawQuery:      r.URL.RawQuery,
		Kind:          kind,
		Repo:          repo,
		At:            time.Now(),
		Authorization: r.Header.Get("Authorization") != "",
	}
	s.mu.Lock()
	s.counts[kind]++
	s.total++
	s.requests = append(s.requests, rec)
	onReq, entry, total := s.onReq, *rec, s.total
	s.mu.Unlock()
	if onReq != nil {
		onReq(entry, total)
	}
	sw := &statusWriter{ResponseWriter: w, s: s, rec: rec}

	if d := time.Duration(s.latency.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}

	if f, ok := s.matchFault(kind, r); ok {
		s.mu.Lock()
		rec.Fault = true
		s.mu.Unlock()
		if !f.PassThrough {
			s.writeFault(sw, r, kind, f)
			return
		}
		sw.override = f.Header
		if f.HangBody {
			sw.hang = r.Context().Done()
		}
	}

	if kind == Token && s.cfg.auth == authBearer {
		s.serveToken(sw, r)
		return
	}
	if !s.authorized(r) {
		s.challenge(sw, r, repo)
		return
	}
	if kind == Tags && r.Method == http.MethodGet {
		s.serveTags(sw, r, repo)
		return
	}
	if kind == Referrers {
		s.serveReferrers(sw, r)
		return
	}
	s.inner.ServeHTTP(sw, r)
}

// ---- in-process seeding transport ----

// handlerTransport answers HTTP requests by calling a handler in process.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if r.Body == nil {
		r.Body = http.NoBody
	}
	r.RequestURI = r.URL.RequestURI()
	r.RemoteAddr = "127.0.0.1:0"
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	if req.Body != nil {
		_ = req.Body.Close()
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// innerDo sends one request straight to the inner registry.
func (s *Server) innerDo(method, path string, header http.Header, body []byte) (*httptest.ResponseRecorder, error) {
	req, err := http.NewRequest(method, "http://"+s.Host+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if header != nil {
		req.Header = header
	}
	req.RequestURI = req.URL.RequestURI()
	rec := httptest.NewRecorder()
	s.inner.ServeHTTP(rec, req)
	return rec, nil
}
