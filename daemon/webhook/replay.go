package webhook

import (
	"crypto/sha256"
	"sync"
	"time"
)

// replayKey names one delivery of one kind: the SHA-256 of the kind and the
// sender's delivery id (or of the body), so an entry has a fixed size whatever
// the sender sent.
type replayKey [sha256.Size]byte

func newReplayKey(kind, id string) replayKey {
	return sha256.Sum256([]byte(kind + "\x00" + id))
}

// replaySet remembers the deliveries of the last window, at most size of them:
// when full, the oldest is forgotten first. It is safe for concurrent use.
type replaySet struct {
	mu     sync.Mutex
	window time.Duration
	seen   map[replayKey]time.Time
	ring   []replayEntry // oldest at head, n of them
	head   int
	n      int
}

type replayEntry struct {
	key replayKey
	at  time.Time
}

func newReplaySet(window time.Duration, size int) *replaySet {
	return &replaySet{window: window, seen: make(map[replayKey]time.Time), ring: make([]replayEntry, size)}
}

// first reports whether key was not seen in the window before now, and
// remembers it as seen now if so.
func (s *replaySet) first(key replayKey, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.n > 0 && now.Sub(s.ring[s.head].at) >= s.window {
		s.forgetOldest()
	}
	if _, ok := s.seen[key]; ok {
		return false
	}
	if s.n == len(s.ring) {
		s.forgetOldest()
	}
	s.seen[key] = now
	s.ring[(s.head+s.n)%len(s.ring)] = replayEntry{key: key, at: now}
	s.n++
	return true
}

// forget drops key, seen at, so that the sender's retry of a delivery that
// could not be handed on is taken.
func (s *replaySet) forget(key replayKey, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seen, ok := s.seen[key]; ok && seen.Equal(at) {
		delete(s.seen, key)
	}
}

func (s *replaySet) forgetOldest() {
	// A key forgotten and seen again since has a later time: it stays.
	if e := s.ring[s.head]; s.seen[e.key].Equal(e.at) {
		delete(s.seen, e.key)
	}
	s.ring[s.head] = replayEntry{}
	s.head = (s.head + 1) % len(s.ring)
	s.n--
}

// len is how many deliveries are remembered.
func (s *replaySet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}
