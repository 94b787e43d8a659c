package cache

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Signature verdicts (resolve.VerdictCache): whether a digest satisfies a
// signature requirement, as the signature verifier decided it, kept for the TTL
// the verifier gives (shorter for a failure than for a success) in memory, and
// shared through the Redis tier when there is one, so that one daemon of an
// installation verifies a digest for all. A warm lookup is answered from memory
// without a round trip; a lookup that misses memory costs one (a script reading
// the value and its remaining TTL), and what Redis holds is kept in memory for
// that remaining TTL only. Redis down, slow or holding a malformed value: the
// lookup is a miss (the verifier checks again), counted and logged by the Redis
// tier; it never fails a resolution.

// LayerVerdict is the layer label of the verdict cache's metrics (memory:
// cache_hits_total, cache_misses_total, cache_evictions_total; Redis:
// cache_redis_hits_total, cache_redis_misses_total, cache_redis_rejected_total).
const LayerVerdict = "verdict"

// Verdict cache bounds.
const (
	// DefaultVerdictEntries bounds the verdicts held in memory.
	DefaultVerdictEntries = 10000
	// MaxVerdictTTL caps the TTL of a verdict; a longer one is shortened to it.
	MaxVerdictTTL = 30 * 24 * time.Hour
	// maxVerdictKey is the longest key stored as it is; a longer one is stored by
	// its sha256.
	maxVerdictKey = 200
	// maxVerdictValue bounds a verdict's JSON (its reason and names).
	maxVerdictValue = 16 << 10
)

// VerdictOptions configure a verdict cache.
type VerdictOptions struct {
	// Redis shares verdicts between daemons (nil: memory only). The cache does not
	// close it.
	Redis *Redis
	// Metrics records lookups (nil: metrics of its own). Give the Metrics the
	// Redis tier records into.
	Metrics *Metrics
	// MaxEntries bounds the verdicts held in memory (default
	// DefaultVerdictEntries); the least recently used go first.
	MaxEntries int
	// Now is the memory layer's clock (default time.Now).
	Now func() time.Time
}

// Verdicts is a resolve.VerdictCache in memory, in front of the Redis tier when
// it has one. Safe for concurrent use.
type Verdicts struct {
	rd  *Redis
	m   *Metrics
	now func() time.Time
	mem *verdictMemory
}

var _ resolve.VerdictCache = (*Verdicts)(nil)

// NewVerdicts returns a verdict cache.
func NewVerdicts(o VerdictOptions) *Verdicts {
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultVerdictEntries
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Metrics.CacheHits.WithLabelValues(LayerVerdict)
	o.Metrics.CacheMisses.WithLabelValues(LayerVerdict)
	o.Metrics.Evictions.WithLabelValues(LayerVerdict)
	if o.Redis != nil {
		o.Redis.m.hits.WithLabelValues(LayerVerdict)
		o.Redis.m.misses.WithLabelValues(LayerVerdict)
		for _, reason := range rejectReasons {
			o.Redis.m.rejected.WithLabelValues(LayerVerdict, reason)
		}
	}
	return &Verdicts{rd: o.Redis, m: o.Metrics, now: o.Now, mem: newVerdictMemory(o.MaxEntries)}
}

// storeKey is key as stored: itself when short, else its sha256 (verdict keys
// hold a requirement, whose identity expressions can be long).
func storeKey(key string) string {
	if len(key) <= maxVerdictKey {
		return "k:" + key
	}
	sum := sha256.Sum256([]byte(key))
	return "h:" + hex.EncodeToString(sum[:])
}

// GetVerdict returns the verdict kept for key: from memory, else from Redis.
func (v *Verdicts) GetVerdict(ctx context.Context, key string) (resolve.Verdict, bool) {
	sk := storeKey(key)
	now := v.now()
	if vd, ok := v.mem.get(sk, now); ok {
		v.m.CacheHits.WithLabelValues(LayerVerdict).Inc()
		return vd, true
	}
	v.m.CacheMisses.WithLabelValues(LayerVerdict).Inc()
	if !v.rd.Up() {
		return resolve.Verdict{}, false
	}
	vd, ttl, ok := v.rd.getVerdict(ctx, sk)
	if !ok {
		return resolve.Verdict{}, false
	}
	v.mem.set(sk, vd, now.Add(ttl))
	return vd, true
}

// SetVerdict keeps a verdict for ttl (at most MaxVerdictTTL), in memory and in
// Redis. A ttl that is not positive keeps nothing, nor does a verdict that says
// neither who signed nor why not (or both).
func (v *Verdicts) SetVerdict(ctx context.Context, key string, vd resolve.Verdict, ttl time.Duration) {
	if ttl <= 0 || checkVerdict(vd) != nil {
		return
	}
	ttl = min(ttl, MaxVerdictTTL)
	sk := storeKey(key)
	if v.mem.set(sk, vd, v.now().Add(ttl)) {
		v.m.Evictions.WithLabelValues(LayerVerdict).Inc()
	}
	if v.rd.Up() {
		v.rd.setVerdict(context.WithoutCancel(ctx), sk, vd, ttl)
	}
}

// verdictScript returns a value and its remaining TTL in ms: {value or "", pttl}.
const verdictScript = `local v = redis.call("GET", KEYS[1])
if not v then return {"", -2} end
return {v, redis.call("PTTL", KEYS[1])}`

// getVerdict reads a verdict and its remaining TTL in one round trip; a failure,
// an absent or a rejected value (forged, malformed...) is a miss (counted, and
// logged when rejected).
func (r *Redis) getVerdict(ctx context.Context, sk string) (resolve.Verdict, time.Duration, bool) {
	// EVAL rather than EVALSHA: one round trip always (Redis caches the script)
	rkey := r.valueKey(LayerVerdict, sk)
	res, err := r.c.Eval(ctx, verdictScript, []string{rkey}).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("redis verdict lookup: %d results, want 2", len(res))
	}
	if err != nil {
		r.failed(ctx, redisOpRead, err)
		return resolve.Verdict{}, 0, false
	}
	raw, _ := res[0].(string)
	pttl, _ := res[1].(int64)
	if raw == "" || pttl <= 0 {
		r.m.misses.WithLabelValues(LayerVerdict).Inc()
		return resolve.Verdict{}, 0, false
	}
	vd, wttl, reason, err := decodeFrom(ctx, r, verdictCodec, rkey, sk, []byte(raw))
	if reason != "" {
		r.rejected(LayerVerdict, sk, reason, err) // the verifier checks again
		return resolve.Verdict{}, 0, false
	}
	r.m.hits.WithLabelValues(LayerVerdict).Inc()
	return vd, min(time.Duration(pttl)*time.Millisecond, wttl), true
}

// setVerdict writes a verdict with its TTL.
func (r *Redis) setVerdict(ctx context.Context, sk string, vd resolve.Verdict, ttl time.Duration) {
	rkey := r.valueKey(LayerVerdict, sk)
	val, ok := encodeFor(r, verdictCodec, rkey, sk, vd, ttl)
	if !ok {
		return
	}
	if err := r.c.Set(ctx, rkey, val, ttl).Err(); err != nil {
		r.failed(ctx, redisOpWrite, err)
	}
}

var verdictCodec = valueCodec[resolve.Verdict]{
	layer: 'v',
	max:   maxVerdictValue,
	payload: func(_ string, vd resolve.Verdict) ([]byte, bool) {
		if checkVerdict(vd) != nil {
			return nil, false
		}
		b, err := json.Marshal(vd)
		return b, err == nil && len(b) <= maxVerdictValue
	},
	parse: func(_ string, p []byte) (resolve.Verdict, error) {
		var vd resolve.Verdict
		if len(p) > maxVerdictValue {
			return vd, fmt.Errorf("verdict of %d bytes", len(p))
		}
		dec := json.NewDecoder(bytes.NewReader(p))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&vd); err != nil {
			return resolve.Verdict{}, err
		}
		if dec.More() {
			return resolve.Verdict{}, errors.New("data after the verdict")
		}
		return vd, checkVerdict(vd)
	},
}

// checkVerdict accepts a verdict that says one thing: who signed, or why not.
func checkVerdict(vd resolve.Verdict) error {
	switch {
	case (vd.Verified == nil) == (vd.Reason == ""):
		return errors.New("a verdict has a signer or a reason, and not both")
	case vd.Verified == nil:
		if !utf8.ValidString(vd.Reason) {
			return errors.New("reason is not UTF-8")
		}
		return nil
	}
	s := vd.Verified
	if (s.Key == "") == (s.Identity == "" || s.Issuer == "") {
		return errors.New("a signer is a key or an identity with its issuer")
	}
	if err := resolve.CheckDigest(s.Digest); err != nil {
		return fmt.Errorf("signed digest: %v", err)
	}
	for _, f := range []string{s.Identity, s.Issuer, s.Key, s.Source} {
		if !utf8.ValidString(f) {
			return errors.New("signer is not UTF-8")
		}
	}
	return nil
}

// verdictMemory is the memory layer: least recently used verdicts, each until
// its own expiry, at most max of them.
type verdictMemory struct {
	mu    sync.Mutex
	max   int
	ll    *list.List // front: most recently used
	items map[string]*list.Element
}

type verdictItem struct {
	key     string
	vd      resolve.Verdict
	expires time.Time
}

func newVerdictMemory(maxEntries int) *verdictMemory {
	return &verdictMemory{max: maxEntries, ll: list.New(), items: map[string]*list.Element{}}
}

// get returns an unexpired verdict and marks it used; an expired one is dropped.
func (m *verdictMemory) get(key string, now time.Time) (resolve.Verdict, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.items[key]
	if !ok {
		return resolve.Verdict{}, false
	}
	it := el.Value.(*verdictItem)
	if !now.Before(it.expires) {
		m.ll.Remove(el)
		delete(m.items, key)
		return resolve.Verdict{}, false
	}
	m.ll.MoveToFront(el)
	return it.vd, true
}

// set keeps a verdict until expires; it reports whether another was evicted to
// make room.
func (m *verdictMemory) set(key string, vd resolve.Verdict, expires time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.items[key]; ok {
		it := el.Value.(*verdictItem)
		it.vd, it.expires = vd, expires
		m.ll.MoveToFront(el)
		return false
	}
	m.items[key] = m.ll.PushFront(&verdictItem{key: key, vd: vd, expires: expires})
	if m.ll.Len() <= m.max {
		return false
	}
	el := m.ll.Back()
	m.ll.Remove(el)
	delete(m.items, el.Value.(*verdictItem).key)
	return true
}

// len is the number of verdicts held, expired ones not yet dropped included.
func (m *verdictMemory) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ll.Len()
}
