package cache

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// seedShared pushes 5 repositories: multi-arch indexes and single-platform images.
func seedShared(t testing.TB, s *rt.Server) []string {
	var repos []string
	for r := range 5 {
		repo := fmt.Sprintf("team/app%d", r)
		repos = append(repos, repo)
		for i, tag := range []string{"1.0.0", "1.1.0", "1.2.0", "2.0.0", "2.1.0"} {
			if i%2 == 0 {
				s.PushIndex(t, repo, tag, rt.Index(day(i), []string{"linux/amd64", "linux/arm64"}, rt.WithSeed(repo+tag)))
			} else {
				s.Push(t, repo, tag, rt.Image(day(i), "linux/amd64", rt.WithSeed(repo+tag)))
			}
		}
	}
	return repos
}

// appRequests is what app i asks for: two images over the shared repositories,
// with policies that need tag lists, HEADs, manifests and configs.
func appRequests(s *rt.Server, repos []string, i int) []resolve.Request {
	policies := []resolve.PolicySpec{
		{Platforms: []string{"linux/arm64"}},      // semver, walks to an index with arm64
		{Strategy: "newest-build"},                // every tag's manifest and config
		{Constraint: "~1.1"},                      // semver, no platforms: one HEAD
		{Strategy: "digest", Constraint: "1.2.0"}, // no list, one HEAD
		{Constraint: "^2", Platforms: []string{"linux/amd64"}},
	}
	return []resolve.Request{
		{Image: s.Ref(repos[i%len(repos)]), Policy: policies[i%len(policies)]},
		{Image: s.Ref(repos[(i+1)%len(repos)]), Policy: policies[(i/5)%len(policies)]},
	}
}

func renderApps(t *testing.T, f *fixture, repos []string, n int) [][]resolve.Answer {
	t.Helper()
	out := make([][]resolve.Answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ans, err := f.resolver.ResolveBatch(context.Background(), fmt.Sprintf("app-%d", i), appRequests(f.s, repos, i))
			if err != nil {
				t.Error(err)
			}
			out[i] = ans
		})
	}
	wg.Wait()
	for i, ans := range out {
		for j, a := range ans {
			if a.Error != "" {
				t.Fatalf("app %d image %d: %s", i, j, a.Error)
			}
		}
	}
	return out
}

func TestConcurrentRendersShareOneFetchPerKey(t *testing.T) {
	s := rt.New(t)
	repos := seedShared(t, s)
	s.SetLatency(10 * time.Millisecond) // so that renders overlap
	f := newFixture(t, s, nil, nil)

	first := renderApps(t, f, repos, 50)
	if got := s.Count(rt.Tags); got != 5 {
		t.Errorf("50 concurrent renders over 5 repositories: %d tag lists, want exactly 5; %s", got, describeCounts(s))
	}
	seen := map[string]int{}
	for _, r := range s.Requests() {
		if r.Kind == rt.ManifestGet || r.Kind == rt.ManifestHead || r.Kind == rt.BlobGet {
			seen[r.Method+" "+r.Path]++
		}
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("%s requested %d times, want once", k, n)
		}
	}
	if got := s.Count(rt.Ping); got > len(repos) {
		t.Errorf("%d pings, want at most one per repository", got)
	}
	t.Logf("cold: %s; shared fetches: tags %v head %v manifest %v blob %v", describeCounts(s),
		countOf(f.m, "shared", LayerTags), countOf(f.m, "shared", LayerHead),
		countOf(f.m, "shared", LayerManifest), countOf(f.m, "shared", LayerBlob))

	// Within the TTL the same renders cost nothing, and answer the same.
	s.ResetCounts()
	second := renderApps(t, f, repos, 50)
	if s.Total() != 0 {
		t.Errorf("second render within the TTL: %s, want no registry request", describeCounts(s))
	}
	for i := range first {
		for j := range first[i] {
			if a, b := first[i][j].Result, second[i][j].Result; a.Reference != b.Reference || a.Digest != b.Digest {
				t.Errorf("app %d image %d: %s then %s", i, j, a.Reference, b.Reference)
			}
		}
	}
}

func TestAfterTTLOneListAndHeadsOnlyForExpiredDigests(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0", "2.0.0")
	clock := newFakeClock()
	f := newFixture(t, s, nil, nil, WithClock(clock.Now), WithRefreshAhead(0), WithTagTTL(2*time.Minute), WithHeadTTL(time.Hour))
	a := resolve.PolicySpec{Constraint: "~1.0", Platforms: []string{"linux/amd64"}} // inspects 1.0.0
	b := resolve.PolicySpec{Constraint: "^2", Platforms: []string{"linux/amd64"}}   // inspects 2.0.0

	f.mustResolve(t, "app", a) // t=0: list, GET 1.0.0, its config
	clock.Advance(30 * time.Minute)
	f.mustResolve(t, "app", b) // t=30m: list, GET 2.0.0, its config

	clock.Advance(35 * time.Minute) // t=65m: lists expired; 1.0.0's digest expired, 2.0.0's not
	s.ResetCounts()
	if got := f.mustResolve(t, "app", a); got.Tag != "1.0.0" {
		t.Fatalf("a: %s", got.Tag)
	}
	if got := f.mustResolve(t, "app", b); got.Tag != "2.0.0" {
		t.Fatalf("b: %s", got.Tag)
	}
	want := map[rt.Kind]int{rt.Tags: 1, rt.ManifestHead: 1}
	if got := s.Counts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the TTLs: %v, want %v (one list, one HEAD for 1.0.0, bodies from the cache)", got, want)
	}
	for _, r := range s.Requests() {
		if r.Kind == rt.ManifestHead && !strings.HasSuffix(r.Path, "/manifests/1.0.0") {
			t.Errorf("HEAD %s, want only 1.0.0's", r.Path)
		}
	}
}

func TestTagMovedIsSeenAfterHeadTTL(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	clock := newFakeClock()
	f := newFixture(t, s, nil, nil, WithClock(clock.Now), WithRefreshAhead(0))
	spec := resolve.PolicySpec{Strategy: "digest", Constraint: "1.1.0"}
	before := f.mustResolve(t, "app", spec).Digest
	s.Push(t, "app", "1.1.0", rt.Image(day(9), "linux/amd64", rt.WithSeed("rebuilt")))
	if got := f.mustResolve(t, "app", spec).Digest; got != before {
		t.Fatalf("within the head TTL the cached digest serves: %s, want %s", got, before)
	}
	clock.Advance(DefaultHeadTTL)
	if got, want := f.mustResolve(t, "app", spec).Digest, s.Digest(t, "app", "1.1.0"); got != want {
		t.Fatalf("after the head TTL: %s, want the new digest %s", got, want)
	}
}

func TestRefreshAhead(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	clock := newFakeClock()
	f := newFixture(t, s, nil, nil, WithClock(clock.Now), WithTagTTL(2*time.Minute), WithRefreshAhead(0.2))
	spec := resolve.PolicySpec{Platforms: []string{"linux/amd64"}}
	f.mustResolve(t, "app", spec)

	clock.Advance(90 * time.Second) // before the last 20%: a plain hit
	s.ResetCounts()
	f.mustResolve(t, "app", spec)
	f.waitIdle()
	if s.Total() != 0 {
		t.Fatalf("at 90s of 120s: %s, want nothing", describeCounts(s))
	}

	clock.Advance(20 * time.Second) // 110s: in the last 20%: answered from cache, refreshed behind
	f.mustResolve(t, "app", spec)
	f.waitIdle()
	if got := s.Counts(); got[rt.Tags] != 1 || s.Total() != 1 {
		t.Fatalf("refresh-ahead at 110s: %v, want one tag list", got)
	}
	if got := countOf(f.m, "refresh", LayerTags, "ok"); got != 1 {
		t.Errorf("refresh_ahead_total{tags,ok} = %v, want 1", got)
	}

	clock.Advance(60 * time.Second) // 170s: expired for the old entry, fresh for the refreshed one
	s.ResetCounts()
	f.mustResolve(t, "app", spec)
	f.waitIdle()
	if s.Total() != 0 {
		t.Fatalf("after a refresh-ahead, the render waits on nothing: %s", describeCounts(s))
	}
}

func TestStaleIfError(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	clock := newFakeClock()
	f := newFixture(t, s, nil, nil, WithClock(clock.Now), WithRefreshAhead(0))
	spec := resolve.PolicySpec{Platforms: []string{"linux/amd64"}}
	good := f.mustResolve(t, "app", spec)
	if len(good.Stale) != 0 {
		t.Fatalf("fresh answer flagged stale: %v", good.Stale)
	}

	s.Inject(rt.Fault{Status: http.StatusServiceUnavailable}) // everything, forever
	clock.Advance(2 * time.Hour)                              // tag list and digest expired

	// Warm: the last good answer, flagged.
	res := f.mustResolve(t, "app", spec)
	if res.Reference != good.Reference || res.Digest != good.Digest {
		t.Fatalf("stale answer %s@%s, want %s@%s", res.Reference, res.Digest, good.Reference, good.Digest)
	}
	if len(res.Stale) != 2 || !strings.Contains(strings.Join(res.Stale, "\n"), "registry answered 503") {
		t.Fatalf("Stale = %q, want the tag list and the digest, with the registry's 503", res.Stale)
	}
	for _, reason := range res.Stale {
		if !strings.Contains(reason, "from 2026-01-01T00:00:00Z") {
			t.Errorf("stale reason %q does not say when the answer is from", reason)
		}
	}
	if countOf(f.m, "stale", LayerTags) != 1 || countOf(f.m, "stale", LayerHead) != 1 {
		t.Errorf("stale serves: tags %v head %v, want 1 and 1", countOf(f.m, "stale", LayerTags), countOf(f.m, "stale", LayerHead))
	}

	// Cold: the registry's own message.
	cold := newFixture(t, s, nil, nil, WithClock(clock.Now))
	a := cold.resolve(t, "app", spec)
	if a.ErrorKind != resolve.KindRegistry || !strings.Contains(a.Error, "service unavailable (registrytest fault)") {
		t.Fatalf("cold with the registry down: %q (%s), want the registry's message", a.Error, a.ErrorKind)
	}

	// Past the stale bound: the error again.
	clock.Advance(DefaultStaleIfError)
	a = f.resolve(t, "app", spec)
	if a.ErrorKind != resolve.KindRegistry || !strings.Contains(a.Error, "service unavailable") {
		t.Fatalf("past the stale bound: %q (%s), want the registry's error", a.Error, a.ErrorKind)
	}

	// The registry back: fresh answers, no flag.
	s.ClearFaults()
	if res := f.mustResolve(t, "app", spec); len(res.Stale) != 0 || res.Digest != good.Digest {
		t.Fatalf("registry back: %+v", res)
	}
}

func TestNotFoundIsNeverServedStale(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0")
	clock := newFakeClock()
	f := newFixture(t, s, nil, nil, WithClock(clock.Now), WithRefreshAhead(0))
	spec := resolve.PolicySpec{Strategy: "digest", Constraint: "1.0.0"}
	f.mustResolve(t, "app", spec)
	s.Untag(t, "app", "1.0.0")
	clock.Advance(2 * time.Hour)
	if a := f.resolve(t, "app", spec); a.ErrorKind != resolve.KindNoTag {
		t.Fatalf("deleted tag: %+v, want no-tag, not a stale digest", a)
	}
}

func TestTooManyRequestsNeverTurnsIntoAWrongAnswer(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	clock := newFakeClock()
	f := newFixture(t, s, nil, nil, WithClock(clock.Now), WithRefreshAhead(0))
	spec := resolve.PolicySpec{Platforms: []string{"linux/amd64"}}
	good := f.mustResolve(t, "app", spec)

	// The registry now has a newer tag, but throttles: the answer is the last good
	// one, flagged, never a guess.
	pushTags(t, s, "app", "linux/amd64", "9.0.0")
	s.Inject(rt.Fault{Status: http.StatusTooManyRequests, RetryAfter: "3600"})
	clock.Advance(2 * time.Hour)
	res := f.mustResolve(t, "app", spec)
	if res.Tag != good.Tag || len(res.Stale) == 0 || !strings.Contains(res.Stale[0], "429") {
		t.Fatalf("throttled: %s stale %q, want %s flagged with the 429", res.Tag, res.Stale, good.Tag)
	}
	// Cold, the 429 is the answer.
	cold := newFixture(t, s, nil, nil)
	if a := cold.resolve(t, "app", spec); a.ErrorKind != resolve.KindRegistry || !strings.Contains(a.Error, "TOOMANYREQUESTS") {
		t.Fatalf("cold and throttled: %+v", a)
	}
}

func TestCallerGivingUpDoesNotAbortSharedFetch(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0")
	f := newFixture(t, s, nil, nil)
	s.SetLatency(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	repo, _ := resolve.RepoOf(s.Ref("app"))
	if _, err := f.reg.ListTags(ctx, repo); err == nil {
		t.Fatal("want the caller's deadline")
	}
	// The fetch went on and filled the cache: a caller that stays joins it, or
	// finds its answer, and no second fetch starts.
	s.SetLatency(0)
	if tags, err := f.reg.ListTags(context.Background(), repo); err != nil || len(tags) != 1 {
		t.Fatalf("tags %v err %v", tags, err)
	}
	// (a fetch is counted as a miss by a leader that waited for it: the first
	// caller left before, so none; the second joined the fetch or read its answer)
	if n, misses := s.Count(rt.Tags), countOf(f.m, "misses", LayerTags); n != 1 || misses != 0 {
		t.Fatalf("%d tag lists, %v fetches led by the second caller; want only the first caller's fetch", n, misses)
	}
	if f.reg.tags.c.ItemCount() != 1 {
		t.Fatal("the detached fetch did not fill the cache")
	}
	s.ResetCounts()
	if tags, err := f.reg.ListTags(context.Background(), repo); err != nil || len(tags) != 1 {
		t.Fatalf("tags %v err %v", tags, err)
	}
	if s.Count(rt.Tags) != 0 {
		t.Errorf("the list was fetched again")
	}
}

func TestLRUBoundsBytes(t *testing.T) {
	c := newLRU(1000, func(_ string, b []byte) int64 { return int64(len(b)) })
	for i := range 10 {
		c.add(fmt.Sprint(i), make([]byte, 100))
	}
	n, b := c.stats()
	if b > 1000 || n != 3 { // 100 + 1 + 160 overhead each
		t.Fatalf("entries %d bytes %d, want 3 within 1000", n, b)
	}
	if _, ok := c.get("9"); !ok {
		t.Error("most recent entry evicted")
	}
	if _, ok := c.get("0"); ok {
		t.Error("oldest entry kept")
	}
	c.get("7")
	c.add("10", make([]byte, 100))
	if _, ok := c.get("7"); !ok {
		t.Error("recently used entry evicted")
	}
	if c.add("huge", make([]byte, 5000)); true {
		if _, ok := c.get("huge"); ok {
			t.Error("entry larger than the bound stored")
		}
	}
}

func TestRegistryWithoutHeadGetsOneGet(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0")
	clock := newFakeClock()
	f := newFixture(t, s, nil, nil, WithClock(clock.Now), WithRefreshAhead(0))
	spec := resolve.PolicySpec{Platforms: []string{"linux/amd64"}}
	f.mustResolve(t, "app", spec)
	s.Inject(rt.Fault{Kind: rt.ManifestHead, Status: http.StatusMethodNotAllowed})
	clock.Advance(2 * time.Hour)
	s.ResetCounts()
	f.mustResolve(t, "app", spec)
	want := map[rt.Kind]int{rt.Tags: 1, rt.ManifestHead: 1, rt.ManifestGet: 1}
	if got := s.Counts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("HEAD refused: %v, want %v (the HEAD, then one GET by tag)", got, want)
	}
}

// A descriptor's digest comes back as the registry gave it, whether it is kept as
// bytes (canonical sha256) or as written.
func TestHeadValDigestRoundTrip(t *testing.T) {
	for _, s := range []string{
		"sha256:" + strings.Repeat("ab", 32),
		"sha512:" + strings.Repeat("cd", 64),
	} {
		d, err := v1.NewHash(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := newHeadVal(d, "application/vnd.oci.image.index.v1+json", 7).digest(); got != d {
			t.Errorf("digest %s came back as %s", d, got)
		}
	}
}
