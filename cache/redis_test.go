package cache

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// healthyRedisTimeout is the fixtures' command and dial timeout unless a test
// sets one: 5s rather than the 200ms default, so that a loaded test machine does
// not pass for a Redis that stopped answering (which opens the circuit, and the
// daemons then fetch alone). A test of a stalled Redis sets the default.
const healthyRedisTimeout = 5 * time.Second

// sharedFixture is one daemon's stack (as newFixture builds it) with the Redis tier
// on, recording into the fixture's metrics.
func newSharedFixture(t testing.TB, s *rt.Server, addr string, ro RedisOptions, opts ...Option) *fixture {
	t.Helper()
	m := NewMetrics()
	ro.Addr = addr
	if ro.Timeout == 0 {
		ro.Timeout = healthyRedisTimeout
	}
	if ro.DialTimeout == 0 {
		ro.DialTimeout = healthyRedisTimeout
	}
	if ro.Logger == nil {
		ro.Logger = slog.New(slog.DiscardHandler)
	}
	rd, err := NewRedis(ro, m)
	if err != nil {
		t.Fatal(err)
	}
	lim := resolve.NewLimiter(nil, resolve.DefaultRegistryConcurrency, m.Transport())
	remote, err := resolve.NewRemote(resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain()),
		resolve.WithoutMemo(), resolve.WithTransportWrapper(lim.Wrap))
	if err != nil {
		t.Fatal(err)
	}
	reg := NewRegistry(remote, append([]Option{WithMetrics(m), WithRedis(rd)}, opts...)...)
	t.Cleanup(reg.Close)
	return &fixture{s: s, m: m, limiter: lim, reg: reg, resolver: resolve.NewResolver(reg)}
}

func redisCount(f *fixture, which string, label string) float64 {
	rm := f.reg.shared.m
	switch which {
	case "hits":
		return testutil.ToFloat64(rm.hits.WithLabelValues(label))
	case "misses":
		return testutil.ToFloat64(rm.misses.WithLabelValues(label))
	case "corrupt", "unauthenticated", "forged", "too-large", "busy", "replayed":
		return testutil.ToFloat64(rm.rejected.WithLabelValues(label, which))
	case "refused":
		return testutil.ToFloat64(rm.refused)
	case "waits":
		return testutil.ToFloat64(rm.leaseWaits.WithLabelValues(label))
	case "errors":
		return testutil.ToFloat64(rm.errors.WithLabelValues(label))
	case "up":
		return testutil.ToFloat64(rm.up)
	}
	panic("unknown counter " + which)
}

func redisErrors(f *fixture) float64 {
	var n float64
	for _, op := range []string{redisOpRead, redisOpWrite, redisOpLease, redisOpPing} {
		n += redisCount(f, "errors", op)
	}
	return n
}

// renderSpread runs n app renders at once, app i on daemon i%len(fs), and fails
// the test on any failed resolution.
func renderSpread(t *testing.T, fs []*fixture, repos []string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, n*2)
	for i := range n {
		wg.Go(func() {
			f := fs[i%len(fs)]
			ans, err := f.resolver.ResolveBatch(context.Background(), fmt.Sprintf("app-%d", i), appRequests(f.s, repos, i))
			if err != nil {
				errs <- err.Error()
				return
			}
			for j, a := range ans {
				if a.Error != "" {
					errs <- fmt.Sprintf("app %d image %d: %s", i, j, a.Error)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// assertOneFetchPerKey checks that across every daemon no tag list, manifest,
// blob or HEAD was asked of the registry twice.
func assertOneFetchPerKey(t *testing.T, s *rt.Server) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range s.Requests() {
		switch r.Kind {
		case rt.Tags, rt.ManifestHead, rt.ManifestGet, rt.BlobGet:
			seen[r.Method+" "+r.Path+"?"+r.RawQuery]++
		}
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("%s asked %d times across the daemons, want once", k, n)
		}
	}
}

func newRedisClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRedisThreeDaemonsShareOneView(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	repos := seedShared(t, s)
	s.SetLatency(10 * time.Millisecond) // so that the daemons' fetches overlap
	var fs []*fixture
	for range 3 {
		fs = append(fs, newSharedFixture(t, s, rs.Addr, RedisOptions{}))
	}

	renderSpread(t, fs, repos, 60)
	if got := s.Count(rt.Tags); got != len(repos) {
		t.Errorf("tag lists: %d for %d repositories across 3 daemons, want one each; %s", got, len(repos), describeCounts(s))
	}
	assertOneFetchPerKey(t, s)
	var hits, waits float64
	for _, f := range fs {
		hits += redisCount(f, "hits", LayerTags)
		waits += redisCount(f, "waits", LayerTags) + redisCount(f, "waits", LayerHead) + redisCount(f, "waits", LayerManifest)
		if e := redisErrors(f); e != 0 {
			t.Errorf("redis errors: %v", e)
		}
	}
	// each of the 3 daemons needs every repository: 2 of 3 got each list from Redis
	if hits+waits < float64(2*len(repos)) {
		t.Errorf("tag lists from redis: %v hits, %v lease waits in all; want at least %d", hits, waits, 2*len(repos))
	}

	// Every key has a TTL; values carry the format version and their layer.
	c := newRedisClient(t, rs.Addr)
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	layers := map[byte]int{}
	for _, k := range keys {
		if !strings.HasPrefix(k, DefaultRedisKeyPrefix+redisValueFormat+":") {
			t.Errorf("key %q outside the prefix", k)
		}
		if strings.Contains(k, ":lease:") {
			t.Errorf("lease %q left behind", k)
		}
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil || ttl <= 0 {
			t.Errorf("key %q: TTL %v (%v), want one", k, ttl, err)
		}
		v, err := c.Get(ctx, k).Bytes()
		if err != nil || len(v) < 3 || v[0] != redisVersion {
			t.Errorf("key %q: value %q", k, v)
			continue
		}
		layers[v[1]]++
	}
	for _, l := range []byte("thmb") {
		if layers[l] == 0 {
			t.Errorf("no %q values in redis: %v", l, layers)
		}
	}
	tagKey := DefaultRedisKeyPrefix + redisValueFormat + ":tags:" + resolve.RepoKey(mustRepo(t, s.Ref(repos[0])))
	if ttl := c.PTTL(ctx, tagKey).Val(); ttl <= DefaultTagTTL-10*time.Second || ttl > DefaultTagTTL {
		t.Errorf("tag list %s: TTL %v, want the tag TTL %v", tagKey, ttl, DefaultTagTTL)
	}
}

func mustRepo(t testing.TB, ref string) name.Repository {
	t.Helper()
	r, err := name.NewRepository(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRedisRestartedDaemonAsksRegistryNothingKnown(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	repos := seedShared(t, s)
	first := newSharedFixture(t, s, rs.Addr, RedisOptions{})
	renderSpread(t, []*fixture{first}, repos, 20)
	first.reg.Close() // the daemon goes away; its memory with it

	s.ResetCounts()
	again := newSharedFixture(t, s, rs.Addr, RedisOptions{})
	renderSpread(t, []*fixture{again}, repos, 20)
	if n := s.Total(); n != 0 {
		t.Errorf("restarted daemon: %d registry requests, want 0 (all in redis): %s", n, describeCounts(s))
	}
	for _, l := range sharedLayers {
		if redisCount(again, "hits", l) == 0 {
			t.Errorf("layer %s: no redis hits", l)
		}
	}
}

func TestRedisDownSlowAndBack(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	repos := seedShared(t, s)
	// the default timeouts: a stalled Redis costs a lookup 200ms (below)
	ro := RedisOptions{RetryInterval: 50 * time.Millisecond, Timeout: DefaultRedisTimeout, DialTimeout: DefaultRedisDialTimeout}
	fs := []*fixture{newSharedFixture(t, s, rs.Addr, ro), newSharedFixture(t, s, rs.Addr, ro), newSharedFixture(t, s, rs.Addr, ro)}
	renderSpread(t, fs, repos[:2], 30)

	// Killed: renders go on from memory and the registry.
	rs.Stop()
	for _, f := range fs {
		f.reg.tags.c.Flush() // tag lists must be fetched again: through a dead Redis
	}
	renderSpread(t, fs, repos, 30)
	var errs []float64
	for i, f := range fs {
		if up := redisCount(f, "up", ""); up != 0 {
			t.Errorf("daemon %d: redis_up %v with redis killed", i, up)
		}
		if e := redisErrors(f); e < 1 {
			t.Errorf("daemon %d: no redis errors counted with redis down", i)
		}
		errs = append(errs, redisErrors(f))
		f.reg.tags.c.Flush()
	}
	// The circuit is open: more lookups send nothing to Redis, pay no dial.
	renderSpread(t, fs, repos, 30)
	for i, f := range fs {
		if e := redisErrors(f); e != errs[i] {
			t.Errorf("daemon %d: redis errors went from %v to %v with the circuit open", i, errs[i], e)
		}
	}

	// Back (empty): shared again once the probes see it.
	rs.Restart()
	waitFor(t, "daemons see redis again", func() bool {
		for _, f := range fs {
			if redisCount(f, "up", "") != 1 {
				return false
			}
		}
		return true
	})
	s.ResetCounts()
	s.Push(t, "team/late", "1.0.0", rt.Image(day(1), "linux/amd64", rt.WithSeed("late")))
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			f := fs[i%3]
			if a := f.resolve(t, "team/late", resolve.PolicySpec{Strategy: "newest-build"}); a.Error != "" {
				t.Error(a.Error)
			}
		})
	}
	wg.Wait()
	if got := s.Count(rt.Tags); got != 1 {
		t.Errorf("after redis came back: %d tag lists of a new repository across 3 daemons, want 1", got)
	}
	assertOneFetchPerKey(t, s)

	// Slow: a Redis that stops answering costs a lookup one short timeout, then
	// none while the circuit is open. CLIENT PAUSE stalls every command of every
	// client, and is in effect once it is answered; 30s outlasts the test.
	c := newRedisClient(t, rs.Addr)
	if err := c.ClientPause(context.Background(), 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	readErrors := redisCount(fs[0], "errors", redisOpRead)
	fs[0].reg.tags.c.Flush()
	fs[0].mustResolve(t, repos[0], resolve.PolicySpec{}) // its lookup times out: the circuit opens
	fs[0].reg.tags.c.Flush()
	if up := redisCount(fs[0], "up", ""); up != 0 {
		t.Errorf("redis_up %v while redis is stalled", up)
	}
	if n := redisCount(fs[0], "errors", redisOpRead) - readErrors; n > 1 {
		t.Errorf("%v lookups paid the stalled redis's timeout, want at most the first", n)
	}
	// Without the monitor's ping: a probe it began while Redis was still in use
	// (before the lookup above opened the circuit) fails after the timeout and is
	// counted then, whenever that is; it is not a resolution's exchange.
	resolutionOps := []string{redisOpRead, redisOpWrite, redisOpLease}
	asked := redisAskedBy(fs[0], resolutionOps...)
	for range 19 {
		fs[0].mustResolve(t, repos[0], resolve.PolicySpec{})
		fs[0].reg.tags.c.Flush()
	}
	if now := redisAskedBy(fs[0], resolutionOps...); now != asked {
		t.Errorf("19 resolutions with the circuit open asked the stalled redis: %s, then %s", asked, now)
	}
	if up := redisCount(fs[0], "up", ""); up != 0 {
		t.Errorf("redis_up %v while redis is stalled", up)
	}
}

// redisAsked sums what counts an exchange with Redis: its answers (hits,
// misses, malformed values, lease waits) and its failures, by layer and
// operation. With the circuit open it does not move.
func redisAsked(f *fixture) string {
	return redisAskedBy(f, redisOpRead, redisOpWrite, redisOpLease, redisOpPing)
}

// redisAskedBy is redisAsked with the failures of the operations ops only.
func redisAskedBy(f *fixture, ops ...string) string {
	var b strings.Builder
	for _, l := range sharedLayers {
		for _, which := range []string{"hits", "misses", "corrupt", "waits"} {
			fmt.Fprintf(&b, "%s %s %v; ", l, which, redisCount(f, which, l))
		}
	}
	for _, op := range ops {
		fmt.Fprintf(&b, "%s errors %v; ", op, redisCount(f, "errors", op))
	}
	return b.String()
}

// waitFor polls ok until it holds, for what depends on an outside process (a
// redis-server stopped or restarted, seen by the daemons' probes); a minute is a
// hang guard.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRedisMalformedValuesAreRefetched(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	s.Push(t, "app", "1.0.0", rt.Image(day(1), "linux/amd64", rt.WithSeed("a")))
	digest := s.Digest(t, "app", "1.0.0")
	repoKey := resolve.RepoKey(mustRepo(t, s.Ref("app")))
	c := newRedisClient(t, rs.Addr)
	ctx := context.Background()
	key := func(layer, k string) string { return DefaultRedisKeyPrefix + redisValueFormat + ":" + layer + ":" + k }
	good := func(layer byte, ttl time.Duration, payload string) []byte {
		codec := valueCodec[string]{layer: layer, payload: func(string, string) ([]byte, bool) { return []byte(payload), true }}
		v, _ := codec.encode("", payload, ttl, false)
		return v
	}
	otherBytes := []byte(`{"schemaVersion":2}`)
	cases := []struct {
		name, key string
		val       []byte
		layer     string
	}{
		{"wrong version", key(LayerTags, repoKey), append([]byte{9}, good('t', time.Minute, "1.0.0")[1:]...), LayerTags},
		{"not a tag", key(LayerTags, repoKey), good('t', time.Minute, "1.0.0\n../x"), LayerTags},
		{"wrong layer", key(LayerHead, repoKey+":1.0.0"), good('t', time.Minute, "1.0.0"), LayerHead},
		{"bad digest", key(LayerHead, repoKey+":1.0.0"), good('h', time.Hour, "sha256:zz\napplication/json\n12"), LayerHead},
		{"manifest bytes not its digest", key(LayerManifest, digest), good('m', 0, "application/vnd.oci.image.manifest.v1+json\n"+string(otherBytes)), LayerManifest},
		{"not zstd", key(LayerTags, repoKey), storedRaw('t', authNone, nil, time.Minute, 2, []byte("xy")), LayerTags},
		{"shorter than announced", key(LayerTags, repoKey), storedRaw('t', authNone, nil, time.Minute, 100, zstdEncoder().EncodeAll([]byte("1.0.0"), nil)), LayerTags},
		{"truncated", key(LayerTags, repoKey), []byte{redisVersion}, LayerTags},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			// a daemon fills redis, then the value is corrupted under a new daemon
			fill := newSharedFixture(t, s, rs.Addr, RedisOptions{})
			fill.mustResolve(t, "app", resolve.PolicySpec{Strategy: "newest-build"})
			fill.reg.Close()
			if err := c.Set(ctx, tc.key, tc.val, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			s.ResetCounts()
			f := newSharedFixture(t, s, rs.Addr, RedisOptions{})
			res := f.mustResolve(t, "app", resolve.PolicySpec{Strategy: "newest-build"})
			if res.Tag != "1.0.0" || res.Digest != digest {
				t.Errorf("resolved %s@%s, want 1.0.0@%s", res.Tag, res.Digest, digest)
			}
			if got := redisCount(f, "corrupt", tc.layer); got != 1 {
				t.Errorf("corrupt %s: %v, want 1", tc.layer, got)
			}
			if s.Total() == 0 {
				t.Error("the malformed value was not fetched again from the registry")
			}
			// the value was rewritten: a third daemon reads it with no request
			s.ResetCounts()
			third := newSharedFixture(t, s, rs.Addr, RedisOptions{})
			third.mustResolve(t, "app", resolve.PolicySpec{Strategy: "newest-build"})
			if s.Total() != 0 || redisCount(third, "corrupt", tc.layer) != 0 {
				t.Errorf("after the refetch: %d requests, %v corrupt", s.Total(), redisCount(third, "corrupt", tc.layer))
			}
		})
	}
}

func TestRedisLeaseOfADeadDaemonExpires(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	c := newRedisClient(t, rs.Addr)
	ctx := context.Background()
	repoKey := resolve.RepoKey(mustRepo(t, s.Ref("app")))
	// a daemon took the tag list's lease and died
	lease := DefaultRedisKeyPrefix + redisValueFormat + ":lease:" + LayerTags + ":" + repoKey
	if err := c.Set(ctx, lease, "dead-daemon", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	f := newSharedFixture(t, s, rs.Addr, RedisOptions{LeaseTTL: 400 * time.Millisecond})
	waiting := make(chan string, 1)
	f.reg.shared.onLeaseWait = func(layer, _ string) { waiting <- layer }
	type result struct {
		ans []resolve.Answer
		err error
	}
	done := make(chan result, 1)
	go func() {
		ans, err := f.resolver.ResolveBatch(ctx, "test", []resolve.Request{{Image: s.Ref("app")}})
		done <- result{ans, err}
	}()
	select {
	case layer := <-waiting:
		if layer != LayerTags {
			t.Fatalf("waiting for the lease of %s, want tags", layer)
		}
	case r := <-done:
		t.Fatalf("resolved %+v %v without waiting for the dead daemon's lease", r.ans, r.err)
	case <-time.After(time.Minute):
		t.Fatal("no wait for the dead daemon's lease within a minute")
	}
	// It waits: no tag list while the lease is there, however long that is.
	if n := s.Count(rt.Tags); n != 0 {
		t.Fatalf("%d tag lists while the dead daemon's lease holds", n)
	}
	if n := rs.Advance(t, time.Hour); n != 1 { // the lease's TTL ends: it expires
		t.Fatalf("%d keys expired, want the lease", n)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the waiter did not take over the expired lease within a minute")
	}
	if r.err != nil || len(r.ans) != 1 || r.ans[0].Error != "" || r.ans[0].Result.Tag != "1.1.0" {
		t.Fatalf("resolved %+v %v, want 1.1.0", r.ans, r.err)
	}
	if redisCount(f, "waits", LayerTags) != 1 || s.Count(rt.Tags) != 1 {
		t.Errorf("lease waits %v, tag lists %d; want 1 and 1", redisCount(f, "waits", LayerTags), s.Count(rt.Tags))
	}
}

func TestRedisSlowFetchKeepsItsLease(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0")
	// a tag list that takes longer than the lease's TTL: the holder renews it, so
	// the other daemons wait for it rather than listing too
	s.SetLatency(700 * time.Millisecond)
	ro := RedisOptions{LeaseTTL: 300 * time.Millisecond}
	fs := []*fixture{newSharedFixture(t, s, rs.Addr, ro), newSharedFixture(t, s, rs.Addr, ro), newSharedFixture(t, s, rs.Addr, ro)}
	repo := mustRepo(t, s.Ref("app"))
	// The first daemon takes the lease and lists; its tag list is held at the
	// registry until the two others wait for the lease, then takes the 700ms
	// latency: over twice the lease's TTL with both waiting.
	listing := make(chan struct{})
	othersWaiting := make(chan struct{})
	var held atomic.Bool
	s.OnRequest(func(r rt.Request, _ int) {
		if r.Kind == rt.Tags && held.CompareAndSwap(false, true) {
			close(listing)
			<-othersWaiting
		}
	})
	waits := make(chan struct{}, 2)
	for _, f := range fs[1:] {
		f.reg.shared.onLeaseWait = func(string, string) { waits <- struct{}{} }
	}
	var wg sync.WaitGroup
	list := func(f *fixture) {
		wg.Go(func() {
			if _, err := f.reg.ListTags(context.Background(), repo); err != nil {
				t.Error(err)
			}
		})
	}
	list(fs[0])
	guard := time.After(time.Minute)
	select {
	case <-listing:
	case <-guard:
		t.Fatal("the first daemon did not list within a minute")
	}
	list(fs[1])
	list(fs[2])
	for range 2 {
		select {
		case <-waits:
		case <-guard:
			close(othersWaiting)
			t.Fatal("the other daemons did not wait for the lease within a minute")
		}
	}
	close(othersWaiting)
	wg.Wait()
	if got := s.Count(rt.Tags); got != 1 {
		t.Errorf("%d tag lists, want 1", got)
	}
	if got := redisCount(fs[1], "waits", LayerTags) + redisCount(fs[2], "waits", LayerTags); got != 2 {
		t.Errorf("%v lease waits, want the 2 other daemons'", got)
	}
}

func TestRedisTTLLayersKeepTheirAge(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0")
	// The daemons' clock and Redis's move on together, when the test says so.
	clock := newFakeClock()
	advance := func(d time.Duration) { clock.Advance(d); rs.Advance(t, d) }
	const ttl = time.Hour
	opts := []Option{WithTagTTL(ttl), WithRefreshAhead(0), WithClock(clock.Now)}
	a := newSharedFixture(t, s, rs.Addr, RedisOptions{}, opts...)
	b := newSharedFixture(t, s, rs.Addr, RedisOptions{}, opts...)
	repo := mustRepo(t, s.Ref("app"))
	if _, err := a.reg.ListTags(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
	advance(35 * time.Minute)
	// b reads a's list 35 minutes old: it expires for b when it does for a
	if _, err := b.reg.ListTags(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
	ageA := clock.Now().Sub(a.reg.tags.lookup(resolve.RepoKey(repo)).fetched)
	ageB := clock.Now().Sub(b.reg.tags.lookup(resolve.RepoKey(repo)).fetched)
	// Redis counts the age in real milliseconds too: b's may be older by the
	// test's own run time, well within the twentieth of the TTL that tells one
	// fetch from another.
	if ageA != 35*time.Minute || ageB < ageA || ageB >= ageA+ttl/20 {
		t.Errorf("b's entry is %v old, want the age of a's fetch (%v)", ageB, ageA)
	}
	advance(26 * time.Minute) // past the TTL for both, and in redis
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "2.0.0")
	for _, f := range []*fixture{a, b} {
		tags, err := f.reg.ListTags(context.Background(), repo)
		if err != nil || len(tags) != 2 {
			t.Errorf("after the TTL: %v %v, want both tags", tags, err)
		}
	}
	if got := s.Count(rt.Tags); got != 2 {
		t.Errorf("%d tag lists, want 2 (one per TTL for both daemons)", got)
	}
}

func TestRedisPasswordNeverShown(t *testing.T) {
	const secret = "s3cr3t-redis-password"
	rs := redistest.Start(t, "--requirepass", secret)
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) }), nil))
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0")

	wrong := newSharedFixture(t, s, rs.Addr, RedisOptions{Logger: log, Password: func() (string, error) { return "not-" + secret, nil }})
	if redisCount(wrong, "up", "") != 0 {
		t.Error("redis up with a wrong password")
	}
	wrong.mustResolve(t, "app", resolve.PolicySpec{}) // resolves without it
	right := newSharedFixture(t, s, rs.Addr, RedisOptions{Logger: log, Password: func() (string, error) { return secret, nil }})
	if redisCount(right, "up", "") != 1 {
		t.Error("redis not up with the right password")
	}
	right.mustResolve(t, "app", resolve.PolicySpec{})
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the password is in the logs:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "redis unavailable") {
		t.Errorf("no log line for the refused password:\n%s", logs.String())
	}
	if n := s.Count(rt.Tags); n != 2 {
		t.Errorf("%d tag lists, want 2: the daemon without redis lists, the one with it lists", n)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

var _ io.Writer = writerFunc(nil)

func TestRedisCodecRoundTrip(t *testing.T) {
	s := rt.New(t)
	s.Push(t, "app", "1.0.0", rt.Image(day(1), "linux/amd64", rt.WithSeed("a")))
	remote, err := resolve.NewRemote(resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := remote.Manifest(context.Background(), mustRepo(t, s.Ref("app")), "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	key := m.Digest.String()
	rd := codecRedis(nil)
	raw, ok := encodeFor(rd, manifestCodec, "m", key, m, 0)
	if !ok {
		t.Fatal("manifest not encoded")
	}
	got, _, _, err := decodeFrom(context.Background(), rd, manifestCodec, "m", key, raw)
	if err != nil || got.Digest != m.Digest || got.MediaType != m.MediaType || string(got.Raw) != string(m.Raw) {
		t.Fatalf("manifest round trip: %+v %v", got, err)
	}
	if _, _, reason, _ := decodeFrom(context.Background(), rd, manifestCodec, "m", "sha256:"+strings.Repeat("0", 64), raw); reason != rejectCorrupt {
		t.Errorf("a manifest stored under another digest: %q, want corrupt", reason)
	}
	if _, ok := encodeFor(rd, manifestCodec, "m", "sha256:"+strings.Repeat("0", 64), m, 0); ok {
		t.Error("a manifest was encoded under a digest it does not have")
	}
	tags := []string{"1.0.0", "v2", "latest"}
	raw, _ = encodeFor(rd, tagsCodec, "t", "k", tags, 90*time.Second)
	gotTags, ttl, _, err := decodeFrom(context.Background(), rd, tagsCodec, "t", "k", raw)
	if err != nil || strings.Join(gotTags, ",") != "1.0.0,v2,latest" || ttl != 90*time.Second {
		t.Errorf("tags round trip: %v %v %v", gotTags, ttl, err)
	}
	raw, _ = encodeFor(rd, tagsCodec, "t", "k", nil, time.Second)
	if gotTags, _, _, err := decodeFrom(context.Background(), rd, tagsCodec, "t", "k", raw); err != nil || len(gotTags) != 0 {
		t.Errorf("empty tag list: %v %v", gotTags, err)
	}
	// compressed: a long tag list stores in far fewer bytes
	var many []string
	for i := range 10000 {
		many = append(many, fmt.Sprintf("build-%d", i))
	}
	raw, _ = encodeFor(rd, tagsCodec, "t", "k", many, time.Minute)
	if plain := len(strings.Join(many, "\n")); len(raw)*3 > plain {
		t.Errorf("10,000 tags: %d bytes stored for %d plain", len(raw), plain)
	}
}

func TestRedisStaleIfErrorStaysWithMemory(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	clock := newFakeClock()
	opts := []Option{WithTagTTL(time.Minute), WithRefreshAhead(0), WithClock(clock.Now)}
	a := newSharedFixture(t, s, rs.Addr, RedisOptions{}, opts...)
	b := newSharedFixture(t, s, rs.Addr, RedisOptions{}, opts...)
	for _, f := range []*fixture{a, b} {
		if res := f.mustResolve(t, "app", resolve.PolicySpec{}); res.Tag != "1.1.0" {
			t.Fatalf("resolved %s", res.Tag)
		}
	}
	// past the TTL: gone from Redis, expired in memory
	clock.Advance(2 * time.Minute)
	rs.Advance(t, 2*time.Minute)
	s.Inject(rt.Fault{Kind: rt.Tags, Status: http.StatusServiceUnavailable})
	for i, f := range []*fixture{a, b} {
		a := f.resolve(t, "app", resolve.PolicySpec{})
		if a.Error != "" || a.Result.Tag != "1.1.0" || len(a.Result.Stale) == 0 {
			t.Errorf("daemon %d with the registry failing: %+v %q, want the last good answer flagged stale", i, a.Result, a.Error)
		}
		if countOf(f.m, "stale", LayerTags) != 1 {
			t.Errorf("daemon %d: %v stale serves", i, countOf(f.m, "stale", LayerTags))
		}
	}
	// nothing stale went to Redis: a new daemon has no answer to give
	c := newSharedFixture(t, s, rs.Addr, RedisOptions{}, opts...)
	if a := c.resolve(t, "app", resolve.PolicySpec{}); a.Error == "" {
		t.Errorf("a new daemon answered %+v with the registry failing and nothing fresh anywhere", a.Result)
	}
}

func TestRedisIdleDaemonNoticesRedisGoneAndBack(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) }), nil))
	f := newSharedFixture(t, s, rs.Addr, RedisOptions{RetryInterval: 30 * time.Millisecond, Logger: log})
	if redisCount(f, "up", "") != 1 {
		t.Fatal("redis not up at start")
	}
	rs.Stop()
	waitFor(t, "an idle daemon sees redis gone", func() bool { return redisCount(f, "up", "") == 0 })
	rs.Restart()
	waitFor(t, "an idle daemon sees redis back", func() bool { return redisCount(f, "up", "") == 1 })
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "redis unavailable"); n != 1 {
		t.Errorf("%d lines saying redis is unavailable, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "redis available again"); n != 1 {
		t.Errorf("%d lines saying redis is back, want 1:\n%s", n, logs.String())
	}
}

func TestRedisRefreshAheadOncePerInstallation(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0")
	s.SetLatency(20 * time.Millisecond) // the three refreshes overlap
	clock := newFakeClock()
	opts := []Option{WithTagTTL(time.Hour), WithRefreshAhead(0.5), WithClock(clock.Now)}
	fs := []*fixture{newSharedFixture(t, s, rs.Addr, RedisOptions{}, opts...),
		newSharedFixture(t, s, rs.Addr, RedisOptions{}, opts...), newSharedFixture(t, s, rs.Addr, RedisOptions{}, opts...)}
	repo := mustRepo(t, s.Ref("app"))
	for _, f := range fs {
		if _, err := f.reg.ListTags(context.Background(), repo); err != nil {
			t.Fatal(err)
		}
	}
	// into the last half of the TTL, for all three
	clock.Advance(36 * time.Minute)
	rs.Advance(t, 36*time.Minute)
	for _, f := range fs {
		if _, err := f.reg.ListTags(context.Background(), repo); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range fs {
		f.waitIdle()
	}
	if got := s.Count(rt.Tags); got != 2 {
		t.Errorf("%d tag lists, want 2: the first, and one refresh-ahead for the three daemons", got)
	}
	var refreshed float64
	for _, f := range fs {
		refreshed += countOf(f.m, "refresh", LayerTags, "ok")
		e := f.reg.tags.lookup(resolve.RepoKey(repo))
		// fetched again during the test's run: its age is the real time since
		if age := clock.Now().Sub(e.fetched); age > time.Minute {
			t.Errorf("entry %v old after the refresh", age)
		}
	}
	if refreshed != 3 {
		t.Errorf("%v refresh-aheads, want one per daemon (two of them answered by redis)", refreshed)
	}
}

// codecRedis is a tier that is never connected, for the codec alone: values
// signed with key (nil: none), the default bounds.
func codecRedis(key []byte) *Redis {
	k := &macKeys{now: time.Now, log: slog.New(slog.DiscardHandler)}
	if key != nil {
		k.load = func() ([]byte, error) { return key, nil }
		k.cur.Store(&macState{key: key})
	}
	return &Redis{keys: k, budget: newDecodeBudget(DefaultRedisDecodeMemory, time.Second),
		o: RedisOptions{MaxReply: DefaultRedisMaxReply}}
}

// storedRaw builds a value as a writer to Redis may: any header, any MAC (nil:
// none unless auth says one, then zeros) and any frame.
func storedRaw(layer, auth byte, mac []byte, ttl time.Duration, size int64, frame []byte) []byte {
	return storedRawAt(layer, auth, mac, ttl, time.Now(), size, frame)
}

// storedRawAt is storedRaw written at a given time.
func storedRawAt(layer, auth byte, mac []byte, ttl time.Duration, at time.Time, size int64, frame []byte) []byte {
	v := []byte{redisVersion, layer, auth}
	if auth == authHMAC {
		if mac == nil {
			mac = make([]byte, macSize)
		}
		v = append(v, mac...)
	}
	v = binary.AppendUvarint(v, uint64(ttl.Milliseconds()))
	v = binary.AppendUvarint(v, uint64(at.UnixMilli()))
	v = binary.AppendUvarint(v, uint64(size))
	return append(v, frame...)
}
