package resolve

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryPolicy says how 429 and 5xx answers are retried.
type RetryPolicy struct {
	// Attempts is the total number of tries per request (1: no retry).
	Attempts int
	// Backoff is the wait before the first retry, doubled for each next one, when the
	// registry sends no Retry-After.
	Backoff time.Duration
	// MaxWait caps any single wait, Retry-After included. A registry asking for longer
	// gets its answer returned instead of a hang.
	MaxWait time.Duration
}

// DefaultRetryPolicy retries three times, after 200ms, 400ms and 800ms (or the
// registry's Retry-After), never waiting more than 30s at once. The first wait is
// short because a lone 5xx (a replica restarting) usually passes at once; a
// registry that keeps failing is backed off by the concurrency governor, which
// halves the requests in flight (Limiter), and by Retry-After.
var DefaultRetryPolicy = RetryPolicy{Attempts: 4, Backoff: 200 * time.Millisecond, MaxWait: 30 * time.Second}

// retryTransport retries requests the registry answered with 429 or a 5xx, waiting
// for Retry-After when given. It sits below authentication, so token and ping
// requests are retried too.
type retryTransport struct {
	next   http.RoundTripper
	policy RetryPolicy
	// sleep waits for d or until ctx ends; replaced in unit tests.
	sleep func(ctx context.Context, d time.Duration) error
}

// noRetryKey marks a context whose requests are tried once.
type noRetryKey struct{}

// WithoutRetries returns ctx marked so that registry requests made with it are tried
// once, not retried: for a caller that has an answer to fall back on (a stale cache
// entry) and would rather serve it now than wait out backoffs and Retry-After.
func WithoutRetries(ctx context.Context) context.Context {
	return context.WithValue(ctx, noRetryKey{}, true)
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	attempts := max(t.policy.Attempts, 1)
	if req.Context().Value(noRetryKey{}) != nil {
		attempts = 1
	}
	backoff := t.policy.Backoff
	for try := 1; ; try++ {
		resp, err := t.next.RoundTrip(req)
		if err != nil || try >= attempts || !retryable(resp.StatusCode) || (req.Body != nil && req.GetBody == nil) {
			return resp, err
		}
		wait, ok := RetryAfter(resp.Header.Get("Retry-After"), time.Now())
		if !ok {
			wait = backoff
			backoff *= 2
		}
		if t.policy.MaxWait > 0 && wait > t.policy.MaxWait {
			return resp, nil // the caller reports the registry's own answer
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) //nolint:errcheck // draining for reuse only
		resp.Body.Close()
		if err := t.wait(req.Context(), wait); err != nil {
			return nil, err
		}
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

func (t *retryTransport) wait(ctx context.Context, d time.Duration) error {
	if t.sleep != nil {
		return t.sleep(ctx, d)
	}
	return sleepCtx(ctx, d)
}

// sleepCtx waits for d or until ctx ends: the waits of retries and of Retry-After
// pauses (Limiter).
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

func retryable(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// RetryAfter parses a Retry-After header value: seconds or an HTTP date, relative to now.
func RetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
