package resolve

// Retry-After pauses: a 429 with Retry-After pauses the repository its path names
// (or the whole registry host) for every render, capped (DefaultPauseCap).

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultPauseCap bounds the pause a Retry-After sets: a registry asking for a day
// (or an HTTP date far ahead) is asked again after this.
const DefaultPauseCap = 5 * time.Minute

// pauseKey is what a Retry-After pauses: a registry host, or one repository of it
// (repo as the request path names it; "" for the whole host).
type pauseKey struct{ host, repo string }

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
