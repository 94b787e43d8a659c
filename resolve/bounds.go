package resolve

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Bounds on what a registry may make the client read and wait for.
const (
	// DefaultMaxTagPages caps the pages of one tag list.
	DefaultMaxTagPages = 1000
	// DefaultMaxTags caps the tags of one tag list, all pages together.
	DefaultMaxTags = 500_000
	// DefaultMaxTagPageBytes caps the bytes read of one tag list page, counted
	// after decompression.
	DefaultMaxTagPageBytes int64 = 4 << 20
	// DefaultResponseHeaderTimeout bounds the wait for a response's header.
	DefaultResponseHeaderTimeout = 30 * time.Second
	// DefaultRequestTimeout bounds one request, its body read included.
	DefaultRequestTimeout = 60 * time.Second
)

// WithTagListLimits caps tag listing: pages per list, tags per list and bytes read
// per page after decompression (a gzip-encoded page counts as it expands). A list
// over a cap fails with a *TagListLimitError; no tag is chosen from the pages read.
// A value <= 0 keeps the default (DefaultMaxTagPages, DefaultMaxTags,
// DefaultMaxTagPageBytes).
func WithTagListLimits(pages, tags int, pageBytes int64) RemoteOption {
	return func(o *remoteOptions) {
		if pages > 0 {
			o.maxPages = pages
		}
		if tags > 0 {
			o.maxTags = tags
		}
		if pageBytes > 0 {
			o.maxPageBytes = pageBytes
		}
	}
}

// WithRequestTimeouts bounds every registry request (token, ping and retried
// attempts included): header is the wait for the response header, overall the
// whole request with its body read. A value <= 0 keeps the default
// (DefaultResponseHeaderTimeout, DefaultRequestTimeout). Retries multiply the
// bound by the retry policy's attempts (plus its waits); a request cut off by a
// timeout is not retried.
func WithRequestTimeouts(header, overall time.Duration) RemoteOption {
	return func(o *remoteOptions) {
		if header > 0 {
			o.headerTimeout = header
		}
		if overall > 0 {
			o.requestTimeout = overall
		}
	}
}

// TagListLimitError is a tag list the client stopped reading: over a cap, or a
// Link back to a page already read.
type TagListLimitError struct {
	Registry   string // the registry as written
	Repository string // the repository path as written
	// Limit is what was hit: "pages", "tags", "bytes per page" or "link loop".
	Limit string
	Max   int64  // the cap; 0 for a link loop
	Link  string // the repeated link, for a link loop
}

func (e *TagListLimitError) Error() string {
	where := fmt.Sprintf("registry %s, repository %s", e.Registry, e.Repository)
	switch e.Limit {
	case "link loop":
		return fmt.Sprintf("%s: tag list links back to a page already read (%s); not following it, no tag chosen", where, quoteTrunc(e.Link, 120))
	case "bytes per page":
		return fmt.Sprintf("%s: a tag list page is over the cap of %d bytes (after decompression; setting tagListMaxPageSize); no tag chosen", where, e.Max)
	}
	setting := map[string]string{"pages": "tagListMaxPages", "tags": "tagListMaxTags"}[e.Limit]
	if setting != "" {
		return fmt.Sprintf("%s: tag list is over the cap of %d %s (setting %s); no tag chosen", where, e.Max, e.Limit, setting)
	}
	return fmt.Sprintf("%s: tag list is over the cap of %d %s; no tag chosen", where, e.Max, e.Limit)
}

// DigestMismatchError is a registry whose Docker-Content-Digest header for a tag
// is not the digest of the manifest bytes it serves for it.
type DigestMismatchError struct {
	Image   string // repository:tag as written
	Claimed string // the header's digest
	Actual  string // sha256 of the bytes served, when read
	Err     error  // the failure to confirm, when no bytes were read
}

func (e *DigestMismatchError) Error() string {
	if e.Actual != "" {
		return fmt.Sprintf("%s: the registry's Docker-Content-Digest %s is not the digest of the manifest it serves (%s); not pinning an unverified digest",
			e.Image, e.Claimed, e.Actual)
	}
	return fmt.Sprintf("%s: the registry's Docker-Content-Digest %s is not confirmed by the manifest's bytes; not pinning an unverified digest: %v",
		e.Image, e.Claimed, e.Err)
}

func (e *DigestMismatchError) Unwrap() error { return e.Err }

// TimeoutError is a registry request cut off by a timeout of WithRequestTimeouts.
type TimeoutError struct {
	Host  string
	What  string // "response header" or "request"
	After time.Duration
}

func (e *TimeoutError) Error() string {
	if e.What == "request" {
		return fmt.Sprintf("registry %s: request not finished within %s", e.Host, e.After)
	}
	return fmt.Sprintf("registry %s: no response header within %s", e.Host, e.After)
}

// Timeout marks the error as a timeout (net.Error style).
func (e *TimeoutError) Timeout() bool { return true }

// pageBytesError is a tags/list body over the per-page cap; ListTags turns it
// into a *TagListLimitError naming the repository.
type pageBytesError struct{ max int64 }

func (e *pageBytesError) Error() string {
	return fmt.Sprintf("tag list page over %d bytes", e.max)
}

// boundedTransport puts the timeouts on every request and the per-page byte cap
// on tags/list bodies. It sits on top of the base transport, so it counts bytes
// as the client reads them: a gzip body the base transport decompresses is
// counted as it expands.
type boundedTransport struct {
	next         http.RoundTripper
	header       time.Duration
	overall      time.Duration
	maxPageBytes int64
	// maxReferrersBytes caps referrers lists (referrers.go); 0: none.
	maxReferrersBytes int64
}

// MaxManifestBytes caps a manifest or index read: the size the OCI distribution
// spec asks registries to accept (4 MiB). A registry that sends more is not
// believed (go-containerregistry alone would read 100 MiB).
const MaxManifestBytes = 4 << 20

// manifestBytesError is a manifest body over MaxManifestBytes.
type manifestBytesError struct{ max int64 }

func (e *manifestBytesError) Error() string {
	return fmt.Sprintf("manifest over %d bytes (the OCI distribution spec's 4 MiB); not read further", e.max)
}

// errManifestBytes is the error of every manifest body over MaxManifestBytes
// (one value: a manifest read need not allocate it).
var errManifestBytes error = &manifestBytesError{max: MaxManifestBytes}

func isManifestGet(req *http.Request) bool {
	return req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/manifests/")
}

func isTagList(req *http.Request) bool {
	return req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/tags/list")
}

// requestTimer is the one timer of a request's two bounds: until the response
// header comes it runs to the header's deadline (or the whole request's, when
// that is sooner), then to the whole request's. One timer instead of one per
// bound: a resolution sends thousands of requests.
type requestTimer struct {
	t       *time.Timer
	cancel  context.CancelCauseFunc
	host    string
	header  time.Duration // 0: none
	overall time.Duration // 0: none
	start   time.Time
	// body is set once the header came, the timer stopped before it fired:
	// from then on it is the whole request's.
	body atomic.Bool
	done sync.Once
}

// headerFirst reports whether the header's deadline comes before the whole
// request's.
func (rt *requestTimer) headerFirst() bool {
	return rt.header > 0 && (rt.overall <= 0 || rt.header < rt.overall)
}

// fire cuts the request off with the timeout whose deadline passed.
func (rt *requestTimer) fire() {
	if !rt.body.Load() && rt.headerFirst() {
		rt.cancel(&TimeoutError{Host: rt.host, What: "response header", After: rt.header})
		return
	}
	rt.cancel(&TimeoutError{Host: rt.host, What: "request", After: rt.overall})
}

// headerCame moves the timer on to the whole request's deadline. A timer that
// fired already has cut the request off.
func (rt *requestTimer) headerCame() {
	if rt.t == nil || !rt.t.Stop() {
		return
	}
	rt.body.Store(true)
	if rt.overall > 0 {
		rt.t.Reset(max(rt.overall-time.Since(rt.start), 0))
	}
}

// release ends the request's bounds, once: its timer and its context.
func (rt *requestTimer) release() {
	rt.done.Do(func() {
		if rt.t != nil {
			rt.t.Stop()
		}
		rt.cancel(nil)
	})
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	// The timer and the body of one request in one allocation.
	call := &struct {
		timer requestTimer
		body  boundedBody
	}{timer: requestTimer{cancel: cancel, host: req.URL.Host, header: max(t.header, 0), overall: max(t.overall, 0)}}
	rt := &call.timer
	if rt.header > 0 || rt.overall > 0 {
		first := rt.overall
		if rt.headerFirst() {
			first = rt.header
		}
		rt.start = time.Now()
		rt.t = time.AfterFunc(first, rt.fire)
	}
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	rt.headerCame()
	if err != nil {
		err = t.cause(req, ctx, err)
		rt.release()
		return nil, err
	}
	b := &call.body
	*b = boundedBody{rc: resp.Body, ctx: ctx, parent: req.Context(), bounds: rt}
	if t.maxPageBytes > 0 && isTagList(req) {
		b.limit, b.limitErr = t.maxPageBytes, &pageBytesError{max: t.maxPageBytes}
	}
	if isManifestGet(req) {
		b.limit, b.limitErr = MaxManifestBytes, errManifestBytes
	}
	if t.maxReferrersBytes > 0 && isReferrers(req) {
		b.limit, b.limitErr = t.maxReferrersBytes, &referrersBytesError{max: t.maxReferrersBytes}
	}
	if resp.StatusCode >= 400 {
		// An error body only feeds a message (go-containerregistry reads it whole):
		// what follows the first maxErrorBody bytes is not read.
		b.truncate = maxErrorBody
	}
	resp.Body = b
	return resp, nil
}

// cause replaces err by the timeout that cut the request off, if one did (and
// not the caller's own context).
func (t *boundedTransport) cause(req *http.Request, ctx context.Context, err error) error {
	if req.Context().Err() != nil {
		return err
	}
	var te *TimeoutError
	if c := context.Cause(ctx); c != nil && errors.As(c, &te) {
		return te
	}
	return err
}

// boundedBody ends the request's timers when closed, reports a timeout as such,
// and with a limit reads at most limit+1 bytes before failing.
type boundedBody struct {
	rc     io.ReadCloser
	ctx    context.Context
	parent context.Context
	bounds *requestTimer
	limit  int64 // 0: none
	// limitErr is the error past limit.
	limitErr error
	read     int64
	// truncate, when > 0, ends the body (io.EOF) after that many bytes.
	truncate int64
}

// maxErrorBody is how much of an error answer's body is read.
const maxErrorBody = 64 << 10

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.truncate > 0 {
		if b.read >= b.truncate {
			return 0, io.EOF
		}
		if rest := b.truncate - b.read; int64(len(p)) > rest {
			p = p[:rest]
		}
	}
	if b.limit > 0 {
		if b.read > b.limit {
			return 0, b.limitErr
		}
		if rest := b.limit + 1 - b.read; int64(len(p)) > rest {
			p = p[:rest]
		}
	}
	n, err := b.rc.Read(p)
	b.read += int64(n)
	if b.limit > 0 && b.read > b.limit {
		return n, b.limitErr
	}
	if err != nil && err != io.EOF && b.parent.Err() == nil {
		var te *TimeoutError
		if c := context.Cause(b.ctx); c != nil && errors.As(c, &te) {
			err = te
		}
	}
	return n, err
}

func (b *boundedBody) Close() error {
	err := b.rc.Close()
	b.bounds.release()
	return err
}

// ociTagOK reports whether s matches the OCI tag grammar
// [A-Za-z0-9_][A-Za-z0-9._-]{0,127}.
func ociTagOK(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_':
		case (c == '.' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// quoteTrunc quotes s for a message, cut to at most n bytes (on a rune boundary).
func quoteTrunc(s string, n int) string {
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:cut], len(s))
}

// pageKey is a tag list page's URL in a canonical form (query keys sorted), to
// see a Link back to a page already read.
func pageKey(u *url.URL) string {
	c := *u
	c.RawQuery = c.Query().Encode()
	c.Fragment = ""
	return c.String()
}

// digestOf is the digest of b with algorithm ("sha256" or "sha512"), "" for
// another algorithm.
func digestOf(b []byte, algorithm string) string {
	switch algorithm {
	case "sha256":
		return fmt.Sprintf("sha256:%x", sha256.Sum256(b))
	case "sha512":
		return fmt.Sprintf("sha512:%x", sha512.Sum512(b))
	}
	return ""
}

// isDigestMismatch reports whether err is go-containerregistry's refusal of a
// manifest fetched by digest whose bytes hash to another digest.
func isDigestMismatch(err error) bool {
	return err != nil && strings.Contains(err.Error(), "does not match requested digest")
}
