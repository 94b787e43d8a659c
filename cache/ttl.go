package cache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// A TTL layer: entries fresh for a TTL, refreshed ahead of expiry while in use,
// served stale when the registry fails (within staleIfError), filled once per key
// at a time.

// ttlLayer is a TTL cache of registry answers with singleflight, refresh-ahead and
// stale-if-error. Its store holds the entries until TTL plus the stale bound (a
// janitor frees them: mem_store.go); freshness is decided here, by the
// Registry's clock.
type ttlLayer[V any] struct {
	r     *Registry
	name  string
	ttl   time.Duration
	c     *ttlStore[V]
	sf    singleflight.Group
	codec valueCodec[V] // for the shared tier
	// storeMu makes storeAt's compare and set one step.
	storeMu sync.Mutex
}

type entry[V any] struct {
	val     V
	fetched time.Time
	// state is when the store drops the entry (wall clock, Unix nanoseconds,
	// rounded up to even; 0: never), its lowest bit set once a refresh-ahead was
	// started for the entry: one word for both, which keeps a heads entry in 80
	// bytes rather than 96 (there is one per tag).
	state atomic.Uint64
}

// setExpiry sets when the store drops the entry (0: never); the entry is not
// being refreshed.
func (e *entry[V]) setExpiry(unixNano int64) {
	e.state.Store(uint64(unixNano + unixNano&1))
}

// expiredAt reports whether the store drops the entry at now (Unix nanoseconds).
func (e *entry[V]) expiredAt(now int64) bool {
	exp := int64(e.state.Load() &^ 1)
	return exp > 0 && now > exp
}

// startRefresh marks the entry as being refreshed ahead, false when it already
// was.
func (e *entry[V]) startRefresh() bool { return e.state.Or(1)&1 == 0 }

// cancelRefresh clears the mark, so that a later read may try again.
func (e *entry[V]) cancelRefresh() { e.state.And(^uint64(1)) }

type fetchFunc[V any] func(ctx context.Context, old *entry[V]) (V, error)

// newTTLLayer returns a layer whose entries are kept for ttl plus the stale bound.
// grouped keeps keys "<repository>:<name>" by repository (mem_store.go): for a
// layer with one entry per tag.
func newTTLLayer[V any](r *Registry, name string, ttl time.Duration, codec valueCodec[V], grouped bool) *ttlLayer[V] {
	l := &ttlLayer[V]{r: r, name: name, ttl: ttl, codec: codec, c: newTTLStore[V](ttl+r.o.staleFor, grouped)}
	janitor(l.c, r.o.cleanupInterval, r.ctx.Done())
	return l
}

func (l *ttlLayer[V]) lookup(key string) *entry[V] { return l.c.get(key) }

func (l *ttlLayer[V]) fresh(e *entry[V], now time.Time) bool {
	return e != nil && now.Sub(e.fetched) < l.ttl
}

// get answers key from a fresh entry, else fetches it (once for all concurrent
// callers), else serves the expired entry if the failure allows it.
func (l *ttlLayer[V]) get(ctx context.Context, key, repoKey, what string, fetch fetchFunc[V]) (V, error) {
	var zero V
	now := l.r.now()
	if e := l.lookup(key); l.fresh(e, now) {
		l.r.m.CacheHits.WithLabelValues(l.name).Inc()
		l.refreshAhead(key, repoKey, e, now, fetch)
		return e.val, nil
	}
	v, err := l.fill(ctx, key, repoKey, fetch)
	if err == nil {
		return v, nil
	}
	if ctx.Err() != nil {
		return zero, err
	}
	if isNotFound(err) {
		l.c.delete(key) // the registry says it is gone: nothing to serve stale
		return zero, err
	}
	cur := l.lookup(key)
	if cur == nil || !staleable(err) {
		return zero, err
	}
	now = l.r.now()
	if l.fresh(cur, now) { // another fetch succeeded meanwhile
		return cur.val, nil
	}
	if now.Sub(cur.fetched) >= l.ttl+l.r.o.staleFor {
		return zero, err
	}
	l.r.m.CacheStale.WithLabelValues(l.name).Inc()
	resolve.ReportStale(ctx, fmt.Sprintf("%s from %s: %s", what, cur.fetched.UTC().Format(time.RFC3339), describeError(err)))
	return cur.val, nil
}

// fill fetches key once for every concurrent caller and stores the answer. The
// fetch does not depend on the caller's context; the caller stops waiting when its
// context ends.
func (l *ttlLayer[V]) fill(ctx context.Context, key, repoKey string, fetch fetchFunc[V]) (V, error) {
	var zero V
	leader := false
	ch := l.sf.DoChan(key, func() (any, error) {
		leader = true
		old := l.lookup(key)
		if l.fresh(old, l.r.now()) { // stored by a fetch that ended after we looked
			return old.val, nil
		}
		fctx, cancel := l.r.fetchContext(repoKey)
		defer cancel()
		// The leader's tag page observer (a newest-build reading metadata as pages
		// come) follows the detached fetch.
		fctx = resolve.CarryTagPages(ctx, fctx)
		if old != nil && l.r.o.staleFor > 0 {
			// An expired entry can answer if the registry fails: a render serves it at
			// once rather than waiting out retries (refresh-ahead still retries).
			fctx = resolve.WithoutRetries(fctx)
		}
		v, fetched, err := l.fetch(fctx, key, old, fetch)
		if err != nil {
			return nil, err
		}
		l.storeAt(key, v, fetched)
		return v, nil
	})
	select {
	case res := <-ch:
		if leader {
			l.r.m.CacheMisses.WithLabelValues(l.name).Inc()
		} else {
			l.r.m.Shared.WithLabelValues(l.name).Inc()
		}
		if res.Err != nil {
			return zero, res.Err
		}
		return res.Val.(V), nil
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// storeAt stores v as fetched from the registry at fetched (by this daemon, or by
// another one through Redis), unless the entry held was fetched later: a slow
// fetch sent before a push must not replace the answer of one sent after it (a
// webhook's or a hard refresh's revalidation).
func (l *ttlLayer[V]) storeAt(key string, v V, fetched time.Time) {
	l.storeMu.Lock()
	defer l.storeMu.Unlock()
	if cur := l.lookup(key); cur != nil && cur.fetched.After(fetched) {
		return
	}
	l.c.set(key, &entry[V]{val: v, fetched: fetched})
}

// fetch asks Redis, when the daemon shares a tier, before the registry: Redis
// answers with a value younger than the TTL and, when this daemon holds an entry
// (expired, or being refreshed ahead), younger than that entry; else the fetch
// runs, under the key's installation-wide lease. It returns the value and when it
// was fetched from the registry.
func (l *ttlLayer[V]) fetch(ctx context.Context, key string, old *entry[V], fetch fetchFunc[V]) (V, time.Time, error) {
	now := l.r.now()
	// A value younger than ours by a twentieth of the TTL comes from another
	// fetch; a smaller difference is the same fetch seen through Redis (its write
	// came a moment after the fetch, its TTL is counted in milliseconds).
	slack := l.ttl / 20
	return l.fetchAccepting(ctx, key, old, func(age time.Duration) bool {
		return age < l.ttl && (old == nil || age < now.Sub(old.fetched)-slack)
	}, fetch)
}

// fetchAccepting is fetch with the rule for a value found in Redis given: accept
// takes its age (since it was fetched from the registry). The time returned for
// a fetch of this daemon's is when it was sent: its answer may predate anything
// that happened while it ran (a push, and the revalidation that followed it).
func (l *ttlLayer[V]) fetchAccepting(ctx context.Context, key string, old *entry[V], accept func(age time.Duration) bool, fetch fetchFunc[V]) (V, time.Time, error) {
	rd := l.r.shared
	sent := l.r.now()
	if rd == nil || l.codec.parse == nil { // no shared tier, or a layer kept in memory only
		v, err := fetch(ctx, old)
		return v, sent, err
	}
	v, age, err := sharedFill(ctx, rd, l.name, key, l.ttl, l.codec, accept, func(ctx context.Context) (V, error) {
		sent = l.r.now() // after waiting on another replica's lease
		return fetch(ctx, old)
	})
	if age == 0 {
		return v, sent, err
	}
	return v, l.r.now().Add(-age), err
}

// refreshAhead starts a background refresh of an entry read in the last part of its
// TTL, once per entry: if it fails, the entry is fetched again when it expires.
func (l *ttlLayer[V]) refreshAhead(key, repoKey string, e *entry[V], now time.Time, fetch fetchFunc[V]) {
	frac := l.r.o.refreshAhead
	if frac <= 0 || now.Sub(e.fetched) < time.Duration(float64(l.ttl)*(1-frac)) {
		return
	}
	if !e.startRefresh() {
		return
	}
	select {
	case l.r.bgSem <- struct{}{}:
	default:
		e.cancelRefresh() // too many in flight: a later read tries again
		return
	}
	l.r.bg.Add(1)
	go func() {
		defer l.r.bg.Done()
		defer func() { <-l.r.bgSem }()
		_, err, _ := l.sf.Do(key, func() (any, error) {
			if cur := l.lookup(key); cur != nil && cur.fetched.After(e.fetched) {
				return cur.val, nil // refreshed already
			}
			fctx, cancel := l.r.fetchContext(repoKey)
			defer cancel()
			v, fetched, err := l.fetch(fctx, key, e, fetch)
			if err != nil {
				return nil, err
			}
			l.storeAt(key, v, fetched)
			return v, nil
		})
		result := "ok"
		if err != nil {
			result = "error"
		}
		l.r.m.RefreshAhead.WithLabelValues(l.name, result).Inc()
	}()
}

// revalidate makes sure key's entry was read from the registry at or after since
// (a webhook's push, a hard refresh): an older entry, or none, is fetched again
// now, the caller waiting for it. Unlike fill it never joins a fetch that may
// have started before since, and it takes a value from Redis only if it was
// fetched after since. A failed fetch leaves the entry as it was (it still
// answers, and stale-if-error applies when it expires) and returns the error.
func (l *ttlLayer[V]) revalidate(ctx context.Context, key, repoKey string, since time.Time, fetch fetchFunc[V]) error {
	// A flight joined may have started before since: then its answer is too old,
	// and one more flight (started after since) is needed.
	for range 2 {
		if e := l.lookup(key); e != nil && !e.fetched.Before(since) {
			return nil
		}
		ch := l.sf.DoChan(key+"\x00revalidate", func() (any, error) {
			old := l.lookup(key)
			if old != nil && !old.fetched.Before(since) {
				return nil, nil
			}
			fctx, cancel := l.r.fetchContext(repoKey)
			defer cancel()
			// The age is never less than the value's (valueAge): one fetched just
			// after since may be fetched again, one before it is never taken.
			accept := func(age time.Duration) bool { return age < l.ttl && !l.r.now().Add(-age).Before(since) }
			v, fetched, err := l.fetchAccepting(fctx, key, old, accept, fetch)
			result := "ok"
			if err != nil {
				result = "error"
			}
			l.r.m.Revalidations.WithLabelValues(l.name, result).Inc()
			if err != nil {
				return nil, err
			}
			if cur := l.lookup(key); cur == nil || cur.fetched.Before(fetched) {
				l.storeAt(key, v, fetched)
			}
			return nil, nil
		})
		select {
		case res := <-ch:
			if res.Err != nil {
				return res.Err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if e := l.lookup(key); e == nil || e.fetched.Before(since) {
		return fmt.Errorf("%s %s: not read again since %s", l.name, key, since.UTC().Format(time.RFC3339Nano))
	}
	return nil
}
