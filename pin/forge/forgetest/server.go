// Package forgetest runs GitHub and GitLab servers for tests: httptest
// servers that answer the REST calls the pin writer's forges make as the
// forges' REST documentation shows (answers rendered from recorded samples
// in testdata/, with their sources), holding state (repositories, pull
// requests, labels, users), paginating with Link headers, checking the
// token, counting requests per operation, and refusing on demand (rate
// limits, validation errors, any status).
package forgetest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// core is what both servers share: the HTTP server, request counts, the
// refusals queued, and pagination.
type core struct {
	srv *httptest.Server
	mux *http.ServeMux

	mu     sync.Mutex
	counts map[string]int
	total  int
	fails  []queued
	// per-page defaults and limits (set with SetPageSize).
	defaultPerPage, maxPerPage int
}

type queued struct {
	op string // "" any
	f  Failure
}

func newCore(t testing.TB, defaultPerPage, maxPerPage int) *core {
	c := &core{mux: http.NewServeMux(), counts: map[string]int{}, defaultPerPage: defaultPerPage, maxPerPage: maxPerPage}
	c.srv = httptest.NewServer(c.mux)
	t.Cleanup(c.srv.Close)
	return c
}

// handle routes pattern (and the same under each prefix) to h, counted as
// op pattern, after any refusal queued and the auth check.
func (c *core) handle(pattern string, auth func(*http.Request) bool, unauthorized Failure, h http.HandlerFunc, prefixes ...string) {
	wrapped := func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.counts[pattern]++
		c.total++
		f, failed := c.nextFailure(pattern)
		c.mu.Unlock()
		switch {
		case failed:
			f.write(w)
		case auth != nil && !auth(r):
			unauthorized.write(w)
		default:
			h(w, r)
		}
	}
	c.mux.HandleFunc(pattern, wrapped)
	for _, p := range prefixes {
		method, path, _ := strings.Cut(pattern, " ")
		c.mux.HandleFunc(method+" "+p+path, wrapped)
	}
}

// nextFailure pops the first refusal queued for op (or any op); c.mu held.
func (c *core) nextFailure(op string) (Failure, bool) {
	for i, q := range c.fails {
		if q.op == "" || q.op == op {
			c.fails = append(c.fails[:i:i], c.fails[i+1:]...)
			return q.f, true
		}
	}
	return Failure{}, false
}

// FailNext makes the next n requests of op (a route pattern such as
// GitHubCreatePull; "" any) answer f instead.
func (c *core) FailNext(op string, n int, f Failure) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for range n {
		c.fails = append(c.fails, queued{op: op, f: f})
	}
}

// Count is how many requests op (a route pattern) received.
func (c *core) Count(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[op]
}

// Total is how many requests the server received (of every route).
func (c *core) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// ResetCounts sets every request count to zero.
func (c *core) ResetCounts() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts, c.total = map[string]int{}, 0
}

// SetPageSize sets the page size used when a request names none, and the
// largest one a request may ask for.
func (c *core) SetPageSize(defaultPerPage, maxPerPage int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.defaultPerPage, c.maxPerPage = defaultPerPage, maxPerPage
}

// page is one page of a listing.
type page struct {
	number, perPage, total, pages int
	from, to                      int // items [from, to)
}

// paginate reads page and per_page of r for n items.
func (c *core) paginate(r *http.Request, n int) page {
	c.mu.Lock()
	def, maxPer := c.defaultPerPage, c.maxPerPage
	c.mu.Unlock()
	q := r.URL.Query()
	per, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || per <= 0 {
		per = def
	}
	per = min(per, maxPer)
	number, err := strconv.Atoi(q.Get("page"))
	if err != nil || number <= 0 {
		number = 1
	}
	p := page{number: number, perPage: per, total: n, pages: max((n+per-1)/per, 1)}
	p.from = min((number-1)*per, n)
	p.to = min(p.from+per, n)
	return p
}

// link is the Link header of p: first, prev, next and last pages, as
// URLs like r's.
func (p page) link(r *http.Request) string {
	rel := func(n int, name string) string {
		u := url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path}
		q := r.URL.Query()
		q.Set("page", strconv.Itoa(n))
		q.Set("per_page", strconv.Itoa(p.perPage))
		u.RawQuery = q.Encode()
		return fmt.Sprintf("<%s>; rel=%q", u.String(), name)
	}
	var parts []string
	if p.number > 1 {
		parts = append(parts, rel(p.number-1, "prev"), rel(1, "first"))
	}
	if p.number < p.pages {
		parts = append(parts, rel(p.number+1, "next"), rel(p.pages, "last"))
	}
	return strings.Join(parts, ", ")
}

// secret is a random token of prefix.
func secret(prefix string) string {
	b := make([]byte, 16)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
