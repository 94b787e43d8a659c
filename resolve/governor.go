package resolve

import (
	"context"
	"math"
	"net/http"
	"sync"
	"time"
)

// The adaptive concurrency governor: the one bound on requests in flight to a
// registry host. It starts at the most the operator allows (registryConcurrency,
// default 64), halves when the registry says it is overloaded and recovers by one
// request per window of answers (additive increase, multiplicative decrease, as
// TCP's congestion control does), never below 1.
//
// What counts as "overloaded":
//   - a 429 (too many requests): every one, the registry's explicit word;
//   - 503s, 502s, 504s and requests that got no answer (connection refused or
//     reset, timeouts): when they are at least overloadShare of the last
//     overloadWindow answers. A registry that is overloaded answers many of them;
//     one in fifty is noise (a replica restarting) that retries absorb, and
//     halving on each would starve a healthy registry.
//
// Answers to requests sent before the last cut do not cut again: they describe
// the load before it, so a burst of errors from one window costs one halving.
const (
	// DefaultRegistryConcurrency is the most requests in flight per registry host
	// (where the governor starts) when the operator sets no registryConcurrency.
	DefaultRegistryConcurrency = 64

	overloadWindow = 50
	overloadShare  = 0.1
)

// signal is what one answer says about a registry's load.
type signal int

const (
	signalNone       signal = iota // an answer: the registry keeps up
	signalThrottled                // 429: cut now
	signalOverloaded               // 5xx overload or no answer: cut if frequent
	signalIgnored                  // the caller left: says nothing about the registry
)

// signalOf classifies an attempt's outcome.
func signalOf(ctx context.Context, resp *http.Response, err error) signal {
	if err != nil {
		if ctx.Err() != nil {
			return signalIgnored
		}
		return signalOverloaded
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		return signalThrottled
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return signalOverloaded
	}
	return signalNone
}

// governor bounds the requests in flight to one registry host.
type governor struct {
	max int
	now func() time.Time

	mu       sync.Mutex
	limit    float64 // in [1, max]
	inFlight int
	waiters  []chan struct{} // FIFO; closed when a slot is given
	lastCut  time.Time
	recent   [overloadWindow]bool // the last answers: overloaded or not (a ring)
	next     int
	overload int // how many of recent are true
}

func newGovernor(ceiling int, now func() time.Time) *governor {
	return &governor{max: ceiling, limit: float64(ceiling), now: now}
}

// acquire waits for a slot; it returns when the request was sent (for release).
func (g *governor) acquire(ctx context.Context) (time.Time, error) {
	g.mu.Lock()
	if len(g.waiters) == 0 && g.inFlight < g.slots() {
		g.inFlight++
		g.mu.Unlock()
		return g.now(), nil
	}
	ch := make(chan struct{})
	g.waiters = append(g.waiters, ch)
	g.mu.Unlock()
	select {
	case <-ch:
		return g.now(), nil
	case <-ctx.Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		select {
		case <-ch: // given a slot meanwhile: hand it on
			g.inFlight--
			g.wake()
		default:
			for i, w := range g.waiters {
				if w == ch {
					g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
					break
				}
			}
		}
		return time.Time{}, ctx.Err()
	}
}

// release frees the slot of a request sent at sent and adapts the limit to what
// its answer said.
func (g *governor) release(sent time.Time, s signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inFlight--
	switch s {
	case signalNone:
		g.remember(false)
		g.limit = math.Min(float64(g.max), g.limit+1/g.limit)
	case signalThrottled:
		g.remember(true)
		g.cut(sent)
	case signalOverloaded:
		if g.remember(true) >= overloadShare*overloadWindow {
			g.cut(sent)
		}
	}
	g.wake()
}

// remember records an answer and returns how many of the last window were
// overloaded.
func (g *governor) remember(overloaded bool) int {
	if g.recent[g.next] {
		g.overload--
	}
	if overloaded {
		g.overload++
	}
	g.recent[g.next] = overloaded
	g.next = (g.next + 1) % overloadWindow
	return g.overload
}

func (g *governor) cut(sent time.Time) {
	if sent.Before(g.lastCut) {
		return
	}
	g.limit = math.Max(1, g.limit/2)
	g.lastCut = g.now()
	g.recent, g.overload = [overloadWindow]bool{}, 0
}

// slots is how many requests may be in flight now.
func (g *governor) slots() int { return max(1, int(g.limit)) }

// wake gives free slots to waiters, first come first served.
func (g *governor) wake() {
	for len(g.waiters) > 0 && g.inFlight < g.slots() {
		ch := g.waiters[0]
		g.waiters = g.waiters[1:]
		g.inFlight++
		close(ch)
	}
}

// state is the current limit and requests in flight (metrics).
func (g *governor) state() (limit, inFlight int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.slots(), g.inFlight
}
