package cache

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// seedFacts pushes build-0..build-(n-1) to "facts/index" as two-platform
// indexes and to "facts/single" as linux/arm64 images, a day apart, and returns
// the newest-build policy for linux/arm64.
func seedFacts(t testing.TB, s *rt.Server, n int) resolve.PolicySpec {
	t.Helper()
	for i := range n {
		tag := fmt.Sprintf("build-%d", i)
		s.PushIndex(t, "facts/index", tag, rt.Index(day(i), []string{"linux/amd64", "linux/arm64"}, rt.WithSeed("index"+tag)))
		s.Push(t, "facts/single", tag, rt.Image(day(i), "linux/arm64", rt.WithSeed("single"+tag)))
	}
	return resolve.PolicySpec{Strategy: "newest-build", Platforms: []string{"linux/arm64"}}
}

func layerEntries(r *Registry) map[string]int {
	got := map[string]int{}
	for _, s := range r.Stats() {
		got[s.Layer] = s.Entries
	}
	return got
}

// A newest-build keeps what it read of each manifest (an index's children, an
// image's platform and build time), not the manifests and configs: the
// resolution again is answered from the facts with no request, and the answers
// are those of the registry read without a cache.
func TestManifestFactsKeptInsteadOfDocuments(t *testing.T) {
	const n = 5
	s := rt.New(t)
	spec := seedFacts(t, s, n)
	f := newFixture(t, s, nil, nil)
	plain, err := resolve.NewRemote(resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	for _, repo := range []string{"facts/index", "facts/single"} {
		want, err := resolve.NewResolver(plain).Resolve(context.Background(), mustRepo(t, s.Ref(repo)), s.Ref(repo), mustCompile(t, spec))
		if err != nil {
			t.Fatal(err)
		}
		got := f.mustResolve(t, repo, spec)
		if got.Tag != fmt.Sprintf("build-%d", n-1) || got.Tag != want.Tag || got.Digest != want.Digest || got.Candidates != want.Candidates ||
			fmt.Sprint(got.Considered) != fmt.Sprint(want.Considered) {
			t.Errorf("%s: cached view resolved %s %s %+v, the registry without a cache %s %s %+v", repo, got.Tag, got.Digest, got.Considered, want.Tag, want.Digest, want.Considered)
		}
	}
	// Facts per index, per index's linux/arm64 child and per single image; no
	// manifest and no config kept.
	if got := layerEntries(f.reg); got[LayerManifest] != 0 || got[LayerBlob] != 0 || got[LayerFacts] != 3*n {
		t.Errorf("layers hold %v, want no manifest, no blob and %d facts", got, 3*n)
	}

	s.ResetCounts()
	for _, repo := range []string{"facts/index", "facts/single"} {
		if got := f.mustResolve(t, repo, spec); got.Tag != fmt.Sprintf("build-%d", n-1) {
			t.Errorf("%s again: %s", repo, got.Tag)
		}
	}
	if s.Total() != 0 {
		t.Errorf("resolving again asked the registry: %s", describeCounts(s))
	}
	if hits := countOf(f.m, "hits", LayerFacts); hits != 3*n {
		t.Errorf("facts layer hits %v, want %d", hits, 3*n)
	}
}

// Facts are memory only, but the documents they come from still go to Redis:
// a second daemon sharing it derives them without a registry request.
func TestManifestFactsSecondDaemonDerivesFromRedis(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	spec := seedFacts(t, s, 4)
	first := newSharedFixture(t, s, rs.Addr, RedisOptions{})
	first.mustResolve(t, "facts/index", spec)
	first.mustResolve(t, "facts/single", spec)

	s.ResetCounts()
	second := newSharedFixture(t, s, rs.Addr, RedisOptions{})
	for _, repo := range []string{"facts/index", "facts/single"} {
		if got := second.mustResolve(t, repo, spec); got.Tag != "build-3" {
			t.Errorf("%s on the second daemon: %s", repo, got.Tag)
		}
	}
	if s.Total() != 0 {
		t.Errorf("the second daemon asked the registry: %s", describeCounts(s))
	}
	if got := layerEntries(second.reg); got[LayerFacts] != 12 || got[LayerBlob] != 0 || got[LayerManifest] != 0 {
		t.Errorf("second daemon's layers: %v, want 12 facts, no blob, no manifest", got)
	}
}

// A derive that fails is not kept: the registry's answer is the resolution's
// error, and the next resolution reads the config again and succeeds, with no
// request for the manifest, kept when its facts could not be.
func TestManifestFactsFailureNotKept(t *testing.T) {
	s := rt.New(t)
	s.Push(t, "facts/one", "build-0", rt.Image(day(0), "linux/arm64", rt.WithSeed("one")))
	spec := resolve.PolicySpec{Strategy: "newest-build", Platforms: []string{"linux/arm64"}}
	f := newFixture(t, s, nil, nil)
	s.Inject(rt.Fault{Kind: rt.BlobGet, Status: http.StatusNotFound, Times: 1})
	if a := f.resolve(t, "facts/one", spec); a.Error == "" {
		t.Fatalf("resolved %+v with its config missing, want an error", a.Result)
	}
	if got := layerEntries(f.reg)[LayerFacts]; got != 0 {
		t.Errorf("facts layer holds %d facts after the config failed, want none", got)
	}
	s.ResetCounts()
	if got := f.mustResolve(t, "facts/one", spec); got.Tag != "build-0" {
		t.Errorf("after the fault: %s", got.Tag)
	}
	if got := s.Count(rt.BlobGet); got != 1 || s.Total() != 1 {
		t.Errorf("reads after the fault: %s, want the config once and nothing else (the manifest of a tag that failed is kept)", describeCounts(s))
	}
}

func mustCompile(t testing.TB, spec resolve.PolicySpec) *resolve.Policy {
	t.Helper()
	p, err := spec.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFactsStoreGivesBackWhatItKept: the facts layer holds facts in a form of
// its own (keptFacts); what it gives back is what it was given, field by field.
func TestFactsStoreGivesBackWhatItKept(t *testing.T) {
	digest := func(seed string) v1.Hash {
		h, _, err := v1.SHA256(strings.NewReader(seed))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	plus2 := time.FixedZone("plus2", 2*60*60)
	cases := map[string]resolve.ManifestFacts{
		"index": {Digest: digest("index"), MediaType: types.OCIImageIndex, Created: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
			Children: []resolve.ChildFacts{
				{Platform: resolve.Platform{OS: "linux", Arch: "amd64"}, Digest: digest("amd64")},
				{Platform: resolve.Platform{OS: "linux", Arch: "arm", Variant: "v7"}, Digest: digest("arm")},
			}},
		"index without a created annotation": {Digest: digest("bare"), MediaType: types.DockerManifestList,
			Children: []resolve.ChildFacts{{Platform: resolve.Platform{OS: "windows", Arch: "amd64"}, Digest: digest("win")}}},
		"image, build time in a zone": {Digest: digest("image"), MediaType: types.OCIManifestSchema1,
			Platform: resolve.Platform{OS: "linux", Arch: "arm64", Variant: "v8"}, Created: time.Date(2026, 5, 6, 7, 8, 9, 0, plus2)},
		"image of no known platform": {Digest: digest("unknown"), MediaType: types.DockerManifestSchema2},
	}
	s := factsStore{newLRU(1<<20, factsSize)}
	for name, f := range cases {
		s.add(f.Digest.String(), f)
		got, ok := s.get(f.Digest.String())
		if !ok {
			t.Errorf("%s: not kept", name)
			continue
		}
		if !reflect.DeepEqual(got, f) {
			t.Errorf("%s: kept %+v, got back %+v", name, f, got)
		}
	}

	for name, child := range map[string]v1.Hash{
		"upper-case hex":   {Algorithm: "sha256", Hex: strings.ToUpper(digest("x").Hex)},
		"another hash":     {Algorithm: "sha512", Hex: digest("y").Hex + digest("y").Hex},
		"a short sha256":   {Algorithm: "sha256", Hex: digest("z").Hex[:62]},
		"a non-hex sha256": {Algorithm: "sha256", Hex: digest("w").Hex[:63] + "g"},
	} {
		odd := resolve.ManifestFacts{Digest: digest("odd " + name), MediaType: types.OCIImageIndex,
			Children: []resolve.ChildFacts{{Platform: resolve.Platform{OS: "linux", Arch: "amd64"}, Digest: child}}}
		s.add(odd.Digest.String(), odd)
		if got, ok := s.get(odd.Digest.String()); ok {
			t.Errorf("facts with a child digest it cannot hold exactly (%s) were kept: got back %+v", name, got)
		}
	}
}

// The facts layer holds two entries per tag of a newest-build resolution (an
// index's facts and a child's): each entry's item is a 96-byte allocation, the
// size class BenchmarkNewestBuildMemoryGrowth's figures were measured with. A
// field added to keptFacts or lruItem moves every entry to the next class (112
// bytes), 16 bytes more per entry: 320 KiB more live at 10,000 tags.
func TestFactsEntryFitsItsSizeClass(t *testing.T) {
	if got := unsafe.Sizeof(lruItem[keptFacts]{}); got > 96 {
		t.Errorf("a facts entry's item is %d bytes; want at most 96 (its size class)", got)
	}
}
