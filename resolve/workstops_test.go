package resolve_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// manyTags is the size of the tag list the hostile filter tests match over.
const manyTags = 100_000

// pathologicalFilter is a 26-byte expression of 273 instructions whose matching
// costs about 10 ns per instruction and byte of tag (nested stars): over 100,000
// tags of 120 bytes, tens of seconds of a core.
const pathologicalFilter = `regexp:(([a-z0-9]*)*[a-z]){30}$`

var (
	manyOnce sync.Once
	manyErr  error
	manySrv  *rt.Server
)

// manyTagServer is a registry with "many": manyTags tags of about 120 bytes (a
// few of them semantic versions 1.0.0 to 1.0.99), 5,000 a page with Link
// pagination; built once for the package's tests.
func manyTagServer(t *testing.T) *rt.Server {
	t.Helper()
	manyOnce.Do(func() { manySrv, manyErr = seedManyTags(manyTags) })
	if manyErr != nil {
		t.Fatal(manyErr)
	}
	return manySrv
}

func seedManyTags(n int) (*rt.Server, error) {
	s, err := rt.NewServer(rt.WithPageSize(5000))
	if err != nil {
		return nil, err
	}
	if err := s.PushE("many", "1.0.0", rt.Image(t0, "linux/amd64")); err != nil {
		return nil, err
	}
	for _, tag := range ManyTagNames(n - 1) { // and 1.0.0
		if err := s.TagE("many", tag, "1.0.0"); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ManyTagNames is n tag names: 1.0.1 to 1.0.99, then build-NNNNNN- and random
// lowercase letters and digits, 120 bytes in all.
func ManyTagNames(n int) []string {
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	tags := make([]string, 0, n)
	for i := 1; i < 100 && len(tags) < n; i++ {
		tags = append(tags, fmt.Sprintf("1.0.%d", i))
	}
	b := make([]byte, 120-len("build-000000-"))
	for i := 0; len(tags) < n; i++ {
		for j := range b {
			b[j] = alphabet[r.IntN(len(alphabet))]
		}
		tags = append(tags, fmt.Sprintf("build-%06d-%s", i, b))
	}
	return tags
}

func resolveMany(ctx context.Context, t *testing.T, s *rt.Server, spec resolve.PolicySpec, opts ...resolve.ResolverOption) (*resolve.Result, error) {
	t.Helper()
	reg, err := resolve.NewRemote(resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	p, err := spec.Compile()
	if err != nil {
		t.Fatal(err)
	}
	repo, err := name.NewRepository(s.Ref("many"))
	if err != nil {
		t.Fatal(err)
	}
	return resolve.NewResolver(reg, opts...).Resolve(ctx, repo, s.Ref("many"), p)
}

// A filter over 100,000 tags of 120 bytes is done, refused by name or stopped
// within 10 s: an ordinary one resolves, a pathological one is refused before any
// tag is matched, naming the filter, its size, the tags and the bound; one let
// through by a raised bound stops with its context.
func TestFilterOver100000TagsWithin10s(t *testing.T) {
	s := manyTagServer(t)
	cases := []struct {
		name    string
		spec    resolve.PolicySpec
		opts    []resolve.ResolverOption
		timeout time.Duration
		want    string   // the chosen tag, or
		errHas  []string // the error's parts
		is      error
	}{
		{name: "ordinary regexp resolves", spec: resolve.PolicySpec{AllowTags: `regexp:^1\.0\.[0-9]+$`}, want: "1.0.99"},
		{name: "pathological allow-tags refused", spec: resolve.PolicySpec{AllowTags: pathologicalFilter},
			errHas: []string{"allow-tags", pathologicalFilter, "273 instructions", "100000 tags", "11988590 bytes",
				"at most 250000000", "tagFilterMaxCost", "narrow the expression or use a glob"}},
		{name: "pathological ignore-tags refused", spec: resolve.PolicySpec{IgnoreTags: []string{pathologicalFilter}},
			errHas: []string{"ignore-tags", pathologicalFilter, "100000 tags", "tagFilterMaxCost"}},
		{name: "raised bound: stopped at the deadline", spec: resolve.PolicySpec{AllowTags: pathologicalFilter},
			opts: []resolve.ResolverOption{resolve.WithTagFilterMaxCost(1 << 50)}, timeout: 3 * time.Second,
			errHas: []string{"stopped matching allow-tags", "of 100000 tags", "context deadline exceeded"}, is: context.DeadlineExceeded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			if c.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.timeout)
				defer cancel()
			}
			start := time.Now()
			res, err := resolveMany(ctx, t, s, c.spec, c.opts...)
			took := time.Since(start)
			t.Logf("%s: %s", c.name, took.Round(time.Millisecond))
			if took > 10*time.Second {
				t.Errorf("took %s, want within 10s", took)
			}
			if c.want != "" {
				if err != nil || res.Tag != c.want {
					t.Fatalf("got %v, %v; want %s", res, err, c.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("resolved %s, want an error", res.Tag)
			}
			for _, part := range c.errHas {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not say %q", err, part)
				}
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v is not %v", err, c.is)
			}
		})
	}
}
