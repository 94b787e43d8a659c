package cache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
)

// newTier is a tier on a real redis-server with the test key, alone (no
// Registry): for tests of sharedFill itself.
func newTier(t *testing.T, addr string, ro RedisOptions) *Redis {
	t.Helper()
	ro.Addr, ro.MACKey, ro.Logger = addr, keyFunc(testMACKey), slog.New(slog.DiscardHandler)
	if ro.Timeout == 0 {
		ro.Timeout, ro.DialTimeout = healthyRedisTimeout, healthyRedisTimeout
	}
	rd, err := NewRedis(ro, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	return rd
}

// blobOf is a config blob and its digest, the key content is stored under.
func blobOf(i int) ([]byte, string) {
	b := fmt.Appendf(nil, `{"config":{},"n":%d}`, i)
	sum := sha256.Sum256(b)
	return b, "sha256:" + hex.EncodeToString(sum[:])
}

// heapPeak samples the live heap every millisecond until stop is called, and
// returns its highest value.
func heapPeak() (stop func() uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	return func() uint64 { close(done); wg.Wait(); return peak.Load() }
}

// Values decoded at once hold at most the decode budget together: eight lookups
// of values (signed by a key holder) that each announce 40 MiB and expand to
// 1 GiB take their bytes in turn, three at a time within 128 MiB, each refused
// as too large, each then fetched.
func TestRedisDecodeBudgetIsProcessWide(t *testing.T) {
	rs := redistest.Start(t)
	// The lookups take the budget in turn: the wait for it (the tier's timeout)
	// is long enough for all of them on a slow machine or under -race, where
	// eight decodes take seconds; past it a lookup would count busy, not too-large.
	rd := newTier(t, rs.Addr, RedisOptions{Timeout: time.Minute, DialTimeout: healthyRedisTimeout})
	c := newRedisClient(t, rs.Addr)
	ctx := context.Background()
	const n, announced = 8, 40 << 20
	bomb := rleBomb(8192, 'a')
	for i := range n {
		_, key := blobOf(i)
		rkey := rd.valueKey(LayerBlob, key)
		if err := c.Set(ctx, rkey, signedRaw(testMACKey, rkey, storedRaw('b', authHMAC, nil, 0, announced, bomb)), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// collect often, so that the heap measured is what is held, not garbage
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	var fetches atomic.Int32
	runtime.GC()
	base := heapPeak()()
	stop := heapPeak()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			b, key := blobOf(i)
			got, _, err := sharedFill(ctx, rd, LayerBlob, key, time.Hour, blobCodec, func(time.Duration) bool { return true },
				func(context.Context) ([]byte, error) { fetches.Add(1); return b, nil })
			if err != nil || string(got) != string(b) {
				t.Errorf("blob %d: %q %v", i, got, err)
			}
		})
	}
	wg.Wait()
	peak := stop()
	t.Logf("%d bombs of %d MiB announced decoded in %v: live heap peak %.0f MiB over %.0f MiB before; budget peak %.0f MiB of %d MiB",
		n, announced>>20, time.Since(start).Round(time.Millisecond), float64(peak)/(1<<20), float64(base)/(1<<20),
		float64(rd.budget.peak.Load())/(1<<20), DefaultRedisDecodeMemory>>20)
	if got := fetches.Load(); got != n {
		t.Errorf("%d fetches, want %d", got, n)
	}
	if got := testCount(rd, rejectTooLarge, LayerBlob); got != n {
		t.Errorf("too-large: %v, want %d", got, n)
	}
	if p := rd.budget.peak.Load(); p > DefaultRedisDecodeMemory {
		t.Errorf("decode budget overcommitted: %d bytes at once", p)
	}
	// three 40 MiB buffers fit the budget; eight at once would be 320 MiB
	if grown := int64(peak) - int64(base); grown > 200<<20 {
		t.Errorf("live heap grew by %d MiB while decoding", grown>>20)
	}
}

func testCount(rd *Redis, reason, layer string) float64 {
	return redisCount(&fixture{reg: &Registry{shared: rd}}, reason, layer)
}

// A decode that cannot get its bytes within the lookup's wait is a miss, counted
// as busy: the key is fetched (once) and written again; nothing waits longer.
func TestRedisDecodeBudgetBusyIsAMiss(t *testing.T) {
	rs := redistest.Start(t)
	rd := newTier(t, rs.Addr, RedisOptions{})
	b, key := blobOf(1)
	fetches := 0
	fill := func(ctx context.Context) ([]byte, error) {
		got, _, err := sharedFill(ctx, rd, LayerBlob, key, time.Hour, blobCodec, func(time.Duration) bool { return true },
			func(context.Context) ([]byte, error) { fetches++; return b, nil })
		if err != nil || string(got) != string(b) {
			t.Fatalf("blob: %q %v", got, err)
		}
		return got, err
	}
	fill(context.Background()) // fetched, written
	if err := rd.budget.sem.Acquire(context.Background(), rd.budget.size); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	fill(ctx)
	waited := time.Since(start)
	rd.budget.sem.Release(rd.budget.size)
	if fetches != 2 || testCount(rd, rejectBusy, LayerBlob) != 1 {
		t.Errorf("budget held elsewhere: %d fetches, %v busy; want 2 and 1", fetches, testCount(rd, rejectBusy, LayerBlob))
	}
	if waited > 2*time.Second {
		t.Errorf("waited %v for the budget, beyond the lookup's 300ms", waited)
	}
	fill(context.Background())
	if fetches != 2 || redisCount(&fixture{reg: &Registry{shared: rd}}, "hits", LayerBlob) != 1 {
		t.Errorf("budget free again: %d fetches, want the value read from redis", fetches)
	}
}
