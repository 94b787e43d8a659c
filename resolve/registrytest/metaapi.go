package registrytest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Vendor metadata API servers (Docker Hub's tags API, Harbor's artifacts API,
// Quay's tags API, ...) answer from a Server's contents (Describe), so that the
// API and the OCI protocol see the same tags, digests and push times. They share
// the scaffolding below: an httptest server per API, request counters by kind,
// injected faults, tokens and pagination helpers. Each vendor's file adds its
// routes and its JSON shapes.

// APIKind classifies a request to an APIServer.
type APIKind string

// Request kinds counted by an APIServer.
const (
	APILogin    APIKind = "login"    // obtaining a token (Docker Hub's login)
	APIPage     APIKind = "page"     // one page of a repository's tags or artifacts
	APIArtifact APIKind = "artifact" // one artifact by digest (Harbor's getArtifact)
	APIOther    APIKind = "other"    // everything else (answered 404)
)

// APIRequest records one request to an APIServer. The value of the
// Authorization header is never stored.
type APIRequest struct {
	Method, Path, RawQuery string
	Kind                   APIKind
	Repo                   string // the repository named, "" for none
	Status                 int    // the status answered
	Authorization          bool   // whether an Authorization header was present
	Fault                  bool   // whether an injected APIFault matched
}

// APIOption configures an APIServer.
type APIOption func(*apiConfig)

type apiConfig struct {
	maxPageSize int
	auth        bool
	user, pass  string
	tokenTTL    time.Duration
}

// WithAPIMaxPageSize sets the largest page the API serves (default: the
// vendor's, 100); a client asking for more gets this many.
func WithAPIMaxPageSize(n int) APIOption { return func(c *apiConfig) { c.maxPageSize = n } }

// WithAPIAuth requires authentication as the vendor does it: Docker Hub's login
// with user and secret (issuing a token), Harbor's Basic user:secret, Quay's
// Bearer secret (an OAuth token; user is not checked). Without it the API is
// anonymous and ignores credentials.
func WithAPIAuth(user, secret string) APIOption {
	return func(c *apiConfig) { c.auth, c.user, c.pass = true, user, secret }
}

// WithAPITokenTTL sets how long an issued token is valid (default 1 hour).
func WithAPITokenTTL(d time.Duration) APIOption { return func(c *apiConfig) { c.tokenTTL = d } }

// apiVendor is what a vendor's file gives the scaffolding.
type apiVendor struct {
	name         string
	defaultLimit int // the page size when the client asks for none
	// route classifies a request and names its repository.
	route func(r *http.Request) (APIKind, string)
	// serve answers a request that passed faults; f is the matched fault
	// (NextURL, NextLoop), else nil.
	serve func(a *APIServer, w http.ResponseWriter, r *http.Request, repo string, f *APIFault)
	// errorBody is the vendor's error JSON.
	errorBody func(status int, msg string) any
}

// APIServer is a vendor metadata API served over HTTP on 127.0.0.1, answering
// from Registry's contents.
type APIServer struct {
	URL      string // http://127.0.0.1:port
	Host     string // 127.0.0.1:port
	Registry *Server

	v   apiVendor
	cfg apiConfig
	srv *httptest.Server

	mu       sync.Mutex
	counts   map[APIKind]int
	total    int
	requests []*APIRequest
	faults   []*apiFaultState
	tokens   map[string]time.Time // token -> expiry

	// byDigest is a vendor's cache of what it derives from a manifest
	// (content addressed: never stale), keyed by vendor-chosen strings.
	byDigest sync.Map
}

// newAPIServer starts a vendor's API server, closed when the test ends.
func newAPIServer(t testing.TB, s *Server, v apiVendor, opts []APIOption) *APIServer {
	t.Helper()
	a := &APIServer{Registry: s, v: v, counts: map[APIKind]int{}, tokens: map[string]time.Time{},
		cfg: apiConfig{maxPageSize: 100, tokenTTL: time.Hour}}
	for _, o := range opts {
		o(&a.cfg)
	}
	a.srv = httptest.NewServer(a)
	a.URL = a.srv.URL
	a.Host = strings.TrimPrefix(a.srv.URL, "http://")
	t.Cleanup(a.srv.Close)
	return a
}

// Close shuts the server down (also done when the test ends).
func (a *APIServer) Close() { a.srv.Close() }

// ServeHTTP counts the request, applies faults, then the vendor's handler.
func (a *APIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind, repo := a.v.route(r)
	rec := &APIRequest{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Kind: kind, Repo: repo,
		Authorization: r.Header.Get("Authorization") != ""}
	a.mu.Lock()
	a.counts[kind]++
	a.total++
	a.requests = append(a.requests, rec)
	a.mu.Unlock()
	sw := &apiStatusWriter{ResponseWriter: w, a: a, rec: rec}
	f := a.matchFault(kind, repo)
	if f != nil {
		a.mu.Lock()
		rec.Fault = true
		a.mu.Unlock()
		sw.override = f.Header
		if f.RetryAfter != "" {
			sw.Header().Set("Retry-After", f.RetryAfter)
		}
		if f.Body != nil {
			status := f.Status
			if status == 0 {
				status = http.StatusOK
			}
			sw.Header().Set("Content-Type", "application/json")
			sw.WriteHeader(status)
			_, _ = sw.Write(f.Body)
			return
		}
		if f.Status != 0 {
			a.Error(sw, f.Status, http.StatusText(f.Status))
			return
		}
	}
	if kind == APIOther {
		a.Error(sw, http.StatusNotFound, "not found")
		return
	}
	a.v.serve(a, sw, r, repo, f)
}

// ---- counters ----

// Count returns how many requests of kind k came in.
func (a *APIServer) Count(k APIKind) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.counts[k]
}

// Counts returns a copy of the per-kind counters (kinds never seen are absent).
func (a *APIServer) Counts() map[APIKind]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := make(map[APIKind]int, len(a.counts))
	for k, v := range a.counts {
		m[k] = v
	}
	return m
}

// Total returns how many requests came in, of every kind.
func (a *APIServer) Total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total
}

// Requests returns a copy of the request log, oldest first.
func (a *APIServer) Requests() []APIRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]APIRequest, len(a.requests))
	for i, r := range a.requests {
		out[i] = *r
	}
	return out
}

// ResetCounts clears the counters and the request log.
func (a *APIServer) ResetCounts() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.counts = map[APIKind]int{}
	a.total = 0
	a.requests = nil
}

// ---- authentication ----

// IssueToken returns a new token, valid for the configured TTL.
func (a *APIServer) IssueToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	tok := a.v.name + "-" + hex.EncodeToString(b)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tokens[tok] = time.Now().Add(a.cfg.tokenTTL)
	return tok
}

// RevokeTokens invalidates every token issued so far.
func (a *APIServer) RevokeTokens() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tokens = map[string]time.Time{}
}

// bearerOK reports whether r carries a token issued and not expired.
func (a *APIServer) bearerOK(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	exp, ok := a.tokens[tok]
	return ok && time.Now().Before(exp)
}

// basicOK reports whether r carries the configured Basic credentials.
func (a *APIServer) basicOK(r *http.Request) bool {
	u, p, ok := r.BasicAuth()
	return ok && u == a.cfg.user && p == a.cfg.pass
}

// ---- answers ----

// Error writes the vendor's error answer.
func (a *APIServer) Error(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, a.v.errorBody(status, msg))
}

// writeJSON writes v as a JSON answer.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// describe returns repo's tags, or answers 404 as the vendor does.
func (a *APIServer) describe(w http.ResponseWriter, repo string) ([]TagDescription, bool) {
	tags, err := a.Registry.Describe(repo)
	if err != nil {
		a.Error(w, http.StatusNotFound, fmt.Sprintf("repository %s not found", repo))
		return nil, false
	}
	return tags, true
}

// pageSize is the page size the client asked for in the query parameter param,
// capped at the server's maximum; the vendor's default when absent.
func (a *APIServer) pageSize(r *http.Request, param string) int {
	n, err := strconv.Atoi(r.URL.Query().Get(param))
	if err != nil || n <= 0 {
		n = a.v.defaultLimit
	}
	return min(n, a.cfg.maxPageSize)
}

// pageNumber is the 1-based page number of the query parameter param.
func pageNumber(r *http.Request, param string) int {
	n, err := strconv.Atoi(r.URL.Query().Get(param))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// pageOf returns the 1-based page-th page of size items, and whether more
// follow.
func pageOf[T any](items []T, page, size int) ([]T, bool) {
	start := (page - 1) * size
	if start >= len(items) {
		return []T{}, false
	}
	end := min(start+size, len(items))
	return items[start:end], end < len(items)
}

// sortByPushed sorts tags newest push first (ties by tag name).
func sortByPushed(tags []TagDescription) {
	slices.SortStableFunc(tags, func(x, y TagDescription) int {
		if c := y.Pushed.Compare(x.Pushed); c != 0 {
			return c
		}
		return strings.Compare(x.Tag, y.Tag)
	})
}

// ---- shapes ----

// ShapeDiff compares the shape of a JSON answer with a vendor's sample: the
// same keys and the same JSON value types, recursively. Every element of an
// answer's array is compared with the sample array's element of its kind: the
// one whose keys are null (or absent) where the answer's are, then the closest
// (an empty sample array accepts any). A null in the sample accepts any value;
// a null in the answer matches a null, an array or an object (Go's nil slices
// and maps), never a string, number or boolean. Objects at freeMaps paths (e.g.
// "[].annotations") are maps with arbitrary keys: a key is compared only where
// the sample has it too. A path is the keys from the root joined by ".", "[]"
// for an array's elements. It returns one line per difference.
func ShapeDiff(sample, answer []byte, freeMaps ...string) ([]string, error) {
	var s, a any
	if err := json.Unmarshal(sample, &s); err != nil {
		return nil, fmt.Errorf("sample: %w", err)
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return nil, fmt.Errorf("answer: %w", err)
	}
	var diffs []string
	shapeDiff("", s, a, freeMaps, &diffs)
	return diffs, nil
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func shapeDiff(path string, s, a any, free []string, diffs *[]string) {
	ts, ta := jsonType(s), jsonType(a)
	switch {
	case ts == "null":
		return
	case ta == "null" && (ts == "array" || ts == "object"):
		return
	case ts != ta:
		*diffs = append(*diffs, fmt.Sprintf("%s: %s in the answer, %s in the sample", pathOrRoot(path), ta, ts))
		return
	}
	switch sv := s.(type) {
	case map[string]any:
		shapeObject(path, sv, a.(map[string]any), free, diffs)
	case []any:
		shapeArray(path, sv, a.([]any), free, diffs)
	}
}

func shapeObject(path string, s, a map[string]any, free []string, diffs *[]string) {
	if slices.Contains(free, path) {
		for _, k := range sortedKeys(a) {
			if sv, ok := s[k]; ok {
				shapeDiff(joinPath(path, k), sv, a[k], free, diffs)
			}
		}
		return
	}
	for _, k := range sortedKeys(s) {
		av, ok := a[k]
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: missing in the answer", joinPath(path, k)))
			continue
		}
		shapeDiff(joinPath(path, k), s[k], av, free, diffs)
	}
	for _, k := range sortedKeys(a) {
		if _, ok := s[k]; !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: not in the sample", joinPath(path, k)))
		}
	}
}

func shapeArray(path string, s, a []any, free []string, diffs *[]string) {
	if len(s) == 0 {
		return
	}
	for i, av := range a {
		// The sample element of the same kind: the most keys null (or absent)
		// in both or in neither, then the fewest differences.
		var best []string
		bestScore := -1
		for _, sv := range s {
			var d []string
			shapeDiff(path+"[]", sv, av, free, &d)
			score := nullAgreement(sv, av)
			if score > bestScore || (score == bestScore && len(d) < len(best)) {
				best, bestScore = d, score
			}
		}
		for _, d := range best {
			*diffs = append(*diffs, fmt.Sprintf("(element %d) %s", i, d))
		}
	}
}

// nullAgreement counts the keys of two objects that are null (or absent) in
// both or in neither; 0 for anything else.
func nullAgreement(s, a any) int {
	so, ok1 := s.(map[string]any)
	ao, ok2 := a.(map[string]any)
	if !ok1 || !ok2 {
		return 0
	}
	n := 0
	for k, sv := range so {
		if (sv == nil) == (ao[k] == nil) {
			n++
		}
	}
	for k, av := range ao {
		if _, ok := so[k]; !ok && av == nil {
			n++
		}
	}
	return n
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func pathOrRoot(p string) string {
	if p == "" {
		return "(root)"
	}
	return p
}
