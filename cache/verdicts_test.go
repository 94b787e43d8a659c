package cache

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

const signedDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000001"

var (
	signed = resolve.Verdict{Verified: &resolve.Verified{Identity: "https://github.com/org/web/.github/workflows/release.yml@refs/heads/main",
		Issuer: "https://token.actions.githubusercontent.com", Digest: signedDigest, Source: "referrers"}}
	keySigned = resolve.Verdict{Verified: &resolve.Verified{Key: "release", Digest: signedDigest, Source: "cosign-tag"}}
	unsigned  = resolve.Verdict{Reason: "no signature (referrers API, sha256-0001, sha256-0001.sig)"}
)

// commandCounter counts the commands a Redis client sends, by name (the tier's
// own connection handshakes, resubscriptions and health-check pings left out).
type commandCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "ping", "hello", "auth", "client", "subscribe", "select":
		default:
			c.mu.Lock()
			c.n[cmd.Name()]++
			c.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

// take returns the counts since the last call.
func (c *commandCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// verdictDaemon is one daemon's verdict cache over a shared Redis.
type verdictDaemon struct {
	v     *Verdicts
	rd    *Redis
	m     *Metrics
	clock *fakeClock
	cmds  *commandCounter
}

func newVerdictDaemon(t *testing.T, addr string, timeout time.Duration, maxEntries int) *verdictDaemon {
	t.Helper()
	m := NewMetrics()
	d := &verdictDaemon{m: m, clock: newFakeClock(), cmds: &commandCounter{n: map[string]int{}}}
	if addr != "" {
		rd, err := NewRedis(RedisOptions{Addr: addr, Timeout: timeout, DialTimeout: timeout, Logger: slog.New(slog.DiscardHandler)}, m)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rd.Close() })
		rd.c.AddHook(d.cmds)
		d.rd = rd
	}
	d.v = NewVerdicts(VerdictOptions{Redis: d.rd, Metrics: m, MaxEntries: maxEntries, Now: d.clock.Now})
	return d
}

// want checks a lookup's answer and the Redis commands it took.
func (d *verdictDaemon) want(t *testing.T, what, key string, want *resolve.Verdict, cmds map[string]int) {
	t.Helper()
	got, ok := d.v.GetVerdict(context.Background(), key)
	switch {
	case want == nil && ok:
		t.Errorf("%s: %+v, want a miss", what, got)
	case want != nil && !ok:
		t.Errorf("%s: a miss, want %+v", what, *want)
	case want != nil && (got.Reason != want.Reason || (got.Verified == nil) != (want.Verified == nil) ||
		(got.Verified != nil && *got.Verified != *want.Verified)):
		t.Errorf("%s: %+v, want %+v", what, got, *want)
	}
	if n := d.cmds.take(); len(n) != len(cmds) || !mapsEqual(n, cmds) {
		t.Errorf("%s: redis commands %v, want %v", what, n, cmds)
	}
}

func mapsEqual(a, b map[string]int) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) == len(b)
}

var (
	oneRead  = map[string]int{"eval": 1}
	noRedis  = map[string]int{}
	oneWrite = map[string]int{"set": 1}
)

// advance moves every daemon's clock and the Redis server's key TTLs on by d.
func advance(t *testing.T, rs *redistest.Server, d time.Duration, daemons ...*verdictDaemon) {
	t.Helper()
	for _, dm := range daemons {
		dm.clock.Advance(d)
	}
	rs.Advance(t, d)
}

// TestVerdictsSharedThroughRedis: two daemons sharing one Redis see each other's
// verdicts; a lookup costs one Redis round trip cold and none warm.
func TestVerdictsSharedThroughRedis(t *testing.T) {
	rs := redistest.Start(t)
	a := newVerdictDaemon(t, rs.Addr, healthyRedisTimeout, 0)
	b := newVerdictDaemon(t, rs.Addr, healthyRedisTimeout, 0)
	ctx := context.Background()

	a.v.SetVerdict(ctx, "ghcr.io/org/web@"+signedDigest+"|keyless", signed, time.Hour)
	a.v.SetVerdict(ctx, "ghcr.io/org/web@"+signedDigest+"|key:release", keySigned, time.Hour)
	if n := a.cmds.take(); n["set"] != 2 || len(n) != 1 {
		t.Errorf("two verdicts set: redis commands %v, want 2 SETs", n)
	}
	a.want(t, "a, its own verdict", "ghcr.io/org/web@"+signedDigest+"|keyless", &signed, noRedis)
	b.want(t, "b, a's verdict, cold", "ghcr.io/org/web@"+signedDigest+"|keyless", &signed, oneRead)
	b.want(t, "b, a's verdict, warm", "ghcr.io/org/web@"+signedDigest+"|keyless", &signed, noRedis)
	b.want(t, "b, a's key verdict", "ghcr.io/org/web@"+signedDigest+"|key:release", &keySigned, oneRead)
	b.want(t, "b, another requirement", "ghcr.io/org/web@"+signedDigest+"|key:other", nil, oneRead)

	b.v.SetVerdict(ctx, "ghcr.io/org/api@"+signedDigest+"|keyless", unsigned, time.Minute)
	b.cmds.take()
	a.want(t, "a, b's failure", "ghcr.io/org/api@"+signedDigest+"|keyless", &unsigned, oneRead)

	// A long key (a requirement with long expressions) is stored by its hash.
	long := "ghcr.io/org/web@" + signedDigest + "|keyless:" + strings.Repeat("regexp:^https://github.com/org/", 40)
	a.v.SetVerdict(ctx, long, signed, time.Hour)
	a.cmds.take()
	b.want(t, "b, a long key", long, &signed, oneRead)
	b.want(t, "b, another long key", long+"x", nil, oneRead)
	keys, err := newRedisClient(t, rs.Addr).Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, DefaultRedisKeyPrefix+redisValueFormat+":verdict:") || len(k) > len(DefaultRedisKeyPrefix)+len(redisValueFormat+":verdict:k:")+maxVerdictKey {
			t.Errorf("redis key %q (%d bytes)", k, len(k))
		}
	}
	if len(keys) != 4 {
		t.Errorf("%d keys in redis, want 4: %q", len(keys), keys)
	}
	for _, d := range []*verdictDaemon{a, b} {
		rm := d.rd.m
		if e := testutil.ToFloat64(rm.errors.WithLabelValues(redisOpRead)) + testutil.ToFloat64(rm.errors.WithLabelValues(redisOpWrite)); e != 0 {
			t.Errorf("redis errors: %v", e)
		}
	}
	if h, m := testutil.ToFloat64(b.rd.m.hits.WithLabelValues(LayerVerdict)), testutil.ToFloat64(b.rd.m.misses.WithLabelValues(LayerVerdict)); h != 3 || m != 2 {
		t.Errorf("b: redis verdict hits %v, misses %v; want 3, 2", h, m)
	}
	if h := testutil.ToFloat64(b.m.CacheHits.WithLabelValues(LayerVerdict)); h != 1 {
		t.Errorf("b: memory verdict hits %v, want 1", h)
	}
}

// TestVerdictsTTL: a verdict lives for the TTL its writer gave, in every daemon's
// memory and in Redis; a failure with a short TTL expires first.
func TestVerdictsTTL(t *testing.T) {
	rs := redistest.Start(t)
	a := newVerdictDaemon(t, rs.Addr, healthyRedisTimeout, 0)
	b := newVerdictDaemon(t, rs.Addr, healthyRedisTimeout, 0)
	ctx := context.Background()
	const ok, failed = "ghcr.io/org/web@sha256:01|keyless", "ghcr.io/org/web@sha256:02|keyless"
	a.v.SetVerdict(ctx, ok, signed, time.Hour)
	a.v.SetVerdict(ctx, failed, unsigned, 5*time.Minute)
	a.cmds.take()
	b.want(t, "b, success", ok, &signed, oneRead)
	b.want(t, "b, failure", failed, &unsigned, oneRead)

	advance(t, rs, 4*time.Minute, a, b)
	b.want(t, "b, failure at 4m", failed, &unsigned, noRedis)
	advance(t, rs, 2*time.Minute, a, b)
	a.want(t, "a, failure at 6m", failed, nil, oneRead)
	b.want(t, "b, failure at 6m", failed, nil, oneRead)
	a.want(t, "a, success at 6m", ok, &signed, noRedis)
	b.want(t, "b, success at 6m", ok, &signed, noRedis)

	// A daemon that reads the success later keeps it for what remains of its TTL.
	c := newVerdictDaemon(t, rs.Addr, healthyRedisTimeout, 0)
	advance(t, rs, 30*time.Minute, a, b, c)
	c.want(t, "c, success at 36m", ok, &signed, oneRead)
	advance(t, rs, 23*time.Minute, a, b, c)
	c.want(t, "c, success at 59m", ok, &signed, noRedis)
	advance(t, rs, 2*time.Minute, a, b, c)
	for _, d := range []*verdictDaemon{a, b, c} {
		d.want(t, "success at 61m", ok, nil, oneRead)
	}

	// No TTL, no verdict; a TTL beyond the cap is capped.
	a.v.SetVerdict(ctx, "zero", signed, 0)
	a.v.SetVerdict(ctx, "capped", signed, 365*24*time.Hour)
	if n := a.cmds.take(); !mapsEqual(n, oneWrite) {
		t.Errorf("zero and capped TTL: redis commands %v, want one SET", n)
	}
	a.want(t, "zero TTL", "zero", nil, oneRead)
	if ttl := newRedisClient(t, rs.Addr).PTTL(ctx, DefaultRedisKeyPrefix+redisValueFormat+":verdict:k:capped").Val(); ttl <= MaxVerdictTTL-time.Minute || ttl > MaxVerdictTTL {
		t.Errorf("capped TTL %v, want %v", ttl, MaxVerdictTTL)
	}
}

// TestVerdictsRedisDown: with Redis gone a daemon keeps and answers verdicts from
// memory, counting the failures; nothing fails.
func TestVerdictsRedisDown(t *testing.T) {
	rs := redistest.Start(t)
	a := newVerdictDaemon(t, rs.Addr, 200*time.Millisecond, 0)
	ctx := context.Background()
	a.v.SetVerdict(ctx, "before", signed, time.Hour)
	a.cmds.take()
	rs.Stop()

	a.want(t, "kept before", "before", &signed, noRedis)
	if _, ok := a.v.GetVerdict(ctx, "unknown"); ok { // the failed read opens the circuit
		t.Error("unknown key answered with Redis down")
	}
	a.cmds.take()
	a.v.SetVerdict(ctx, "after", unsigned, time.Minute)
	a.want(t, "set with redis down", "after", &unsigned, noRedis)
	a.want(t, "unknown, circuit open", "unknown2", nil, noRedis)
	if e, up := testutil.ToFloat64(a.rd.m.errors.WithLabelValues(redisOpRead)), testutil.ToFloat64(a.rd.m.up); e != 1 || up != 0 {
		t.Errorf("redis read errors %v, up %v; want 1, 0", e, up)
	}
}

// TestVerdictsMemory: without Redis the cache keeps verdicts in memory, at most
// MaxEntries, the least recently used evicted first, each until its TTL.
func TestVerdictsMemory(t *testing.T) {
	d := newVerdictDaemon(t, "", 0, 2)
	ctx := context.Background()
	d.v.SetVerdict(ctx, "a", signed, time.Hour)
	d.v.SetVerdict(ctx, "b", unsigned, time.Minute)
	d.want(t, "a", "a", &signed, nil)
	d.v.SetVerdict(ctx, "c", keySigned, time.Hour) // b is the least recently used
	d.want(t, "b evicted", "b", nil, nil)
	d.want(t, "a kept", "a", &signed, nil)
	d.want(t, "c kept", "c", &keySigned, nil)
	if e := testutil.ToFloat64(d.m.Evictions.WithLabelValues(LayerVerdict)); e != 1 {
		t.Errorf("evictions %v, want 1", e)
	}
	d.clock.Advance(time.Hour)
	d.want(t, "a expired", "a", nil, nil)
	if n := d.v.mem.len(); n != 1 {
		t.Errorf("%d verdicts held after an expired one was read, want 1", n)
	}
	// A verdict that says nothing, or two things, is not kept.
	d.v.SetVerdict(ctx, "empty", resolve.Verdict{}, time.Hour)
	d.v.SetVerdict(ctx, "both", resolve.Verdict{Verified: signed.Verified, Reason: "x"}, time.Hour)
	d.want(t, "empty verdict", "empty", nil, nil)
	d.want(t, "verdict with both", "both", nil, nil)
}

// TestVerdictsMalformedInRedis: a value in Redis that is not a verdict is a miss,
// counted, and the verifier's next verdict replaces it.
func TestVerdictsMalformedInRedis(t *testing.T) {
	rs := redistest.Start(t)
	a := newVerdictDaemon(t, rs.Addr, healthyRedisTimeout, 0)
	ctx := context.Background()
	c := newRedisClient(t, rs.Addr)
	key := DefaultRedisKeyPrefix + redisValueFormat + ":verdict:k:"
	bad := map[string][]byte{
		"garbage": []byte("garbage"),
		"layer":   mustEncode(t, tagsCodec, "x", []string{"1.0"}),
		"neither": rawVerdict(t, `{}`),
		"both":    rawVerdict(t, `{"verified": {"key": "k", "digest": "`+signedDigest+`", "source": "referrers"}, "reason": "x"}`),
		"digest":  rawVerdict(t, `{"verified": {"key": "k", "digest": "sha256:short", "source": "referrers"}}`),
		"unknown": rawVerdict(t, `{"reason": "x", "extra": 1}`),
	}
	for name, v := range bad {
		if err := c.Set(ctx, key+name, v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		a.want(t, "malformed "+name, name, nil, oneRead)
	}
	if n := testutil.ToFloat64(a.rd.m.rejected.WithLabelValues(LayerVerdict, rejectCorrupt)); n != float64(len(bad)) {
		t.Errorf("rejected as corrupt %v, want %d", n, len(bad))
	}
	a.v.SetVerdict(ctx, "garbage", signed, time.Hour)
	b := newVerdictDaemon(t, rs.Addr, healthyRedisTimeout, 0)
	b.want(t, "replaced", "garbage", &signed, oneRead)
}

func mustEncode[V any](t *testing.T, c valueCodec[V], key string, v V) []byte {
	t.Helper()
	b, ok := c.encode(key, v, time.Hour, false)
	if !ok {
		t.Fatal("encode refused")
	}
	return b
}

// rawVerdict encodes a verdict payload as the codec would, unchecked.
func rawVerdict(t *testing.T, payload string) []byte {
	t.Helper()
	c := verdictCodec
	c.payload = func(string, resolve.Verdict) ([]byte, bool) { return []byte(payload), true }
	return mustEncode(t, c, "", resolve.Verdict{})
}

// BenchmarkVerdicts: a warm lookup (memory) and a cold one (memory missed, one
// Redis round trip on loopback).
func BenchmarkVerdicts(b *testing.B) {
	rs := redistest.Start(b)
	m := NewMetrics()
	rd, err := NewRedis(RedisOptions{Addr: rs.Addr, Timeout: healthyRedisTimeout, DialTimeout: healthyRedisTimeout, Logger: slog.New(slog.DiscardHandler)}, m)
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	ctx := context.Background()
	writer := NewVerdicts(VerdictOptions{Redis: rd, Metrics: m})
	const key = "ghcr.io/org/web@" + signedDigest + `|keyless:["regexp:^https://github.com/org/"]|["https://token.actions.githubusercontent.com"]`
	writer.SetVerdict(ctx, key, signed, time.Hour)
	b.Run("warm", func(b *testing.B) {
		for b.Loop() {
			if _, ok := writer.GetVerdict(ctx, key); !ok {
				b.Fatal("miss")
			}
		}
	})
	b.Run("redis", func(b *testing.B) {
		for b.Loop() {
			reader := NewVerdicts(VerdictOptions{Redis: rd, Metrics: m, MaxEntries: 1})
			if _, ok := reader.GetVerdict(ctx, key); !ok {
				b.Fatal("miss")
			}
		}
	})
}
