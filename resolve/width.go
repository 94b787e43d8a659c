package resolve

import (
	"context"
	"sync"
	"time"
)

// requestTurn is what one request of a resolution takes, CPU bound, against a
// registry on the same machine: 100 µs, 10,000 requests a second
// (BenchmarkColdNewestBuildCPU reads about 15,000 a second on loopback, both
// cores busy). By Little's law, the round trip over requestTurn requests in
// flight keep a resolution reading at that rate.
const requestTurn = 100 * time.Microsecond

// minWidth is the fewest inspections a resolution runs at once.
const minWidth = 8

// inspectWidth is how many of a resolution's inspections run at once, within the
// Resolver's bound per registry host (its slots): as many as the registry's
// round trip hides, by Little's law the round trip over requestTurn, at least
// minWidth. The tag pages measure the round trip, each read after the one before
// on a connection already open: the second page's, then the shortest; for a list
// of one page, its time from the resolution's start over three (until the list
// ends, its tags are inspected minWidth at once). A registry 20 ms away is
// inspected 64 at once, as before; one on the same machine 8 at once, since more
// only queue, there and in the resolver: at no added latency 8 at once use
// 10-15% less of the resolver's CPU than 64 and take no longer
// (BenchmarkColdNewestBuildCPU). Without a tag page seen (a tag list from a
// cache, a metadata API's), the width is the bound.
type inspectWidth struct {
	tokens chan struct{} // one per inspection that may run; capacity: the bound
	bound  int
	now    func() time.Time

	mu       sync.Mutex
	decided  bool
	lastPage time.Time // the resolution's start, before the first page
	turn     time.Duration
	guessed  bool // turn is the first page's guess
	width    int  // tokens given out, less the debt
	debt     int  // tokens to take back as inspections end
}

func newInspectWidth(bound int) *inspectWidth {
	return &inspectWidth{tokens: make(chan struct{}, bound), bound: bound, now: time.Now, lastPage: time.Now()}
}

// page sets the width from the round trip a tag page just measured. The first
// page's time is only a guess: its tags are inspected minWidth at once until
// the second page's trip replaces it (wider or narrower), or the list ends with
// it (listed); after that, only a trip shorter than any before changes it.
func (w *inspectWidth) page() {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	trip := now.Sub(w.lastPage)
	w.lastPage = now
	switch {
	case !w.decided:
		// The registry's ping, a connection and the page: three round trips at
		// least (none but the page when the client has talked to it before).
		w.turn, w.guessed = trip/3, true
		w.resize(min(minWidth, w.bound))
		return
	case w.guessed || trip < w.turn:
		w.turn, w.guessed = trip, false
	default:
		return
	}
	w.resize(w.fromTurn())
}

// listed takes the first page's guess when the list had no other page.
func (w *inspectWidth) listed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.guessed {
		w.guessed = false
		w.resize(w.fromTurn())
	}
}

// fromTurn is the width the round trip hides.
func (w *inspectWidth) fromTurn() int {
	return min(max(int(w.turn/requestTurn), minWidth), w.bound)
}

// resize gives out or takes back tokens for width. It widens only from the
// first page's width, minWidth, the least there is: no narrowing came before,
// so no debt is owed when it does.
func (w *inspectWidth) resize(width int) {
	switch {
	case width < w.width:
		w.narrow(width)
	case width > w.width:
		for range width - w.width {
			w.tokens <- struct{}{}
		}
		w.width = width
	}
	w.decided = true
}

// narrow takes tokens back down to width: those not taken at once, and the rest
// as the inspections holding them end.
func (w *inspectWidth) narrow(width int) {
	w.debt += w.width - width
	w.width = width
	for w.debt > 0 {
		select {
		case <-w.tokens:
			w.debt--
		default:
			return
		}
	}
}

// acquire takes a token for an inspection; false when ctx ended first.
func (w *inspectWidth) acquire(ctx context.Context) bool {
	w.mu.Lock()
	if !w.decided {
		w.resize(w.bound)
	}
	w.mu.Unlock()
	select {
	case <-w.tokens:
		return true
	case <-ctx.Done():
		return false
	}
}

// release gives back the token of an inspection that ended, or keeps it to pay
// the debt of a narrowing.
func (w *inspectWidth) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.debt > 0 {
		w.debt--
		return
	}
	w.tokens <- struct{}{} // never blocks: no more tokens than its capacity are out
}
