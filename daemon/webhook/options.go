package webhook

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// The defaults of a Handler's limits.
const (
	DefaultRate          = 200         // deliveries a second over the whole listener
	DefaultBurst         = 400         // deliveries at once above the rate
	DefaultMaxWait       = time.Second // a delivery over the rate waits for its turn at most
	DefaultMaxBody       = 1 << 20     // bytes of a body
	DefaultReplayWindow  = time.Hour
	DefaultReplayEntries = 10000 // deliveries remembered at most
)

// Option changes a Handler's defaults.
type Option func(*config)

type config struct {
	registerer    prometheus.Registerer
	log           *slog.Logger
	rate          rate.Limit
	burst         int
	maxWait       time.Duration
	maxBody       int64
	now           func() time.Time
	sleep         func(ctx context.Context, d time.Duration) bool
	replayWindow  time.Duration
	replayEntries int
}

func defaultConfig() config {
	return config{
		log:           slog.New(slog.DiscardHandler),
		rate:          DefaultRate,
		burst:         DefaultBurst,
		maxWait:       DefaultMaxWait,
		maxBody:       DefaultMaxBody,
		now:           time.Now,
		sleep:         sleep,
		replayWindow:  DefaultReplayWindow,
		replayEntries: DefaultReplayEntries,
	}
}

// WithRegisterer registers the handler's metrics on reg (by default they are
// registered nowhere).
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *config) { c.registerer = reg }
}

// WithLogger logs to log (by default nothing is logged). Lines name the kind,
// never the path, which may hold a secret.
func WithLogger(log *slog.Logger) Option {
	return func(c *config) {
		if log != nil {
			c.log = log
		}
	}
}

// WithRate limits the whole listener to perSecond deliveries a second with
// bursts of burst (at least 1); perSecond <= 0 lifts the limit.
func WithRate(perSecond float64, burst int) Option {
	return func(c *config) {
		c.rate, c.burst = rate.Limit(perSecond), max(burst, 1)
		if perSecond <= 0 {
			c.rate = rate.Inf
		}
	}
}

// WithMaxWait makes a delivery over the rate wait up to d for its turn before
// it is answered 429 (d <= 0: answered at once). Waiting deliveries hold their
// connections, so a sender faster than the rate is slowed to it rather than
// answered and refused over and over.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) { c.maxWait = max(d, 0) }
}

// WithMaxBody bounds a body to n bytes (n > 0; otherwise the default stays).
func WithMaxBody(n int64) Option {
	return func(c *config) {
		if n > 0 {
			c.maxBody = n
		}
	}
}

// WithClock makes the handler read the time from now (for tests).
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

// WithReplayWindow remembers the deliveries of the last window, at most entries
// of them (the oldest forgotten first); window <= 0 or entries <= 0 turns replay
// detection off.
func WithReplayWindow(window time.Duration, entries int) Option {
	return func(c *config) { c.replayWindow, c.replayEntries = window, entries }
}

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Limits are a Handler's bounds as one value, for a listener process
// (StartProcess): a zero field keeps the default; a negative Rate lifts the
// limit.
type Limits struct {
	Rate          float64       `json:"rate,omitempty"`
	Burst         int           `json:"burst,omitempty"`
	MaxWait       time.Duration `json:"maxWait,omitempty"`
	MaxBody       int64         `json:"maxBody,omitempty"`
	ReplayWindow  time.Duration `json:"replayWindow,omitempty"`
	ReplayEntries int           `json:"replayEntries,omitempty"`
}

// options are the Options l sets.
func (l Limits) options() []Option {
	var opts []Option
	if l.Rate != 0 || l.Burst != 0 {
		r, b := l.Rate, l.Burst
		if r == 0 {
			r = DefaultRate
		}
		if b == 0 {
			b = DefaultBurst
		}
		opts = append(opts, WithRate(r, b))
	}
	if l.MaxWait != 0 {
		opts = append(opts, WithMaxWait(l.MaxWait))
	}
	if l.MaxBody != 0 {
		opts = append(opts, WithMaxBody(l.MaxBody))
	}
	if l.ReplayWindow != 0 || l.ReplayEntries != 0 {
		w, n := l.ReplayWindow, l.ReplayEntries
		if w == 0 {
			w = DefaultReplayWindow
		}
		if n == 0 {
			n = DefaultReplayEntries
		}
		opts = append(opts, WithReplayWindow(w, n))
	}
	return opts
}
