package forge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// giteaDetailBytes bounds the forge's message kept in an Error.
const giteaDetailBytes = 1024

// giteaErrorBytes bounds what is read of an error answer for its message.
const giteaErrorBytes = 64 << 10

// giteaExchangeKey is the context key of the giteaExchange a request belongs to.
type giteaExchangeKey struct{}

// giteaExchange is what the transport saw of one SDK call's request: the SDK
// hides the status of some calls' refusals and reads whole bodies, so the
// transport records the answer and bounds it.
type giteaExchange struct {
	op         string
	sent       bool
	status     int // 0: no answer
	retryAfter time.Duration
	message    string // an error answer's message
}

// giteaHTTP is the HTTP client the SDK is given: the configured one (or a new
// one), copied, with its transport wrapped and Timeout bounding each request.
type giteaHTTP struct {
	client *http.Client
	tr     *giteaTransport
}

func newGiteaHTTP(cfg Config) *giteaHTTP {
	c := &http.Client{}
	if cfg.HTTPClient != nil {
		cp := *cfg.HTTPClient
		c = &cp
	}
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	tr := &giteaTransport{base: base, observe: cfg.Observe, limit: MaxAnswerBytes}
	c.Transport = tr
	if c.Timeout <= 0 || c.Timeout > cfg.Timeout {
		c.Timeout = cfg.Timeout
	}
	return &giteaHTTP{client: c, tr: tr}
}

// giteaTransport observes every request, bounds every answer, and records
// the answer in the request's giteaExchange.
type giteaTransport struct {
	base    http.RoundTripper
	observe func(op string, status int)
	limit   int64
}

func (t *giteaTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ex, _ := req.Context().Value(giteaExchangeKey{}).(*giteaExchange)
	if ex == nil {
		ex = &giteaExchange{op: "request"}
	}
	ex.sent = true
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		ex.status = 0
		t.tell(ex.op, 0)
		return nil, err
	}
	ex.status = resp.StatusCode
	t.tell(ex.op, resp.StatusCode)
	resp.Body = &giteaBoundedBody{rc: resp.Body, left: t.limit, limit: t.limit}
	if resp.StatusCode >= http.StatusBadRequest {
		ex.retryAfter = giteaRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		data, _ := io.ReadAll(io.LimitReader(resp.Body, giteaErrorBytes))
		resp.Body.Close()
		ex.message = giteaMessage(data, resp.StatusCode)
		resp.Body = io.NopCloser(bytes.NewReader(data))
	}
	return resp, nil
}

func (t *giteaTransport) tell(op string, status int) {
	if t.observe != nil {
		t.observe(op, status)
	}
}

// giteaBoundedBody reads at most limit bytes of an answer, and fails the read
// when there are more.
type giteaBoundedBody struct {
	rc          io.ReadCloser
	left, limit int64
}

func (b *giteaBoundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 {
			return 0, err
		}
		return 0, fmt.Errorf("the answer is larger than %d bytes", b.limit)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *giteaBoundedBody) Close() error { return b.rc.Close() }

// giteaMessage is Gitea's message in an error answer: {"message": ...,
// "errors": [...]}, else the text itself.
func giteaMessage(data []byte, status int) string {
	var m struct {
		Message string   `json:"message"`
		Errors  []string `json:"errors"`
	}
	msg := strings.TrimSpace(string(data))
	if json.Unmarshal(data, &m) == nil && m.Message != "" {
		msg = m.Message
		if len(m.Errors) > 0 {
			msg += " (" + strings.Join(m.Errors, "; ") + ")"
		}
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return msg
}

// giteaRetryAfter reads a Retry-After header: seconds or an HTTP date.
func giteaRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now).Round(time.Second)
	}
	return 0
}

// toError is the *Error of a call that failed: Gitea's refusal (status and
// message) or no answer (the transport's error), the token scrubbed.
func (ex *giteaExchange) toError(op, repo, token string, err error) error {
	fe := &Error{Kind: KindGitea, Op: op, Repo: repo, Status: ex.status, RetryAfter: ex.retryAfter}
	switch {
	case ex.status >= http.StatusBadRequest:
		fe.Detail = giteaBound(giteaScrub(ex.message, token))
		fe.Err = giteaSentinel(ex.status)
	case err == nil:
		fe.Err = errors.New("no answer")
	default: // no answer, or an answer that could not be read
		fe.Err = err
		if token != "" && strings.Contains(err.Error(), token) {
			fe.Err = errors.New(giteaScrub(err.Error(), token))
		}
		if ex.status != 0 {
			fe.Detail = giteaBound(fe.Err.Error())
		}
	}
	return fe
}

func giteaSentinel(status int) error {
	switch status {
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusForbidden:
		return ErrForbidden
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusConflict, http.StatusUnprocessableEntity:
		return ErrInvalid
	case http.StatusTooManyRequests:
		return ErrRateLimited
	}
	return fmt.Errorf("HTTP %d %s", status, http.StatusText(status))
}

// giteaScrub replaces the token in s.
func giteaScrub(s, token string) string {
	if token == "" {
		return s
	}
	return strings.ReplaceAll(s, token, "[token]")
}

// giteaBound cuts s to giteaDetailBytes.
func giteaBound(s string) string {
	if len(s) <= giteaDetailBytes {
		return s
	}
	return strings.ToValidUTF8(s[:giteaDetailBytes], "") + "..."
}

// giteaNames lists the keys of m, sorted, for messages.
func giteaNames(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, strconv.Quote(n))
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
