package resolve_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func day(n int) time.Time { return t0.Add(time.Duration(n) * 24 * time.Hour) }

// fastRetry keeps retry tests quick while still exercising the waits.
var fastRetry = resolve.RetryPolicy{Attempts: 4, Backoff: 10 * time.Millisecond, MaxWait: 5 * time.Second}

func newResolver(t testing.TB, opts ...resolve.RemoteOption) *resolve.Resolver {
	t.Helper()
	reg, err := resolve.NewRemote(append([]resolve.RemoteOption{resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return resolve.NewResolver(reg)
}

func resolveIn(t testing.TB, r *resolve.Resolver, s *rt.Server, repo string, spec resolve.PolicySpec) (*resolve.Result, error) {
	t.Helper()
	p, err := spec.Compile()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewRepository(s.Ref(repo))
	if err != nil {
		t.Fatal(err)
	}
	return r.Resolve(context.Background(), ref, s.Ref(repo), p)
}

func mustResolve(t testing.TB, r *resolve.Resolver, s *rt.Server, repo string, spec resolve.PolicySpec) *resolve.Result {
	t.Helper()
	res, err := resolveIn(t, r, s, repo, spec)
	if err != nil {
		t.Fatalf("Resolve(%s, %+v): %v", repo, spec, err)
	}
	return res
}

// pushTags pushes single-platform linux/amd64 images, one per tag, built on successive days.
func pushTags(t testing.TB, s *rt.Server, repo string, tags ...string) {
	for i, tag := range tags {
		s.Push(t, repo, tag, rt.Image(day(i), "linux/amd64", rt.WithSeed(repo+tag)))
	}
}

func TestStrategiesOverHTTP(t *testing.T) {
	s := rt.New(t, rt.WithPageSize(3))
	pushTags(t, s, "semver", "1.0.0", "v1.2.0", "1.10.0", "2.0.0-rc.1", "latest", "1.9.0")
	pushTags(t, s, "numeric", "9", "10", "100", "abc")
	pushTags(t, s, "alpha", "a", "b", "C")
	// newest-build: tag order differs from build order; 'x' and 'y' share a build time.
	s.Push(t, "builds", "zzz-old", rt.Image(day(1), "linux/amd64", rt.WithSeed("old")))
	s.Push(t, "builds", "aaa-new", rt.Image(day(5), "linux/amd64", rt.WithSeed("new")))
	s.Push(t, "builds", "x", rt.Image(day(3), "linux/amd64", rt.WithSeed("x")))
	s.Push(t, "builds", "y", rt.Image(day(3), "linux/amd64", rt.WithSeed("y")))
	s.PushIndex(t, "annotated", "built-early", rt.Index(day(1), []string{"linux/amd64"}, rt.WithCreatedAnnotation()))
	s.Push(t, "annotated", "built-later", rt.Image(day(2), "linux/amd64"))

	r := newResolver(t)
	tests := []struct {
		name, repo string
		spec       resolve.PolicySpec
		want       string
	}{
		{"semver default skips prerelease and non-semver", "semver", resolve.PolicySpec{}, "1.10.0"},
		{"semver constraint", "semver", resolve.PolicySpec{Constraint: "~1.2"}, "v1.2.0"},
		{"semver prerelease when asked", "semver", resolve.PolicySpec{Constraint: ">=2.0.0-0"}, "2.0.0-rc.1"},
		{"semver with ignore", "semver", resolve.PolicySpec{IgnoreTags: []string{"1.10.*"}}, "1.9.0"},
		{"semver with allow", "semver", resolve.PolicySpec{AllowTags: "regexp:^v"}, "v1.2.0"},
		{"numeric", "numeric", resolve.PolicySpec{Strategy: "numeric"}, "100"},
		{"alphabetical", "alpha", resolve.PolicySpec{Strategy: "alphabetical"}, "b"},
		{"alphabetical, old name", "alpha", resolve.PolicySpec{Strategy: "name"}, "b"},
		{"newest-build", "builds", resolve.PolicySpec{Strategy: "newest-build"}, "aaa-new"},
		{"newest-build tie goes to greater tag", "builds", resolve.PolicySpec{Strategy: "newest-build", IgnoreTags: []string{"aaa-new"}}, "y"},
		{"newest-build over an annotated index and an image, old name", "annotated", resolve.PolicySpec{Strategy: "latest"}, "built-later"},
		{"digest", "semver", resolve.PolicySpec{Strategy: "digest", Constraint: "latest"}, "latest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := mustResolve(t, r, s, tt.repo, tt.spec)
			if res.Tag != tt.want {
				t.Fatalf("tag = %q, want %q", res.Tag, tt.want)
			}
			if want := s.Digest(t, tt.repo, tt.want); res.Digest != want {
				t.Errorf("digest = %s, want %s", res.Digest, want)
			}
		})
	}
}

func TestAnnotationBeatsConfigCreated(t *testing.T) {
	// The index's annotation says day 9; its image config says day 1. A plain image
	// built on day 2 must lose to it: the annotation is read, and it wins over config.
	s := rt.New(t)
	idx := mutate.Annotations(rt.Index(day(1), []string{"linux/amd64"}),
		map[string]string{"org.opencontainers.image.created": day(9).Format(time.RFC3339)}).(v1.ImageIndex)
	s.PushIndex(t, "a", "annotated", idx)
	s.Push(t, "a", "plain", rt.Image(day(2), "linux/amd64"))
	res := mustResolve(t, newResolver(t), s, "a", resolve.PolicySpec{Strategy: "newest-build"})
	if res.Tag != "annotated" {
		t.Fatalf("tag = %q, want annotated", res.Tag)
	}
	if c := res.Considered[0].Created; !c.Equal(day(9)) {
		t.Errorf("created = %v, want %v from the annotation", c, day(9))
	}
}

func TestDigestStrategyPinsIndexDigest(t *testing.T) {
	s := rt.New(t)
	s.PushIndex(t, "app", "stable", rt.Index(day(1), []string{"linux/amd64", "linux/arm64"}))
	res := mustResolve(t, newResolver(t), s, "app", resolve.PolicySpec{Strategy: "digest", Constraint: "stable"})
	want := s.Digest(t, "app", "stable")
	if res.Reference != s.Ref("app")+":stable@"+want {
		t.Errorf("reference = %s, want the index digest %s", res.Reference, want)
	}
	if s.Count(rt.Tags) != 0 {
		t.Errorf("digest strategy listed tags %d times; it needs only the followed tag", s.Count(rt.Tags))
	}
	_, err := resolveIn(t, newResolver(t), s, "app", resolve.PolicySpec{Strategy: "digest", Constraint: "gone"})
	if !errors.Is(err, resolve.ErrNoTag) {
		t.Errorf("digest of a missing tag: err = %v, want ErrNoTag", err)
	}
}

func TestPinDigest(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "1.0.0", "1.1.0")
	res := mustResolve(t, newResolver(t), s, "app", resolve.PolicySpec{PinDigest: true})
	if want := s.Ref("app") + ":1.1.0@" + s.Digest(t, "app", "1.1.0"); res.Reference != want {
		t.Errorf("reference = %s, want %s", res.Reference, want)
	}
}

// The story from the field: a team goes arm64-only; new tags lack linux/amd64.
func TestArm64OnlyStory(t *testing.T) {
	s := rt.New(t)
	s.PushIndex(t, "app", "old", rt.Index(day(1), []string{"linux/amd64", "linux/arm64"}))
	s.PushIndex(t, "app", "new", rt.Index(day(2), []string{"linux/arm64"}, rt.WithAttestation()))
	r := newResolver(t)
	nb := func(platforms ...string) resolve.PolicySpec {
		return resolve.PolicySpec{Strategy: "newest-build", Platforms: platforms}
	}

	if res := mustResolve(t, r, s, "app", nb("linux/arm64")); res.Tag != "new" || len(res.Skipped) != 0 {
		t.Errorf("linux/arm64: tag %q skipped %v, want new and nothing skipped", res.Tag, res.Skipped)
	}
	if res := mustResolve(t, r, s, "app", nb("linux/arm64/v8")); res.Tag != "new" {
		t.Errorf("linux/arm64/v8 must equal linux/arm64: tag %q", res.Tag)
	}
	res := mustResolve(t, r, s, "app", nb("linux/amd64"))
	if res.Tag != "old" {
		t.Fatalf("linux/amd64: tag %q, want old", res.Tag)
	}
	wantSkip := resolve.Skip{Tag: "new", Platforms: []string{"linux/arm64"}, Missing: []string{"linux/amd64"},
		Reason: "no manifest for linux/amd64 (has linux/arm64)"}
	if len(res.Skipped) != 1 || !skipEqual(res.Skipped[0], wantSkip) {
		t.Errorf("skipped = %+v, want [%+v] (the attestation is not a platform)", res.Skipped, wantSkip)
	}
	if res := mustResolve(t, r, s, "app", nb()); res.Tag != "new" {
		t.Errorf("no platforms: tag %q, want new", res.Tag)
	}
	_, err := resolveIn(t, r, s, "app", nb("linux/s390x"))
	var nt *resolve.NoTagError
	if !errors.As(err, &nt) || len(nt.Result.Skipped) != 2 || !strings.Contains(err.Error(), "linux/s390x") {
		t.Errorf("no tag for s390x: err = %v", err)
	}
}

func skipEqual(a, b resolve.Skip) bool {
	return a.Tag == b.Tag && a.Reason == b.Reason && slices.Equal(a.Platforms, b.Platforms) && slices.Equal(a.Missing, b.Missing)
}

func TestSinglePlatformImageJudgedByConfig(t *testing.T) {
	s := rt.New(t)
	s.Push(t, "app", "2.0.0", rt.Image(day(2), "linux/arm/v7"))
	s.Push(t, "app", "1.0.0", rt.Image(day(1), "linux/arm64"))
	r := newResolver(t)
	if res := mustResolve(t, r, s, "app", resolve.PolicySpec{Platforms: []string{"linux/arm64"}}); res.Tag != "1.0.0" {
		t.Errorf("linux/arm64: tag %q, want 1.0.0", res.Tag)
	}
	if res := mustResolve(t, r, s, "app", resolve.PolicySpec{Platforms: []string{"linux/arm"}}); res.Tag != "2.0.0" {
		t.Errorf("linux/arm accepts linux/arm/v7: tag %q, want 2.0.0", res.Tag)
	}
}

func TestPagination(t *testing.T) {
	tests := []struct {
		name      string
		opts      []rt.Option
		pageSize  int
		wantPages int
	}{
		{"registry pages of 100", []rt.Option{rt.WithPageSize(100)}, 100, 25},
		{"registry rejects n, then serves its own pages", []rt.Option{rt.WithPageSize(100), rt.WithRejectPageSize()}, 1000, 26},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := rt.New(t, tt.opts...)
			s.Push(t, "many", "1.0.0", rt.Image(day(1), "linux/amd64"))
			d := s.Digest(t, "many", "1.0.0")
			for i := 1; i < 2500; i++ {
				s.Tag(t, "many", fmt.Sprintf("1.0.%d", i), d)
			}
			r := newResolver(t, resolve.WithPageSize(tt.pageSize))
			res := mustResolve(t, r, s, "many", resolve.PolicySpec{})
			if res.Tag != "1.0.2499" || res.Candidates != 2500 {
				t.Errorf("tag %q from %d candidates, want 1.0.2499 from 2500", res.Tag, res.Candidates)
			}
			if got := s.Count(rt.Tags); got != tt.wantPages {
				t.Errorf("tag list requests = %d, want %d", got, tt.wantPages)
			}
		})
	}
}

func TestAuth(t *testing.T) {
	for _, mode := range []string{"basic", "bearer"} {
		t.Run(mode, func(t *testing.T) {
			opt := rt.WithBasicAuth("robot", "s3cret-pass")
			if mode == "bearer" {
				opt = rt.WithBearerAuth("robot", "s3cret-pass")
			}
			s := rt.New(t, opt)
			pushTags(t, s, "private", "1.0.0", "1.1.0")
			good := newResolver(t, resolve.WithKeychain(staticKeychain{s.Host, "robot", "s3cret-pass"}))
			res := mustResolve(t, good, s, "private", resolve.PolicySpec{Platforms: []string{"linux/amd64"}})
			if res.Tag != "1.1.0" {
				t.Errorf("tag = %q", res.Tag)
			}
			if mode == "bearer" && s.Count(rt.Token) != 1 {
				t.Errorf("token requests = %d, want 1 (one token for the repository, reused)", s.Count(rt.Token))
			}
			bad := newResolver(t, resolve.WithKeychain(staticKeychain{s.Host, "robot", "wrong-pass"}))
			_, err := resolveIn(t, bad, s, "private", resolve.PolicySpec{})
			var re *resolve.RegistryError
			if !errors.As(err, &re) {
				t.Fatalf("wrong credentials: err = %v, want *RegistryError", err)
			}
			if strings.Contains(err.Error(), "wrong-pass") || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error leaks the secret: %v", err)
			}
		})
	}
}

type staticKeychain struct{ host, user, pass string }

func (k staticKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if r.RegistryStr() == k.host {
		return &authn.Basic{Username: k.user, Password: k.pass}, nil
	}
	return authn.Anonymous, nil
}

func TestRetryAfterHonoured(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "1.0.0")
	s.Inject(rt.Fault{Kind: rt.Tags, Status: http.StatusTooManyRequests, RetryAfter: "1", Times: 1})
	res := mustResolve(t, newResolver(t), s, "app", resolve.PolicySpec{})
	if res.Tag != "1.0.0" {
		t.Fatalf("tag = %q", res.Tag)
	}
	var tagReqs []rt.Request
	for _, r := range s.Requests() {
		if r.Kind == rt.Tags {
			tagReqs = append(tagReqs, r)
		}
	}
	if len(tagReqs) != 2 || tagReqs[0].Status != 429 || tagReqs[1].Status != 200 {
		t.Fatalf("tag requests = %+v, want a 429 then a 200", tagReqs)
	}
	if gap := tagReqs[1].At.Sub(tagReqs[0].At); gap < time.Second {
		t.Errorf("retried after %v, before Retry-After: 1", gap)
	}
}

func TestRetryAfterTooLongReturnsRegistryAnswer(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "1.0.0")
	s.Inject(rt.Fault{Kind: rt.Tags, Status: http.StatusTooManyRequests, RetryAfter: "3600"})
	_, err := resolveIn(t, newResolver(t), s, "app", resolve.PolicySpec{})
	var re *resolve.RegistryError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "TOOMANYREQUESTS") {
		t.Fatalf("err = %v, want the registry's 429 answer", err)
	}
	if n := s.Count(rt.Tags); n != 1 {
		t.Errorf("tag requests = %d, want 1: a wait longer than MaxWait is not waited", n)
	}
}

// A candidate whose metadata cannot be read must fail the resolution, not be ranked out.
func TestNoPartialAnswers(t *testing.T) {
	s := rt.New(t)
	s.Push(t, "app", "older", rt.Image(day(1), "linux/amd64", rt.WithSeed("older")))
	s.Push(t, "app", "newer", rt.Image(day(2), "linux/amd64", rt.WithSeed("newer")))
	cfg := configDigest(t, s, "app", "newer")
	s.Inject(rt.Fault{Kind: rt.BlobGet, PathContains: cfg, Status: http.StatusInternalServerError})
	_, err := resolveIn(t, newResolver(t), s, "app", resolve.PolicySpec{Strategy: "newest-build"})
	var re *resolve.RegistryError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want a registry error (never the older tag)", err)
	}
	// The platform walk too: the best semver tag's manifest fails; 1.0.0 must not win.
	s2 := rt.New(t)
	pushTags(t, s2, "app", "1.0.0", "2.0.0")
	s2.Inject(rt.Fault{Kind: rt.ManifestGet, PathContains: "2.0.0", Status: http.StatusServiceUnavailable})
	_, err = resolveIn(t, newResolver(t), s2, "app", resolve.PolicySpec{Platforms: []string{"linux/amd64"}})
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "2.0.0") {
		t.Fatalf("err = %v, want a registry error naming 2.0.0", err)
	}
}

func configDigest(t *testing.T, s *rt.Server, repo, tag string) string {
	t.Helper()
	reg, err := resolve.NewRemote()
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.NewRepository(s.Ref(repo))
	m, err := reg.Manifest(context.Background(), ref, tag)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(m.Raw), `"config"`)
	j := strings.Index(string(m.Raw[i:]), "sha256:")
	return string(m.Raw[i+j : i+j+71])
}

// Request budgets from DESIGN.md: counted exactly at the registry.
func TestRequestBudgets(t *testing.T) {
	t.Run("semver over 1,000 tags with a platform check", func(t *testing.T) {
		s := rt.New(t, rt.WithPageSize(100))
		s.PushIndex(t, "app", "1.0.0", rt.Index(day(1), []string{"linux/amd64", "linux/arm64"}))
		d := s.Digest(t, "app", "1.0.0")
		for i := 1; i < 1000; i++ {
			s.Tag(t, "app", fmt.Sprintf("1.0.%d", i), d)
		}
		s.ResetCounts()
		res := mustResolve(t, newResolver(t), s, "app", resolve.PolicySpec{Platforms: []string{"linux/arm64"}})
		if res.Tag != "1.0.999" {
			t.Fatalf("tag = %q", res.Tag)
		}
		pages := s.Count(rt.Tags)
		if pages != 10 {
			t.Errorf("tag pages = %d, want 10", pages)
		}
		if other := s.Total() - pages - s.Count(rt.Ping); other > 3 {
			t.Errorf("requests besides list pages and ping = %d (%v), want at most 3", other, s.Counts())
		}
	})
	t.Run("newest-build over N candidates", func(t *testing.T) {
		const n = 20
		s := rt.New(t)
		for i := range n {
			if i%2 == 0 {
				s.PushIndex(t, "app", fmt.Sprintf("b%02d", i), rt.Index(day(i), []string{"linux/amd64", "linux/arm64"}, rt.WithSeed(fmt.Sprint(i))))
			} else {
				s.Push(t, "app", fmt.Sprintf("b%02d", i), rt.Image(day(i), "linux/amd64", rt.WithSeed(fmt.Sprint(i))))
			}
		}
		s.ResetCounts()
		res := mustResolve(t, newResolver(t), s, "app", resolve.PolicySpec{Strategy: "newest-build", Platforms: []string{"linux/amd64"}})
		if res.Tag != "b19" {
			t.Fatalf("tag = %q", res.Tag)
		}
		if other := s.Total() - s.Count(rt.Tags) - s.Count(rt.Ping); other > 3*n {
			t.Errorf("requests besides list and ping = %d (%v), want at most %d", other, s.Counts(), 3*n)
		}
	})
	t.Run("semver without platforms costs one HEAD", func(t *testing.T) {
		s := rt.New(t)
		pushTags(t, s, "app", "1.0.0", "1.1.0")
		s.ResetCounts()
		mustResolve(t, newResolver(t), s, "app", resolve.PolicySpec{})
		if c := s.Counts(); c[rt.Tags] != 1 || c[rt.ManifestHead] != 1 || c[rt.ManifestGet] != 0 || c[rt.BlobGet] != 0 {
			t.Errorf("counts = %v, want one list and one HEAD", c)
		}
	})
}

func TestRegistriesConfigEndpoint(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "demo/web", "1.0.0", "1.2.0")
	cfgs, err := resolve.ParseRegistries("test", []byte(fmt.Sprintf("registries:\n- prefix: registry.demo.local\n  api: %q\n  insecure: true\n", s.Host)))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := resolve.NewRemote(resolve.WithRegistries(cfgs), resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	repo, written, _, err := resolve.ParseImageSpec("registry.demo.local/demo/web")
	if err != nil {
		t.Fatal(err)
	}
	res, err := resolve.NewResolver(reg).Resolve(context.Background(), repo, written, resolve.PolicySpec{}.MustCompile())
	if err != nil {
		t.Fatal(err)
	}
	if res.Reference != "registry.demo.local/demo/web:1.2.0" {
		t.Errorf("reference = %q: the written host must be kept", res.Reference)
	}
}

func TestParseRegistriesErrors(t *testing.T) {
	tests := []struct{ yaml, want string }{
		{"registries:\n- prefix: ghcr.io\n  insecur: true\n", `unknown field "insecur"`},
		{"registries:\n- prefix: ''\n", "registries[0].prefix"},
		{"registries:\n- prefix: ghcr.io\n  api: 'http://x'\n", "registries[0].api"},
		{"registries:\n- prefix: ghcr.io\n- prefix: ghcr.io/\n", "each prefix once"},
	}
	for _, tt := range tests {
		_, err := resolve.ParseRegistries("f.yaml", []byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "f.yaml") {
			t.Errorf("ParseRegistries(%q) = %v, want an error naming f.yaml and %q", tt.yaml, err, tt.want)
		}
	}
}

// peakRegistry is a Registry that records how many Manifest reads are in flight at
// once, in front of the real client.
type peakRegistry struct {
	resolve.Registry
	mu        sync.Mutex
	now, peak int
}

func (p *peakRegistry) Manifest(ctx context.Context, repo name.Repository, ref string) (*resolve.Manifest, error) {
	p.mu.Lock()
	p.now++
	p.peak = max(p.peak, p.now)
	p.mu.Unlock()
	defer func() { p.mu.Lock(); p.now--; p.mu.Unlock() }()
	return p.Registry.Manifest(ctx, repo, ref)
}

// Many cold newest-build resolutions at once inspect at most the concurrency bound
// of tags on one registry in all, not the bound each (the daemon's memory under many
// renders), and each still gets its answer.
func TestInspectionBoundSharedAcrossResolutions(t *testing.T) {
	s := rt.New(t)
	for _, repo := range []string{"a", "b", "c", "d"} {
		for i := range 12 {
			s.Push(t, repo, fmt.Sprintf("build-%d", i), rt.Image(day(i), "linux/amd64", rt.WithSeed(repo+strconv.Itoa(i))))
		}
	}
	s.SetLatency(5 * time.Millisecond)
	remote, err := resolve.NewRemote(resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	peak := &peakRegistry{Registry: remote}
	r := resolve.NewResolver(peak, resolve.WithConcurrency(3))
	var wg sync.WaitGroup
	for _, repo := range []string{"a", "b", "c", "d"} {
		wg.Go(func() {
			res, err := resolveIn(t, r, s, repo, resolve.PolicySpec{Strategy: "newest-build"})
			if err != nil || res.Tag != "build-11" {
				t.Errorf("%s: %+v, %v; want build-11", repo, res, err)
			}
		})
	}
	wg.Wait()
	if peak.peak > 3 {
		t.Errorf("%d manifests read at once by 4 resolutions with a bound of 3; want at most 3", peak.peak)
	}
}

// inspectorWorkers is how many goroutines are inspecting a resolution's tags
// (the inspector's workers), waiting or not.
func inspectorWorkers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "resolve.(*inspector).work(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// A resolution's tags are inspected by workers that take tag after tag, at most
// the concurrency bound at once and every tag once; they are all gone when the
// resolution returns, when it fails too (a tag's manifest unreadable), and when
// it stops before reading the tag list whole (its page failing).
func TestInspectionWorkersEnd(t *testing.T) {
	s := rt.New(t, rt.WithPageSize(10))
	for i := range 40 {
		s.Push(t, "app", fmt.Sprintf("build-%02d", i), rt.Image(day(i), "linux/amd64", rt.WithSeed(strconv.Itoa(i))))
	}
	remote, err := resolve.NewRemote(resolve.WithRetry(resolve.RetryPolicy{Attempts: 1}),
		resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	ended := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); inspectorWorkers() > 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d inspector workers left", what, inspectorWorkers())
			}
		}
	}
	peak := &peakRegistry{Registry: remote}
	r := resolve.NewResolver(peak, resolve.WithConcurrency(4))
	res, err := resolveIn(t, r, s, "app", resolve.PolicySpec{Strategy: "newest-build"})
	if err != nil || res.Tag != "build-39" {
		t.Fatalf("%+v, %v; want build-39", res, err)
	}
	if n := inspectorWorkers(); n != 0 {
		t.Errorf("%d inspector workers left after the resolution returned; want 0", n)
	}
	if peak.peak > 4 {
		t.Errorf("%d manifests read at once with a bound of 4; want at most 4", peak.peak)
	}
	if got := s.Count(rt.ManifestGet); got != 40 {
		t.Errorf("%d manifest reads for 40 single-image tags; want 40 (each tag once)", got)
	}

	// A manifest that fails: the resolution fails, its workers end.
	s.Inject(rt.Fault{Kind: rt.ManifestGet, PathContains: "build-20", Status: http.StatusNotFound})
	r = resolve.NewResolver(remote, resolve.WithConcurrency(4))
	if _, err := resolveIn(t, r, s, "app", resolve.PolicySpec{Strategy: "newest-build"}); err == nil {
		t.Fatal("resolved with build-20's manifest failing; want an error")
	}
	ended("a manifest failing")

	// The tag list's last page fails: the workers started by the pages before end.
	s.ClearFaults()
	s.Inject(rt.Fault{Kind: rt.Tags, PathContains: "last=build-29", Status: http.StatusNotFound})
	r = resolve.NewResolver(remote, resolve.WithConcurrency(4))
	if _, err := resolveIn(t, r, s, "app", resolve.PolicySpec{Strategy: "newest-build"}); err == nil {
		t.Fatal("resolved with the tag list's last page failing; want an error")
	}
	ended("the tag list failing")
}

// Identical requests in a batch (two fields of one image, as a render sends them)
// are resolved once and answered alike, in order: the resolver is the one place
// requests are deduplicated. Without the Remote's own memo, a second resolution
// would read the tag list again.
func TestResolveBatchResolvesIdenticalRequestsOnce(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "web", "1.0.0", "1.1.0")
	pushTags(t, s, "api", "2.0.0")
	resolutions := 0
	var mu sync.Mutex
	reg, err := resolve.NewRemote(resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain()), resolve.WithoutMemo())
	if err != nil {
		t.Fatal(err)
	}
	r := resolve.NewResolver(reg, resolve.WithObserver(func(resolve.Request, resolve.Answer, time.Duration) {
		mu.Lock()
		resolutions++
		mu.Unlock()
	}))
	web := resolve.Request{Image: s.Ref("web"), Policy: resolve.PolicySpec{Constraint: "~1"}}
	arm := resolve.Request{Image: s.Ref("web"), Policy: resolve.PolicySpec{Constraint: "~1", Platforms: []string{"linux/arm64"}}}
	api := resolve.Request{Image: s.Ref("api")}
	answers, err := r.ResolveBatch(context.Background(), "app", []resolve.Request{web, api, web, arm, web})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range answers {
		if a.Error != "" {
			got = append(got, "error")
		} else {
			got = append(got, a.Result.Tag)
		}
	}
	if want := []string{"1.1.0", "2.0.0", "1.1.0", "error", "1.1.0"}; !slices.Equal(got, want) {
		t.Errorf("answers %v, want %v (arm64: no such platform)", got, want)
	}
	if resolutions != 3 {
		t.Errorf("%d resolutions for 3 distinct requests of 5", resolutions)
	}
	// web and arm are distinct requests of one repository: one tag list each, as
	// the Remote holds no memo; api one.
	if n := s.Count(rt.Tags); n != 3 {
		t.Errorf("%d tag list requests, want 3 (%v)", n, s.Counts())
	}
}
