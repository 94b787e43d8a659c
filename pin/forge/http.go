package forge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Operations, as Error.Op and Config.Observe name them.
const (
	OpList      = "list pull requests"
	OpCreate    = "create pull request"
	OpUpdate    = "update pull request"
	OpLabels    = "add labels"
	OpAssignees = "add assignees"
	OpReviewers = "request reviewers"
	OpAutoMerge = "enable auto-merge"
	OpUser      = "look up user"
	OpAppToken  = "mint app token"
)

// maxRefusalBytes bounds what is kept of a refusal's answer (its message).
const maxRefusalBytes = 64 << 10

// maxDetail bounds Error.Detail.
const maxDetail = 1024

// errTooLarge is an answer longer than MaxAnswerBytes.
var errTooLarge = fmt.Errorf("answer larger than %d bytes", MaxAnswerBytes)

// errRefused and errFailed are the causes of refusals no sentinel names: a
// status the forge should not answer (3xx, other 4xx), and its own failures (5xx).
var (
	errRefused = errors.New("the forge refused the request")
	errFailed  = errors.New("the forge failed to answer")
)

// credential returns the header that authenticates a request to the forge:
// its name, its value, and the secret in it (scrubbed from errors).
type credential func(ctx context.Context) (name, value, secret string, err error)

// transport is the RoundTripper of every request to a forge: it sends the
// credential (to the API's origin only), bounds answers in bytes, tells
// Observe, and keeps what a refusal answered for the call's error.
type transport struct {
	base    http.RoundTripper
	origin  string // scheme://host[:port] of the API
	cred    credential
	observe func(op string, status int)
}

// newHTTPClient returns the client a forge sends its requests with: cfg's
// (or a new one), its transport wrapped, each request bounded by cfg.Timeout.
func newHTTPClient(cfg Config, api *url.URL, cred credential) *http.Client {
	base := http.DefaultTransport
	client := &http.Client{Timeout: cfg.Timeout}
	if cfg.HTTPClient != nil {
		if cfg.HTTPClient.Transport != nil {
			base = cfg.HTTPClient.Transport
		}
		client.Jar = cfg.HTTPClient.Jar
		client.CheckRedirect = cfg.HTTPClient.CheckRedirect
	}
	if client.Timeout <= 0 {
		client.Timeout = DefaultTimeout
	}
	client.Transport = &transport{base: base, origin: origin(api), cred: cred, observe: cfg.Observe}
	return client
}

func origin(u *url.URL) string { return strings.ToLower(u.Scheme + "://" + u.Host) }

// RoundTrip sends req with the credential, and keeps the answer's status
// (and a refusal's message) in the request's call.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := callOf(req.Context())
	req = req.Clone(req.Context())
	if t.cred != nil && !c.noCred && origin(req.URL) == t.origin {
		name, value, secret, err := t.cred(req.Context())
		if err != nil {
			return nil, err
		}
		c.addSecret(secret)
		req.Header.Set(name, value)
	}
	c.record(0, nil, nil)
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		t.tell(c.op, 0)
		return nil, err
	}
	t.tell(c.op, resp.StatusCode)
	if resp.StatusCode >= http.StatusBadRequest {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBytes))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		c.record(resp.StatusCode, resp.Header.Clone(), body)
		return resp, nil
	}
	c.record(resp.StatusCode, resp.Header.Clone(), nil)
	resp.Body = &boundedBody{rc: resp.Body, left: MaxAnswerBytes}
	return resp, nil
}

func (t *transport) tell(op string, status int) {
	if t.observe != nil {
		t.observe(op, status)
	}
}

// boundedBody fails a read past MaxAnswerBytes instead of truncating.
type boundedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, errTooLarge
		}
		return b.rc.Read(p)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }

// call is one operation of a Forge on one repository: its requests' last
// answer, and the secrets sent, for the error it may end with.
type call struct {
	kind, op, repo string
	noCred         bool // the request carries its own credential (an App's JWT)

	mu      sync.Mutex
	status  int
	header  http.Header
	body    []byte
	secrets []string
}

type callKey struct{}

// withCall starts call op of kind on repo: requests sent with the context
// returned are observed as op, and their answers kept in the call.
func withCall(ctx context.Context, kind, op, repo string) (context.Context, *call) {
	c := &call{kind: kind, op: op, repo: repo}
	return context.WithValue(ctx, callKey{}, c), c
}

// callOf is the call of ctx (a call of its own when none was started).
func callOf(ctx context.Context) *call {
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		return c
	}
	return &call{op: "request"}
}

func (c *call) record(status int, header http.Header, body []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status, c.header, c.body = status, header, body
}

func (c *call) addSecret(s string) {
	if s == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.secrets = append(c.secrets, s)
}

// scrub replaces every secret sent in this call by "[redacted]".
func (c *call) scrub(s string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, secret := range c.secrets {
		s = strings.ReplaceAll(s, secret, "[redacted]")
	}
	return s
}

// scrubbedError is a cause whose message may have carried a secret.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// fail turns err, what the client library returned for this call, into an
// *Error: the forge's answer classified, its message kept, secrets scrubbed.
// An *Error already made (an App token that could not be minted) is kept.
func (c *call) fail(err error) error {
	if fe, ok := errors.AsType[*Error](err); ok {
		return fe
	}
	c.mu.Lock()
	status, header, body := c.status, c.header, c.body
	c.mu.Unlock()
	e := &Error{Kind: c.kind, Op: c.op, Repo: c.repo, Status: status}
	cause := &scrubbedError{msg: c.scrub(err.Error()), err: err}
	switch {
	case status >= http.StatusBadRequest:
		e.Err, e.RetryAfter = classify(status, header, body, time.Now())
		e.Detail = bound(c.scrub(refusalDetail(body)))
	case status != 0 && badAnswer(err):
		e.Err, e.Detail = cause, bound(cause.msg)
	default: // no answer, or it broke off
		e.Status, e.Err = 0, cause
		if timedOut(err) {
			e.Detail = "no answer in time"
		}
	}
	return e
}

// timedOut says whether err is a deadline passed (Config.Timeout, or the
// caller's context).
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// refuse is an *Error for an answer that carried a refusal in a 2xx answer
// (GraphQL's errors): cause, and the forge's message.
func (c *call) refuse(cause error, detail string) error {
	c.mu.Lock()
	status, header := c.status, c.header
	c.mu.Unlock()
	e := &Error{Kind: c.kind, Op: c.op, Repo: c.repo, Status: status, Err: cause, Detail: bound(c.scrub(detail))}
	if errors.Is(cause, ErrRateLimited) {
		e.RetryAfter, _ = rateLimited(header, time.Now())
	}
	return e
}

// badAnswer says whether err is about the answer itself (too large, not
// the JSON expected), not the connection.
func badAnswer(err error) bool {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	return errors.Is(err, errTooLarge) || errors.As(err, &syntax) || errors.As(err, &typ)
}

// classify names a refusal: the sentinel, and how long the forge asked to wait.
func classify(status int, h http.Header, body []byte, now time.Time) (error, time.Duration) {
	switch status {
	case http.StatusUnauthorized:
		return ErrUnauthorized, 0
	case http.StatusForbidden, http.StatusTooManyRequests:
		if d, ok := rateLimited(h, now); ok {
			return ErrRateLimited, d
		}
		if status == http.StatusTooManyRequests {
			return ErrRateLimited, untilReset(h, now) // GitLab may not say remaining 0
		}
		if bytes.Contains(bytes.ToLower(body), []byte("secondary rate limit")) {
			// GitHub: "wait for at least one minute" when it names no time.
			return ErrRateLimited, time.Minute
		}
		return ErrForbidden, 0
	case http.StatusNotFound:
		return ErrNotFound, 0
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusNotAcceptable,
		http.StatusConflict, http.StatusUnprocessableEntity:
		return ErrInvalid, 0
	}
	if status >= http.StatusInternalServerError {
		return errFailed, retryAfter(h, now)
	}
	return errRefused, 0
}

// rateLimited says whether h is a rate limit's answer, and when it resets:
// Retry-After (secondary limits, GitLab), or a primary limit exhausted
// (GitHub X-RateLimit-Remaining: 0, GitLab RateLimit-Remaining: 0) until
// its reset (Unix seconds).
func rateLimited(h http.Header, now time.Time) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if h.Get("Retry-After") != "" {
		return retryAfter(h, now), true
	}
	for _, prefix := range []string{"X-RateLimit-", "RateLimit-"} {
		if h.Get(prefix+"Remaining") == "0" {
			return untilReset(h, now), true
		}
	}
	return 0, false
}

// untilReset is how long until the rate limit's reset (X-RateLimit-Reset
// or RateLimit-Reset, Unix seconds; 0 when none or passed).
func untilReset(h http.Header, now time.Time) time.Duration {
	for _, name := range []string{"X-RateLimit-Reset", "RateLimit-Reset"} {
		if reset, err := strconv.ParseInt(h.Get(name), 10, 64); err == nil {
			return max(time.Unix(reset, 0).Sub(now), 0).Round(time.Second)
		}
	}
	return 0
}

// retryAfter reads Retry-After: seconds, or an HTTP date (0: none).
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0).Round(time.Second)
	}
	return 0
}

// refusalDetail is the message of a refusal's answer: GitHub's message and
// its errors' messages, GitLab's message (a string, a list, or fields with
// lists) or error; else the text itself.
func refusalDetail(body []byte) string {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return strings.Join(strings.Fields(string(body)), " ")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return strings.Join(messages(v), "; ")
	}
	var parts []string
	for _, key := range []string{"message", "error", "error_description"} {
		parts = append(parts, messages(obj[key])...)
	}
	if errs := messages(obj["errors"]); len(errs) > 0 {
		head := strings.Join(parts, "; ")
		if head != "" {
			head += ": "
		}
		return head + strings.Join(errs, "; ")
	}
	return strings.Join(parts, "; ")
}

// messages are the human messages in v: strings; lists of them; objects
// with a message (GitHub's errors), or with fields listing messages
// (GitLab's {"title": ["can't be blank"]}).
func messages(v any) []string {
	switch v := v.(type) {
	case string:
		if v = strings.TrimSpace(v); v != "" {
			return []string{v}
		}
	case []any:
		var out []string
		for _, item := range v {
			out = append(out, messages(item)...)
		}
		return out
	case map[string]any:
		if m := messages(v["message"]); len(m) > 0 {
			return m
		}
		if code, ok := v["code"].(string); ok {
			return []string{strings.TrimSpace(fmt.Sprintf("%v %v %s", v["resource"], v["field"], code))}
		}
		var out []string
		for _, key := range slices.Sorted(maps.Keys(v)) {
			for _, m := range messages(v[key]) {
				out = append(out, key+" "+m)
			}
		}
		return out
	}
	return nil
}

// bound cuts s to maxDetail bytes, on a rune boundary.
func bound(s string) string {
	if len(s) <= maxDetail {
		return s
	}
	cut := maxDetail
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// parseAPI checks the API base URL of a forge of kind.
func parseAPI(kind, api string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(api))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("forge %s: api %q: not an http(s) URL without query (accepted: e.g. https://api.github.com, https://gitlab.example.com)", kind, api)
	}
	if u.User != nil {
		return nil, fmt.Errorf("forge %s: api %s://%s: credentials in the URL are not accepted (use tokenFile)", kind, u.Scheme, u.Host)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

// tokenCredential sends cfg.Token's token in header, after prefix.
func tokenCredential(kind string, token func(context.Context) (string, error), header, prefix string) credential {
	return func(ctx context.Context) (string, string, string, error) {
		tok, err := token(ctx)
		if err != nil {
			return "", "", "", fmt.Errorf("forge %s: reading the token: %w", kind, err)
		}
		tok = strings.TrimSpace(tok)
		if err := checkToken(kind, tok); err != nil {
			return "", "", "", err
		}
		return header, prefix + tok, tok, nil
	}
}

// checkToken refuses a token no header can carry (without showing it).
func checkToken(kind, tok string) error {
	if tok == "" {
		return fmt.Errorf("forge %s: the token is empty", kind)
	}
	if strings.ContainsAny(tok, "\r\n\x00") {
		return fmt.Errorf("forge %s: the token (%d bytes) holds a line break or NUL, which no header can carry", kind, len(tok))
	}
	return nil
}
