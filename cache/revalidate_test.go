package cache

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// TestRevalidateTags: a tag list read before a push is read again, exactly once
// for any number of callers; one read after the push, or within the bound, is
// not; a registry that fails leaves the cached list answering.
func TestRevalidateTags(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0")
	clock := newFakeClock()
	f := newFixture(t, s, nil, nil, WithClock(clock.Now), WithRefreshAhead(0))
	repo := mustRepo(t, s.Ref("app"))
	ctx := context.Background()
	if tags, err := f.reg.ListTags(ctx, repo); err != nil || !slices.Equal(tags, []string{"1.0.0"}) {
		t.Fatalf("tags %v, %v", tags, err)
	}
	clock.Advance(10 * time.Second)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	pushedAt := clock.Now()
	s.ResetCounts()

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := f.reg.RevalidateTags(ctx, repo, pushedAt); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := s.Count(rt.Tags); got != 1 {
		t.Errorf("8 revalidations at once: %d tag lists read, want 1; %s", got, describeCounts(s))
	}
	if tags, _ := f.reg.ListTags(ctx, repo); !slices.Equal(tags, []string{"1.0.0", "1.1.0"}) {
		t.Errorf("after the revalidation: %v, want the pushed tag", tags)
	}
	if err := f.reg.RevalidateTags(ctx, repo, pushedAt); err != nil || s.Count(rt.Tags) != 1 {
		t.Errorf("a list read after the push is read again: %d lists, err %v", s.Count(rt.Tags), err)
	}
	if n := testutil.ToFloat64(f.m.Revalidations.WithLabelValues(LayerTags, "ok")); n != 1 {
		t.Errorf("revalidations counted %v, want 1", n)
	}

	// The registry fails: an error, and the list read before answers.
	clock.Advance(time.Second)
	s.Inject(rt.Fault{Kind: rt.Tags, Status: 503})
	if err := f.reg.RevalidateTags(ctx, repo, clock.Now()); err == nil {
		t.Error("revalidation against a failing registry: no error")
	}
	s.ClearFaults()
	if tags, err := f.reg.ListTags(ctx, repo); err != nil || !slices.Equal(tags, []string{"1.0.0", "1.1.0"}) {
		t.Errorf("after a failed revalidation: %v, %v; want the cached list", tags, err)
	}
}

// TestRevalidateHeadOnlyWhenHeld: the digest of a tag pushed again is read
// again when this daemon holds it, and costs nothing otherwise.
func TestRevalidateHeadOnlyWhenHeld(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "latest")
	clock := newFakeClock()
	f := newFixture(t, s, nil, nil, WithClock(clock.Now), WithRefreshAhead(0))
	repo := mustRepo(t, s.Ref("app"))
	ctx := context.Background()
	before, err := f.reg.Head(ctx, repo, "latest")
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	s.Push(t, "app", "latest", rt.Image(day(5), "linux/amd64", rt.WithSeed("again")))
	s.ResetCounts()
	if err := f.reg.RevalidateHead(ctx, repo, "other", clock.Now()); err != nil || s.Total() != 0 {
		t.Fatalf("a tag never asked about: %d requests, err %v; want none", s.Total(), err)
	}
	if err := f.reg.RevalidateHead(ctx, repo, "latest", clock.Now()); err != nil {
		t.Fatal(err)
	}
	after, _ := f.reg.Head(ctx, repo, "latest")
	if after.Digest == before.Digest || s.Count(rt.ManifestHead) != 1 {
		t.Errorf("latest pushed again: digest %s -> %s with %d HEADs; want the new digest in 1", before.Digest, after.Digest, s.Count(rt.ManifestHead))
	}
}

// TestRevalidateTagsThroughRedis: of two daemons sharing Redis, the second to
// revalidate after a push takes the list the first read, with no request.
func TestRevalidateTagsThroughRedis(t *testing.T) {
	s, a, b, repo := twoDaemons(t)
	ctx := context.Background()
	for _, f := range []*fixture{a, b} {
		if _, err := f.reg.ListTags(ctx, repo); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // the lists above were read before the push
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	pushedAt := time.Now()
	s.ResetCounts()
	// Redis gives a value's age in whole milliseconds, rounded up here: a list
	// fetched within a few milliseconds of the push may look older than it, and
	// the second daemon reads it again (the safe side). A webhook comes after
	// the push by more than that.
	time.Sleep(10 * time.Millisecond)
	if err := a.reg.RevalidateTags(ctx, repo, pushedAt); err != nil {
		t.Fatal(err)
	}
	if err := b.reg.RevalidateTags(ctx, repo, pushedAt); err != nil {
		t.Fatal(err)
	}
	if got := s.Count(rt.Tags); got != 1 {
		t.Errorf("two daemons revalidating one push: %d tag lists, want 1; %s", got, describeCounts(s))
	}
	if tags, _ := b.reg.ListTags(ctx, repo); !slices.Equal(tags, []string{"1.0.0", "1.1.0"}) {
		t.Errorf("second daemon: %v", tags)
	}
}

// TestPushNotices: a push announced by one daemon reaches the others, not
// itself; with a MAC key, a notice without the key's MAC is ignored and counted.
func TestPushNotices(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	key := func() ([]byte, error) { return []byte("0123456789abcdef0123456789abcdef"), nil }
	a := newSharedFixture(t, s, rs.Addr, RedisOptions{MACKey: key})
	b := newSharedFixture(t, s, rs.Addr, RedisOptions{MACKey: key})
	heard := func(f *fixture) chan string {
		ch := make(chan string, 4)
		f.reg.shared.OnPush(func(msg string) { ch <- msg })
		return ch
	}
	ha, hb := heard(a), heard(b)
	c := newRedisClient(t, rs.Addr)
	waitSubscribers(t, c, a.reg.shared.pushed, 2)
	if err := a.reg.shared.AnnouncePush(context.Background(), "registry.example/team/app"); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-hb:
		if msg != "registry.example/team/app" {
			t.Errorf("heard %q", msg)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the other daemon did not hear the push")
	}
	select {
	case msg := <-ha:
		t.Errorf("the announcing daemon heard its own notice %q", msg)
	case <-time.After(200 * time.Millisecond):
	}

	// A writer to Redis without the key.
	if err := c.Publish(context.Background(), a.reg.shared.pushed, "registry.example/evil\x00abcd\x00").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for redisCount(b, rejectUnauthenticated, layerPushed) < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if redisCount(b, rejectUnauthenticated, layerPushed) != 1 {
		t.Error("an unsigned notice was not counted as unauthenticated")
	}
	select {
	case msg := <-hb:
		t.Errorf("an unsigned notice was acted on: %q", msg)
	default:
	}
}

// waitSubscribers waits until channel has n subscribers.
func waitSubscribers(t *testing.T, c *redis.Client, channel string, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		m, err := c.PubSubNumSub(context.Background(), channel).Result()
		if err == nil && m[channel] >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: fewer than %d subscribers after 5s", channel, n)
}

// countingAPI is a metadata API answering a fixed listing, counting calls.
type countingAPI struct {
	mu    sync.Mutex
	calls int
	tags  []string
}

func (a *countingAPI) Name() string { return "counting" }

func (a *countingAPI) ListTagRecords(context.Context, name.Repository) ([]resolve.TagRecord, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	var out []resolve.TagRecord
	for _, t := range a.tags {
		out = append(out, resolve.TagRecord{Tag: t})
	}
	return out, nil
}

// TestCachedMetadata: a metadata API's listing is cached for the tag TTL (one
// call for any number of readers), read again by a revalidation after a push,
// and counts as a held list for pushes.
func TestCachedMetadata(t *testing.T) {
	s := rt.New(t)
	clock := newFakeClock()
	f := newFixture(t, s, nil, nil, WithClock(clock.Now), WithRefreshAhead(0))
	api := &countingAPI{tags: []string{"1.0.0"}}
	cached := f.reg.CachedMetadata(api)
	repo := mustRepo(t, s.Ref("app"))
	ctx := context.Background()
	for range 5 {
		if recs, err := cached.ListTagRecords(ctx, repo); err != nil || len(recs) != 1 {
			t.Fatalf("%v, %v", recs, err)
		}
	}
	if api.calls != 1 || !f.reg.TagsCached(resolve.RepoKey(repo)) {
		t.Fatalf("5 listings: %d API calls, held %v; want 1, true", api.calls, f.reg.TagsCached(resolve.RepoKey(repo)))
	}
	clock.Advance(time.Second)
	api.tags = append(api.tags, "1.1.0")
	if err := f.reg.RevalidateTags(ctx, repo, clock.Now()); err != nil {
		t.Fatal(err)
	}
	recs, _ := cached.ListTagRecords(ctx, repo)
	if api.calls != 2 || len(recs) != 2 || s.Total() != 0 {
		t.Errorf("after a revalidation: %d API calls, %d records, %d registry requests; want 2, 2, 0", api.calls, len(recs), s.Total())
	}
}

// TestSlowFetchSentBeforeAPush: a tag list fetch sent before a push and
// answered after it (a slow registry, a refresh ahead) neither stands for a read
// after the push nor replaces the list a revalidation read after it: an entry is
// as old as the request that read it.
func TestSlowFetchSentBeforeAPush(t *testing.T) {
	for _, revalidateFirst := range []bool{true, false} {
		name := map[bool]string{true: "revalidation-ends-first", false: "slow-fetch-ends-first"}[revalidateFirst]
		t.Run(name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, rt.New(t), nil, nil, WithClock(clock.Now), WithRefreshAhead(0))
			layer, key, ctx := f.reg.tags, "registry.test/app", context.Background()
			release, fetching := make(chan struct{}), make(chan struct{})
			slow := func(context.Context, *entry[[]string]) ([]string, error) {
				close(fetching)
				<-release
				return []string{"1.0.0"}, nil // the list as it was when asked
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				if _, err := layer.get(ctx, key, key, "tags", slow); err != nil {
					t.Error(err)
				}
			}()
			<-fetching
			clock.Advance(time.Second)
			pushedAt := clock.Now() // 1.1.0 pushed while the slow fetch runs
			clock.Advance(time.Second)
			current := func(context.Context, *entry[[]string]) ([]string, error) { return []string{"1.0.0", "1.1.0"}, nil }
			if !revalidateFirst {
				close(release)
				<-done
			}
			if err := layer.revalidate(ctx, key, key, pushedAt, current); err != nil {
				t.Fatal(err)
			}
			if revalidateFirst {
				close(release)
				<-done
			}
			if e := layer.lookup(key); e == nil || !slices.Equal(e.val, []string{"1.0.0", "1.1.0"}) {
				t.Errorf("after a revalidation for a push: %v, want the pushed tag (the slow fetch's answer predates the push)", e)
			}
		})
	}
}

// TestRevalidateNeverTakesAnOlderList: a list another daemon wrote to Redis a
// moment before the push is read again, however close the two are: Redis counts
// a value's age in whole milliseconds, and the age taken is never less.
func TestRevalidateNeverTakesAnOlderList(t *testing.T) {
	s, a, b, repo := twoDaemons(t)
	ctx := context.Background()
	for i := range 20 {
		if err := a.reg.RevalidateTags(ctx, repo, time.Now()); err != nil {
			t.Fatal(err)
		}
		pushedAt := time.Now() // a's list, in Redis, was written before this
		s.ResetCounts()
		if err := b.reg.RevalidateTags(ctx, repo, pushedAt); err != nil {
			t.Fatal(err)
		}
		if got := s.Count(rt.Tags); got != 1 {
			t.Fatalf("try %d: a list written before the push was taken (%d tag lists read, want 1)", i, got)
		}
	}
}

// TestSlowFetchSentBeforeAPushThroughRedis: a tag list one daemon's fetch sent
// before a push and wrote to Redis after it does not stand, for a revalidation
// of that push, for a list read after it: a value in Redis is as old as the
// fetch that read it, not as its write.
func TestSlowFetchSentBeforeAPushThroughRedis(t *testing.T) {
	s, a, b, repo := twoDaemons(t)
	ctx := context.Background()
	s.SetLatency(300 * time.Millisecond) // a's fetch: a ping and a tag list, 600 ms
	done := make(chan error, 1)
	go func() { _, err := a.reg.ListTags(ctx, repo); done <- err }()
	time.Sleep(100 * time.Millisecond)
	pushedAt := time.Now() // while a's fetch runs
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.SetLatency(0)
	s.ResetCounts()
	if err := b.reg.RevalidateTags(ctx, repo, pushedAt); err != nil {
		t.Fatal(err)
	}
	if got := s.Count(rt.Tags); got != 1 {
		t.Errorf("a list whose fetch was sent before the push, written after it, was taken: %d tag lists read, want 1; %s", got, describeCounts(s))
	}
}

// twoDaemons starts a registry with app:1.0.0 and two daemons' caches sharing
// one Redis.
func twoDaemons(t *testing.T) (s *rt.Server, a, b *fixture, repo name.Repository) {
	t.Helper()
	rs := redistest.Start(t)
	s = rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0")
	a = newSharedFixture(t, s, rs.Addr, RedisOptions{})
	b = newSharedFixture(t, s, rs.Addr, RedisOptions{})
	return s, a, b, mustRepo(t, s.Ref("app"))
}
