package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// ServeHTTP answers one delivery: 405 for a method other than POST, 404 for a
// path not served, 429 over the rate (once waiting for a turn would take over
// maxWait), 401 without a valid secret, 413 for a body over the bound, 400 for
// a body that is not the kind's payload, and 200 once its pushes are handed to
// the sink (replays and non-pushes included, so that the sender stops retrying).
//
// A kind whose sender proves itself in a header (a token or a bearer secret) is
// checked before it takes a turn of the rate: a flood without the secret costs a
// hash of what it offers, reads no body and spends no turn of the senders that
// have it. A kind that signs its body (GitHub, Gitea) can only be checked once
// the body is read, so it waits for its turn first.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed: POST only", http.StatusMethodNotAllowed)
		return
	}
	srv, token, ok := h.route(r)
	if !ok {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	auth := srv.spec.auth
	if !auth.signsBody() && !auth.authorizedByHeaders(srv.secret, r.Header, token) {
		h.unauthorized(w, r, srv)
		return
	}
	if !h.admit(w, r, srv) {
		return
	}
	now := h.now()
	body, ok := h.readBody(w, r, srv)
	if !ok {
		return
	}
	if auth.signsBody() && !auth.authorizedBody(srv.secret, r.Header, body) {
		h.unauthorized(w, r, srv)
		return
	}
	items, err := srv.spec.parse(r.Header, body)
	if err != nil {
		h.log.Warn("webhook payload invalid", "kind", srv.name, "error", err.Error())
		h.reject(w, srv, outcomeInvalid, http.StatusBadRequest, fmt.Sprintf("invalid %s payload: %v", srv.name, err))
		return
	}
	d := delivery{srv: srv, body: body, now: now, decided: make(map[replayKey]bool)}
	h.deliver(r.Context(), w, &d, items)
}

// admit takes a token from the listener's rate limiter, waiting for it up to
// maxWait. A delivery that would wait longer is answered 429 with the seconds
// to wait; one whose request context ends while it waits (the listener shutting
// down, or its sender gone where net/http notices) gives its turn back, with no
// answer. Either way it is counted rate-limited and admit reports false.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request, srv *served) bool {
	now := h.now()
	res := h.limiter.ReserveN(now, 1)
	if !res.OK() {
		h.rateLimited(w, srv, 1)
		return false
	}
	delay := res.DelayFrom(now)
	switch {
	case delay <= 0:
		return true
	case delay > h.maxWait:
		res.CancelAt(now)
		h.rateLimited(w, srv, max(1, int(math.Ceil(delay.Seconds()))))
		return false
	case !h.sleep(r.Context(), delay):
		res.CancelAt(h.now())
		h.events.WithLabelValues(srv.name, outcomeRateLimited).Inc() // the sender is gone: no answer
		h.log.Debug("webhook sender left while waiting for the rate limit", "kind", srv.name)
		return false
	}
	h.log.Debug("webhook waited for the rate limit", "kind", srv.name, "wait", delay)
	return true
}

func (h *Handler) rateLimited(w http.ResponseWriter, srv *served, retryAfter int) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	h.reject(w, srv, outcomeRateLimited, http.StatusTooManyRequests, "rate limited")
	h.log.Debug("webhook rate limited", "kind", srv.name)
}

// readBody reads the body within the bound, answering 413 over it.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, srv *served) ([]byte, bool) {
	if r.ContentLength > h.maxBody {
		h.tooLarge(w, srv)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		h.tooLarge(w, srv)
		return nil, false
	case err != nil:
		h.log.Warn("webhook body unreadable", "kind", srv.name, "error", err.Error())
		h.reject(w, srv, outcomeInvalid, http.StatusBadRequest, "the body could not be read")
		return nil, false
	}
	return body, true
}

func (h *Handler) tooLarge(w http.ResponseWriter, srv *served) {
	h.log.Warn("webhook body too large", "kind", srv.name, "limit", h.maxBody)
	h.reject(w, srv, outcomeTooLarge, http.StatusRequestEntityTooLarge,
		fmt.Sprintf("body larger than %d bytes", h.maxBody))
}

// unauthorized answers 401. It logs a warning per kind at most once per
// unauthorizedLogEvery, with how many went unlogged since: refused deliveries
// are no longer held to the rate, and a flood of them must not flood the log
// (the events metric counts every one).
func (h *Handler) unauthorized(w http.ResponseWriter, r *http.Request, srv *served) {
	if n, ok := srv.unauthorizedLog.take(h.now()); ok {
		h.log.Warn("webhook unauthorized", "kind", srv.name, "remote", r.RemoteAddr, "unlogged_since_last", n)
	}
	if !srv.spec.auth.signsBody() {
		w.Header().Set("WWW-Authenticate", `Bearer realm="webhooks"`)
	}
	h.reject(w, srv, outcomeUnauthorized, http.StatusUnauthorized, "unauthorized")
}

// reject counts a delivery refused as a whole and answers it.
func (h *Handler) reject(w http.ResponseWriter, srv *served, outcome string, status int, msg string) {
	h.events.WithLabelValues(srv.name, outcome).Inc()
	http.Error(w, msg, status)
}

// delivery is one authenticated, parsed delivery being handed on.
type delivery struct {
	srv     *served
	body    []byte
	now     time.Time
	decided map[replayKey]bool // replay verdicts already given in this delivery
	bodyID  string             // "sha256:<hex>" of the body, once computed
}

// deliver hands each push of d to the sink, counts every event, and answers 200
// with a summary, or 503 when a push could not be handed on: its sender then
// retries the delivery, which is not taken for a replay.
func (h *Handler) deliver(ctx context.Context, w http.ResponseWriter, d *delivery, items []item) {
	counts := make(map[string]int, 4)
	for _, it := range items {
		outcome := h.handle(ctx, d, it)
		counts[outcome]++
		h.events.WithLabelValues(d.srv.name, outcome).Inc()
	}
	if counts[outcomeUnavailable] > 0 {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "the daemon did not take the pushes: retry", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "accepted %d, unused %d, ignored %d, replay %d\n",
		counts[outcomeAccepted], counts[outcomeUnused], counts[outcomeIgnored], counts[outcomeReplay])
}

// handle hands one event on, unless it is a replay or not a push, and tells its
// outcome.
func (h *Handler) handle(ctx context.Context, d *delivery, it item) string {
	key, seenAt, dup := h.replayed(d, it.id)
	if dup {
		h.log.Debug("webhook replay", "kind", d.srv.name)
		return outcomeReplay
	}
	if !it.push {
		h.log.Debug("webhook event ignored", "kind", d.srv.name, "reason", it.reason)
		return outcomeIgnored
	}
	ev := it.ev
	ev.Kind = d.srv.name
	used, err := h.sink.Push(ctx, ev)
	if err != nil {
		if !seenAt.IsZero() {
			h.replays.forget(key, seenAt)
		}
		h.log.Warn("webhook push not taken; the sender is asked to retry", "kind", ev.Kind, "repository", ev.Repository, "err", err.Error())
		return outcomeUnavailable
	}
	// A push no app uses is the common case on a shared registry: a line each
	// at Info would flood the log with what changed nothing.
	level := slog.LevelDebug
	if used {
		level = slog.LevelInfo
	}
	h.log.Log(ctx, level, "webhook push", "kind", ev.Kind, "registry", ev.Registry, "repository", ev.Repository,
		"tag", ev.Tag, "digest", ev.Digest, "used", used)
	if used {
		return outcomeAccepted
	}
	return outcomeUnused
}

// replayed reports whether the event of id (the body's hash when "") was handled
// in the window already. Events of one delivery sharing an id share a verdict.
// An event seen first now is remembered under key at seenAt (zero otherwise).
func (h *Handler) replayed(d *delivery, id string) (key replayKey, seenAt time.Time, dup bool) {
	if h.replays == nil {
		return key, seenAt, false
	}
	if id == "" {
		if !d.srv.spec.bodyReplay {
			return key, seenAt, false
		}
		if d.bodyID == "" {
			sum := sha256.Sum256(d.body)
			d.bodyID = "sha256:" + hex.EncodeToString(sum[:])
		}
		id = d.bodyID
	}
	key = newReplayKey(d.srv.name, id)
	if dup, ok := d.decided[key]; ok {
		return key, seenAt, dup
	}
	dup = !h.replays.first(key, d.now)
	d.decided[key] = dup
	if !dup {
		seenAt = d.now
	}
	return key, seenAt, dup
}

// unauthorizedLogEvery is how often a kind's refused deliveries are logged.
const unauthorizedLogEvery = 10 * time.Second

// logSampler lets one log line through per interval and counts the others.
type logSampler struct {
	mu       sync.Mutex
	last     time.Time
	unlogged int
}

// take reports whether to log now, and how many were not logged since the last
// line.
func (s *logSampler) take(now time.Time) (unlogged int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.IsZero() && now.Sub(s.last) < unauthorizedLogEvery {
		s.unlogged++
		return 0, false
	}
	unlogged, s.unlogged, s.last = s.unlogged, 0, now
	return unlogged, true
}

// MaxConns bounds a listener's connections at once: a registry sends on a few,
// and each held costs a goroutine and its buffers. The next ones wait in the
// kernel's backlog (netutil.LimitListener).
const MaxConns = 256

// NewServer serves h with bounds for callers from anywhere: headers within 5s,
// a whole request within 10s, idle connections closed after 60s, headers of
// at most 32 KiB.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 32 << 10}
}
