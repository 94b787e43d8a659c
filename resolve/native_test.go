package resolve_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// describedAPI is a metadata API answering from what the test registry holds
// (registrytest's Describe), saying as much as a vendor's API may: the digest,
// the runnable platforms (unless hidePlatforms), the push time (unless
// hidePushed); never the build time, which only the OCI protocol gives exactly.
type describedAPI struct {
	s                         *rt.Server
	hidePlatforms, hidePushed bool
	calls                     int
}

func (a *describedAPI) Name() string { return "described" }

func (a *describedAPI) ListTagRecords(_ context.Context, repo name.Repository) ([]resolve.TagRecord, error) {
	a.calls++
	tags, err := a.s.Describe(repo.RepositoryStr())
	if err != nil {
		return nil, err
	}
	var out []resolve.TagRecord
	for _, td := range tags {
		rec := resolve.TagRecord{Tag: td.Tag, Digest: mustHash(td.Digest), MediaType: types.MediaType(td.MediaType)}
		if !a.hidePushed {
			rec.Pushed = td.Pushed
		}
		if !a.hidePlatforms {
			rec.Platforms = []resolve.Platform{}
			for _, m := range td.Manifests {
				if m.Attestation || m.Platform == nil {
					continue
				}
				rec.Platforms = append(rec.Platforms, resolve.PlatformOf(m.Platform))
				rec.PlatformManifests = append(rec.PlatformManifests, mustHash(m.Digest))
			}
		}
		out = append(out, rec)
	}
	return out, nil
}

// timedAPI is describedAPI that also gives build times (resolve.BuildTimer),
// as Harbor's artifacts by digest do: exactly what the OCI walk reads.
type timedAPI struct {
	describedAPI
	times int
	seen  map[string][]rt.TagDescription // Describe's answer by repository (read once)
}

func (a *timedAPI) BuildTime(_ context.Context, repo name.Repository, rec resolve.TagRecord, prefer []resolve.Platform) (time.Time, bool, error) {
	a.times++
	tags, ok := a.seen[repo.RepositoryStr()]
	if !ok {
		var err error
		if tags, err = a.s.Describe(repo.RepositoryStr()); err != nil {
			return time.Time{}, false, err
		}
		if a.seen == nil {
			a.seen = map[string][]rt.TagDescription{}
		}
		a.seen[repo.RepositoryStr()] = tags
	}
	for _, td := range tags {
		if td.Tag != rec.Tag {
			continue
		}
		if c := annotationCreated(td.Annotations); !c.IsZero() {
			return c, true, nil
		}
		var child *rt.ManifestDescription
		for i := range td.Manifests {
			m := &td.Manifests[i]
			if m.Attestation || m.Platform == nil {
				continue
			}
			p := resolve.PlatformOf(m.Platform)
			if child == nil || (!satisfies(resolve.PlatformOf(child.Platform), prefer) && satisfies(p, prefer)) {
				child = m
			}
		}
		if child == nil {
			return time.Time{}, false, nil
		}
		if c := annotationCreated(child.Annotations); !c.IsZero() {
			return c, true, nil
		}
		return child.Created, true, nil
	}
	return time.Time{}, false, nil
}

func annotationCreated(a map[string]string) time.Time {
	t, _ := time.Parse(time.RFC3339, a["org.opencontainers.image.created"])
	return t.UTC()
}

func satisfies(p resolve.Platform, prefer []resolve.Platform) bool {
	return slices.ContainsFunc(prefer, p.Satisfies)
}

func mustHash(s string) v1.Hash {
	h, err := v1.NewHash(s)
	if err != nil {
		panic(err)
	}
	return h
}

// outcome is what a user sees of a resolution: the reference, digest and
// skipped tags (the manifests' annotations), or the error's kind.
func outcome(res *resolve.Result, err error) string {
	if err != nil {
		var nt *resolve.NoTagError
		if errors.As(err, &nt) {
			return "no tag: " + nt.Reason
		}
		return "error: " + err.Error()
	}
	var sk []string
	for _, s := range res.Skipped {
		sk = append(sk, s.Tag+" "+s.Reason)
	}
	return fmt.Sprintf("%s %s skipped [%s]", res.Reference, res.Digest, strings.Join(sk, "; "))
}

// TestNativeAgreesWithOCIOnTheDemoRegistry: on every repository of
// testdata/registry/demo.yaml, for every strategy, required platform set and
// pin, with the API saying platforms or not and push times or not, the native
// path answers what the OCI walk answers: the same reference, digest and
// skipped tags, or the same refusal.
func TestNativeAgreesWithOCIOnTheDemoRegistry(t *testing.T) {
	sc, err := rt.LoadScenario(filepath.Join("..", "testdata", "registry", "demo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := rt.New(t)
	if err := s.SeedScenario(sc); err != nil {
		t.Fatal(err)
	}
	oci := newResolver(t)
	for _, api := range []resolve.MetadataAPI{&describedAPI{s: s}, &describedAPI{s: s, hidePlatforms: true}, &describedAPI{s: s, hidePushed: true}, &timedAPI{describedAPI: describedAPI{s: s}}} {
		native := resolve.NewResolver(mustRemote(t), resolve.WithMetadataAPIs(func(name.Repository) resolve.MetadataAPI { return api }, nil))
		for repo := range sc.Repositories {
			for _, st := range []string{"semver", "newest-build", "alphabetical", "numeric"} {
				for _, plats := range [][]string{nil, {"linux/amd64"}, {"linux/arm64"}, {"linux/arm/v7"}} {
					for _, pin := range []bool{false, true} {
						spec := resolve.PolicySpec{Strategy: st, Platforms: plats, PinDigest: pin}
						want := outcome(resolveIn(t, oci, s, repo, spec))
						res, err := resolveIn(t, native, s, repo, spec)
						if got := outcome(res, err); got != want {
							t.Errorf("%s %+v (API %+v):\n native %s\n    OCI %s", repo, spec, api, got, want)
						}
						if err == nil && res.MetadataAPI != api.Name() {
							t.Errorf("%s %+v: metadataAPI %q", repo, spec, res.MetadataAPI)
						}
					}
				}
			}
		}
	}
}

func mustRemote(t testing.TB) *resolve.Remote {
	t.Helper()
	reg, err := resolve.NewRemote(resolve.WithRetry(fastRetry))
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestNativeAgreesWithOCIFuzzed: random repositories (build times, some
// reproducible, a fixed created shared by many tags; platforms; push times after
// the build, some long after; the created annotation on some), resolved for
// newest-build by both paths: the same answer every time.
func TestNativeAgreesWithOCIFuzzed(t *testing.T) {
	s := rt.New(t)
	oci := newResolver(t)
	api := &describedAPI{s: s}
	native := resolve.NewResolver(mustRemote(t), resolve.WithMetadataAPIs(func(name.Repository) resolve.MetadataAPI { return api }, nil))
	timed := &timedAPI{describedAPI: describedAPI{s: s}}
	nativeTimed := resolve.NewResolver(mustRemote(t), resolve.WithMetadataAPIs(func(name.Repository) resolve.MetadataAPI { return timed }, nil))
	platforms := []string{"linux/amd64", "linux/arm64", "linux/arm/v7"}
	for seed := range uint64(12) {
		rng := rand.New(rand.NewPCG(seed, 27))
		repo := fmt.Sprintf("fuzz/r%d", seed)
		fixed := day(3) // a reproducible build's created
		for i := range 8 + rng.IntN(16) {
			created := day(0).Add(time.Duration(rng.IntN(30*24)) * time.Hour)
			if rng.IntN(4) == 0 {
				created = fixed
			}
			var ps []string
			for _, p := range platforms {
				if rng.IntN(3) > 0 {
					ps = append(ps, p)
				}
			}
			if len(ps) == 0 {
				ps = platforms[:1]
			}
			tag := fmt.Sprintf("t%02d", i)
			var opts []rt.IndexOption
			if rng.IntN(5) == 0 {
				opts = append(opts, rt.WithCreatedAnnotation())
			}
			s.PushIndex(t, repo, tag, rt.Index(created, ps, opts...))
			s.SetPushed(repo, tag, created.Add(time.Duration(rng.IntN(48*60))*time.Minute))
		}
		for _, plats := range [][]string{nil, {"linux/amd64"}, {"linux/arm64"}, {"linux/arm/v7"}, {"linux/amd64", "linux/arm64"}} {
			spec := resolve.PolicySpec{Strategy: "newest-build", Platforms: plats}
			want := outcome(resolveIn(t, oci, s, repo, spec))
			if got := outcome(resolveIn(t, native, s, repo, spec)); got != want {
				t.Errorf("seed %d %v:\n native %s\n    OCI %s", seed, plats, got, want)
			}
			if got := outcome(resolveIn(t, nativeTimed, s, repo, spec)); got != want {
				t.Errorf("seed %d %v, build times from the API:\n native %s\n    OCI %s", seed, plats, got, want)
			}
		}
	}
}

// TestNativeNewestBuildRequests: newest-build over 1,000 multi-platform tags
// for linux/arm64, built an hour apart, each pushed an hour after its build:
// the OCI walk reads every candidate (an index, a manifest and a config each:
// 3,011 requests with the listing). The native path reads three: b0998 (the
// newest pushed with arm64), b0997 (pushed when b0998 was built: within the
// clock skew, it could be newer), and b0999 (arm64-less, skipped unread as a
// candidate, but its build time decides whether it is listed as skipped, as the
// OCI walk lists it); b0996 was pushed before b0998's build: the walk stops.
func TestNativeNewestBuildRequests(t *testing.T) {
	s := rt.New(t, rt.WithPageSize(100))
	for i := range 1000 {
		ps := []string{"linux/amd64", "linux/arm64"}
		if i%10 == 9 {
			ps = ps[:1]
		}
		created := day(0).Add(time.Duration(i) * time.Hour)
		tag := fmt.Sprintf("b%04d", i)
		s.PushIndex(t, "big", tag, rt.Index(created, ps, rt.WithSeed(tag)))
		s.SetPushed("big", tag, created.Add(time.Hour))
	}
	api := &describedAPI{s: s}
	native := resolve.NewResolver(mustRemote(t), resolve.WithMetadataAPIs(func(name.Repository) resolve.MetadataAPI { return api }, nil))
	spec := resolve.PolicySpec{Strategy: "newest-build", Platforms: []string{"linux/arm64"}}
	s.ResetCounts()
	res := mustResolve(t, native, s, "big", spec)
	if res.Tag != "b0998" {
		t.Errorf("native chose %s, want b0998 (b0999 lacks arm64)", res.Tag)
	}
	want := map[rt.Kind]int{rt.Ping: 1, rt.ManifestGet: 6, rt.BlobGet: 3}
	if got := s.Counts(); !reflect.DeepEqual(nonZero(got), want) {
		t.Errorf("native requests %v, want %v", nonZero(got), want)
	}
	if res.ConfigReads != 3 || res.MetadataAPI != "described" || api.calls != 1 {
		t.Errorf("config reads %d, api %q, listings %d", res.ConfigReads, res.MetadataAPI, api.calls)
	}
	if len(res.Skipped) != 1 || res.Skipped[0].Tag != "b0999" {
		t.Errorf("skipped %+v, want b0999 only", res.Skipped)
	}
	s.ResetCounts()
	oci := mustResolve(t, newResolver(t), s, "big", spec)
	if oci.Tag != res.Tag || !slices.Equal(skippedTags(oci), skippedTags(res)) {
		t.Errorf("OCI chose %s skipping %v; native %s skipping %v", oci.Tag, skippedTags(oci), res.Tag, skippedTags(res))
	}
	// With build times from the API (Harbor): no OCI request at all.
	timed := &timedAPI{describedAPI: describedAPI{s: s}}
	s.ResetCounts()
	tres := mustResolve(t, resolve.NewResolver(mustRemote(t), resolve.WithMetadataAPIs(func(name.Repository) resolve.MetadataAPI { return timed }, nil)), s, "big", spec)
	if tres.Tag != "b0998" || s.Total() != 0 || timed.times != 3 || tres.BuildTimeReads != 3 {
		t.Errorf("build times from the API: %s with %d OCI requests (%v), %d build times asked; want b0998, 0, 3", tres.Tag, s.Total(), nonZero(s.Counts()), timed.times)
	}
	s.ResetCounts()
	mustResolve(t, newResolver(t), s, "big", spec)
	if got := s.Total(); got != 3011 {
		t.Errorf("OCI walk: %d requests (%v), want 3,011", got, nonZero(s.Counts()))
	}
}

func nonZero(m map[rt.Kind]int) map[rt.Kind]int {
	out := map[rt.Kind]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

func skippedTags(r *resolve.Result) []string {
	var out []string
	for _, s := range r.Skipped {
		out = append(out, s.Tag)
	}
	return out
}

type failingAPI struct{ calls int }

func (f *failingAPI) Name() string { return "broken" }
func (f *failingAPI) ListTagRecords(context.Context, name.Repository) ([]resolve.TagRecord, error) {
	f.calls++
	return nil, errors.New("429 Too Many Requests: rate limited")
}

// TestNativeFallsBackOnce: an API that cannot answer makes the resolution use
// the OCI protocol, once, and say so (the result and the fallback hook); the
// answer is the OCI one, never partial.
func TestNativeFallsBackOnce(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "1.0.0", "1.1.0")
	api := &failingAPI{}
	var fallbacks []string
	r := resolve.NewResolver(mustRemote(t), resolve.WithMetadataAPIs(func(name.Repository) resolve.MetadataAPI { return api },
		func(name string, err error) { fallbacks = append(fallbacks, name+": "+err.Error()) }))
	res := mustResolve(t, r, s, "app", resolve.PolicySpec{Strategy: "newest-build", Platforms: []string{"linux/amd64"}})
	if res.Tag != "1.1.0" || res.MetadataAPI != "" || !strings.Contains(res.MetadataFallback, "broken: 429") {
		t.Errorf("tag %s, metadataAPI %q, fallback %q", res.Tag, res.MetadataAPI, res.MetadataFallback)
	}
	if api.calls != 1 || len(fallbacks) != 1 || s.Count(rt.Tags) != 1 {
		t.Errorf("API calls %d, fallbacks %v, OCI tag lists %d; want 1, 1, 1", api.calls, fallbacks, s.Count(rt.Tags))
	}
}
