package cache

import (
	"strings"
	"sync"
	"time"
	"weak"
)

// ttlStore holds a TTL layer's entries, as go-cache did before it, in less memory:
// an entry is dropped ttl+staleFor after it was stored, by the wall clock (get
// stops returning it then; a janitor deletes it every cleanup interval), while
// the layer decides freshness by the Registry's clock.
//
// The heads layer has one entry per tag (100,000 in a large view), keyed
// "<repository>:<tag>". go-cache kept each under its whole key (about 60 bytes)
// beside an interface-typed item; here, with grouped, such keys are split at
// their last colon (tags have none): the repository is kept once, each tag under
// it, and the map holds the *entry itself.
type ttlStore[V any] struct {
	mu      sync.RWMutex
	expiry  time.Duration // after storing; <= 0: never
	grouped bool
	flat    map[string]*entry[V]            // keys without a colon, or every key when not grouped
	groups  map[string]map[string]*entry[V] // grouped keys: prefix -> suffix -> entry
	n       int                             // entries in groups
}

func newTTLStore[V any](expiry time.Duration, grouped bool) *ttlStore[V] {
	return &ttlStore[V]{expiry: expiry, grouped: grouped, flat: map[string]*entry[V]{}, groups: map[string]map[string]*entry[V]{}}
}

// split returns where key goes: its group and its name in it, or ok false for
// the flat map. The split is at the last colon, so that prefix+":"+suffix is the
// key again and no two keys meet.
func (s *ttlStore[V]) split(key string) (prefix, suffix string, ok bool) {
	if !s.grouped {
		return "", "", false
	}
	i := strings.LastIndexByte(key, ':')
	if i < 0 {
		return "", "", false
	}
	return key[:i], key[i+1:], true
}

// get returns key's entry, nil when there is none or it expired.
func (s *ttlStore[V]) get(key string) *entry[V] {
	var e *entry[V]
	s.mu.RLock()
	if p, sfx, ok := s.split(key); ok {
		e = s.groups[p][sfx]
	} else {
		e = s.flat[key]
	}
	s.mu.RUnlock()
	if e == nil || e.expiredAt(time.Now().UnixNano()) {
		return nil
	}
	return e
}

// set stores e under key, replacing what was there, to expire after the store's
// expiry from now.
func (s *ttlStore[V]) set(key string, e *entry[V]) {
	var exp int64
	if s.expiry > 0 {
		exp = time.Now().Add(s.expiry).UnixNano()
	}
	e.setExpiry(exp)
	p, sfx, ok := s.split(key)
	// The keys kept are copies: key may be a part of a larger string (a request's),
	// and a map keeps the key of its latest assignment.
	if !ok {
		key = strings.Clone(key)
	} else {
		sfx = strings.Clone(sfx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		s.flat[key] = e
		return
	}
	g := s.groups[p]
	if g == nil {
		g = map[string]*entry[V]{}
		s.groups[strings.Clone(p)] = g
	}
	if _, had := g[sfx]; !had {
		s.n++
	}
	g[sfx] = e
}

// delete removes key's entry, if any.
func (s *ttlStore[V]) delete(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, sfx, ok := s.split(key)
	if !ok {
		delete(s.flat, key)
		return
	}
	g := s.groups[p]
	if _, had := g[sfx]; !had {
		return
	}
	delete(g, sfx)
	s.n--
	if len(g) == 0 {
		delete(s.groups, p)
	}
}

// ItemCount returns how many entries are held, expired ones the janitor has not
// deleted yet included (as go-cache counted).
func (s *ttlStore[V]) ItemCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.flat) + s.n
}

// Flush deletes every entry.
func (s *ttlStore[V]) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flat, s.groups, s.n = map[string]*entry[V]{}, map[string]map[string]*entry[V]{}, 0
}

// deleteExpired deletes the entries that expired.
func (s *ttlStore[V]) deleteExpired() {
	now := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.flat {
		if e.expiredAt(now) {
			delete(s.flat, k)
		}
	}
	for p, g := range s.groups {
		for k, e := range g {
			if e.expiredAt(now) {
				delete(g, k)
				s.n--
			}
		}
		if len(g) == 0 {
			delete(s.groups, p)
		}
	}
}

// janitor deletes s's expired entries every interval until done is closed or s
// is no longer used: it holds s weakly, so that a Registry dropped without Close
// does not keep its entries (go-cache stopped its janitor by a finalizer).
func janitor[V any](s *ttlStore[V], interval time.Duration, done <-chan struct{}) {
	if interval <= 0 {
		return
	}
	wp := weak.Make(s)
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			s := wp.Value()
			if s == nil {
				return
			}
			s.deleteExpired()
		}
	}()
}
