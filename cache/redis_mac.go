package cache

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Values in Redis are authenticated when the daemons share a key (a Secret every
// replica mounts): each value carries an HMAC-SHA256 of the Redis key it is stored
// under and of the whole value, so that a writer to that Redis without the key can
// neither make up a value nor move a value to another key. A daemon with a key
// takes only values whose MAC is right under its key (or, for a while after a
// rotation, the previous one); a value without one is a miss, counted, and is
// overwritten by the daemon's own fetch.

// MinRedisMACKey is the shortest key accepted for the values' HMAC, in bytes.
const MinRedisMACKey = 32

const (
	macSize = sha256.Size
	// macReloadEvery is how often the key is read again (in monitor ticks, one
	// RetryInterval each), so that a rotated Secret is used without a restart.
	macReloadEvery = 10
	// macPreviousFor is how long the key before a rotation is still accepted: the
	// replicas see a rotated Secret at different times (the kubelet syncs volumes
	// about every minute), and values one of them signed with the new key must not
	// all be misses for the others in between.
	macPreviousFor = 5 * time.Minute
)

// Why a value read from Redis is not served (the reason label of
// cache_redis_rejected_total).
const (
	rejectUnauthenticated = "unauthenticated" // no MAC, and this daemon has a key
	rejectForged          = "forged"          // a MAC that is not right for this key and value
	rejectTooLarge        = "too-large"       // decompressed, more than a value may hold or the decode budget
	rejectCorrupt         = "corrupt"         // bad format, version, layer, shape or digest
	rejectBusy            = "busy"            // no decode budget within the lookup's wait
	rejectReplayed        = "replayed"        // written longer ago than its TTL: an old value written again
)

var rejectReasons = []string{rejectUnauthenticated, rejectForged, rejectTooLarge, rejectCorrupt, rejectBusy, rejectReplayed}

// maxClockSkew is how far the clocks of the daemons' pods may disagree before a
// value read just before it expires is taken for a replay.
const maxClockSkew = time.Minute

// macKeys is the key values are signed with, and the one before a rotation.
type macKeys struct {
	load func() ([]byte, error) // nil: values are not authenticated
	now  func() time.Time
	log  *slog.Logger
	cur  atomic.Pointer[macState]

	mu      sync.Mutex // serializes reloads
	lastErr string     // the reload error last logged, so that it is logged once
}

type macState struct {
	key, prev []byte
	prevUntil time.Time
}

// newMACKeys reads the key once (an error, or a key shorter than MinRedisMACKey,
// stops the tier from being built); nil load: no key.
func newMACKeys(load func() ([]byte, error), log *slog.Logger) (*macKeys, error) {
	k := &macKeys{load: load, now: time.Now, log: log}
	if load == nil {
		return k, nil
	}
	key, err := readMACKey(load)
	if err != nil {
		return nil, err
	}
	k.cur.Store(&macState{key: key})
	return k, nil
}

func readMACKey(load func() ([]byte, error)) ([]byte, error) {
	key, err := load()
	if err != nil {
		return nil, fmt.Errorf("redis MAC key: %w", err)
	}
	if len(key) < MinRedisMACKey {
		return nil, fmt.Errorf("redis MAC key: %d bytes, want at least %d", len(key), MinRedisMACKey)
	}
	return bytes.Clone(key), nil
}

// on reports whether values are signed and checked.
func (k *macKeys) on() bool { return k.load != nil }

// reload reads the key again; a new key signs from now on and the previous one
// is still accepted for macPreviousFor. A key that cannot be read is logged once
// (never its content) and the current one kept.
func (k *macKeys) reload() {
	if !k.on() {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	key, err := readMACKey(k.load)
	if err != nil {
		if msg := err.Error(); msg != k.lastErr {
			k.lastErr = msg
			k.log.Warn("redis MAC key not reloaded; signing with the key read before", "err", msg)
		}
		return
	}
	k.lastErr = ""
	st := k.cur.Load()
	if hmac.Equal(key, st.key) {
		return
	}
	k.cur.Store(&macState{key: key, prev: st.key, prevUntil: k.now().Add(macPreviousFor)})
	k.log.Info("redis MAC key changed: signing with the new key, accepting the previous one for a while", "for", macPreviousFor)
}

// macOf is the MAC of the value v stored under the Redis key rkey: the key's
// length and bytes, then the value without its MAC field (bytes macAt to
// macAt+macSize).
func macOf(key []byte, rkey string, v []byte) []byte {
	h := hmac.New(sha256.New, key)
	var n [binary.MaxVarintLen64]byte
	h.Write(binary.AppendUvarint(n[:0], uint64(len(rkey))))
	h.Write([]byte(rkey))
	h.Write(v[:macAt])
	h.Write(v[macAt+macSize:])
	return h.Sum(nil)
}

// sign fills the MAC field of v, a value encoded with room for it, for rkey.
func (k *macKeys) sign(rkey string, v []byte) {
	copy(v[macAt:macAt+macSize], macOf(k.cur.Load().key, rkey, v))
}

// check returns why v, read from rkey, is not authentic ("" when it is, or when
// there is no key). hasMAC says whether v has a MAC field.
func (k *macKeys) check(rkey string, v []byte, hasMAC bool) string {
	if !k.on() {
		return ""
	}
	if !hasMAC {
		return rejectUnauthenticated
	}
	st := k.cur.Load()
	got := v[macAt : macAt+macSize]
	if hmac.Equal(got, macOf(st.key, rkey, v)) {
		return ""
	}
	if st.prev != nil && k.now().Before(st.prevUntil) && hmac.Equal(got, macOf(st.prev, rkey, v)) {
		return ""
	}
	return rejectForged
}
