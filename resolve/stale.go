package resolve

import (
	"context"
	"slices"
	"sync"
)

// Stale-if-error: a caching Registry that answers from data past its TTL, because
// the registry failed, says so with ReportStale; the Resolver collects the reports
// of one resolution into Result.Stale so the render can flag it.

type staleKey struct{}

type staleRecorder struct {
	mu      sync.Mutex
	reasons []string
}

// ReportStale records that an answer given during this resolution came from a stale
// cache entry. reason says what and why, e.g. "tag list of ghcr.io/org/app from
// 2026-01-01T10:00:00Z: registry answered 503". It must not hold credentials.
func ReportStale(ctx context.Context, reason string) {
	if rec, ok := ctx.Value(staleKey{}).(*staleRecorder); ok {
		rec.mu.Lock()
		if !slices.Contains(rec.reasons, reason) {
			rec.reasons = append(rec.reasons, reason)
		}
		rec.mu.Unlock()
	}
}

func withStaleRecorder(ctx context.Context) (context.Context, *staleRecorder) {
	rec := &staleRecorder{}
	return context.WithValue(ctx, staleKey{}, rec), rec
}

func (r *staleRecorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.reasons)
	slices.Sort(out)
	return out
}
