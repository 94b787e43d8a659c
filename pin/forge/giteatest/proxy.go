package giteatest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Request is one request a Proxy passed to Gitea. The Authorization header's
// value is never stored.
type Request struct {
	Method string
	Path   string // e.g. /api/v1/repos/o/r/pulls
	Query  string // the raw query, e.g. limit=2&page=1&state=open
	Status int    // Gitea's answer
}

// String is "METHOD PATH?QUERY -> STATUS".
func (r Request) String() string {
	s := r.Method + " " + r.Path
	if r.Query != "" {
		s += "?" + r.Query
	}
	return fmt.Sprintf("%s -> %d", s, r.Status)
}

// Proxy is a reverse proxy in front of a Gitea that records each request it
// passes, so that a test can count the API requests its client made. Gitea's
// own callbacks (git hooks) do not pass through it.
type Proxy struct {
	// URL is the proxy's address, to give the client under test instead of
	// Gitea's.
	URL string

	mu       sync.Mutex
	requests []Request
}

// Proxy starts a recording proxy in front of g for the test, closed when it
// ends.
func (g *Gitea) Proxy(t testing.TB) *Proxy {
	t.Helper()
	target, err := url.Parse(g.URL)
	if err != nil {
		t.Fatalf("giteatest: %v", err)
	}
	p := &Proxy{}
	// Recorded before the answer is passed on, so that a client that has its
	// answer finds its request recorded.
	record := func(r *http.Request, status int) {
		p.mu.Lock()
		p.requests = append(p.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Status: status})
		p.mu.Unlock()
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		ModifyResponse: func(resp *http.Response) error {
			record(resp.Request, resp.StatusCode)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			record(r, http.StatusBadGateway)
			http.Error(w, "giteatest proxy: "+err.Error(), http.StatusBadGateway)
		},
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Requests returns the requests passed so far, in order.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.requests...)
}

// Reset forgets the requests recorded so far.
func (p *Proxy) Reset() {
	p.mu.Lock()
	p.requests = nil
	p.mu.Unlock()
}

// Summary lists the requests one per line, for failure messages.
func (p *Proxy) Summary() string {
	var b strings.Builder
	for _, r := range p.Requests() {
		b.WriteString(r.String())
		b.WriteByte('\n')
	}
	return b.String()
}
