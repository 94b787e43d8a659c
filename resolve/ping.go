package resolve

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// pingFallbackWait is how long a failed https ping waits for the plain-HTTP ping
// go-containerregistry starts right after it, before it counts as an error.
const pingFallbackWait = 5 * time.Second

// pingPairs pairs go-containerregistry's two pings of a registry that may be plain
// HTTP (transport.ping: https first, http when https fails or is slow; both to the
// same URL host) so that the failed https attempt is not counted as an error.
type pingPairs struct {
	mu      sync.Mutex
	wait    time.Duration            // pingFallbackWait; tests shorten it
	httpAt  map[string]time.Time     // by URL host: when its last plain-HTTP ping started
	pending map[string][]*failedPing // by URL host: failed https pings waiting for it
}

// failedPing is an https ping that failed; record counts it exactly once.
type failedPing struct {
	once   sync.Once
	record func(status string)
	status string // StatusError or StatusCanceled, when no http ping follows
	timer  *time.Timer
}

func (p *failedPing) resolve(fallback bool) {
	p.once.Do(func() {
		if fallback {
			p.record(StatusHTTPSFallback)
			return
		}
		p.record(p.status)
	})
}

// httpStarted notes a plain-HTTP ping of host: the https pings of host that failed
// and wait for it are fallbacks.
func (pp *pingPairs) httpStarted(host string) {
	pp.mu.Lock()
	if pp.httpAt == nil {
		pp.httpAt = map[string]time.Time{}
	}
	pp.httpAt[host] = time.Now()
	waiting := pp.pending[host]
	delete(pp.pending, host)
	pp.mu.Unlock()
	for _, p := range waiting {
		p.timer.Stop()
		p.resolve(true)
	}
}

// httpsFailed counts an https ping of host started at start that failed with
// status: as a fallback when a plain-HTTP ping of host started since (it raced this
// one) or starts within the wait, else as status once the wait is over.
func (pp *pingPairs) httpsFailed(host string, start time.Time, status string, record func(string)) {
	p := &failedPing{record: record, status: status}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if at, ok := pp.httpAt[host]; ok && !at.Before(start) {
		p.resolve(true)
		return
	}
	if pp.pending == nil {
		pp.pending = map[string][]*failedPing{}
	}
	pp.pending[host] = append(pp.pending[host], p)
	p.timer = time.AfterFunc(cmp.Or(pp.wait, pingFallbackWait), func() {
		pp.mu.Lock()
		pp.pending[host] = slices.DeleteFunc(pp.pending[host], func(q *failedPing) bool { return q == p })
		if len(pp.pending[host]) == 0 {
			delete(pp.pending, host)
		}
		pp.mu.Unlock()
		p.resolve(false)
	})
}
