package daemon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// The daemon's resolver reads through readingRegistry: it must hand the cache's
// manifest facts through, or the cache would keep every manifest and config whole again.
func TestReadingRegistryKeepsFactsNotDocuments(t *testing.T) {
	s := rt.New(t)
	for i := range 3 {
		tag := fmt.Sprintf("build-%d", i)
		s.PushIndex(t, "reading/app", tag, rt.Index(time.Date(2026, 1, 1+i, 0, 0, 0, 0, time.UTC), []string{"linux/amd64", "linux/arm64"}, rt.WithSeed(tag)))
	}
	remote, err := resolve.NewRemote(resolve.WithKeychain(authn.NewMultiKeychain()), resolve.WithoutMemo())
	if err != nil {
		t.Fatal(err)
	}
	reg := cache.NewRegistry(remote)
	t.Cleanup(reg.Close)
	reads := newReadingRegistry(reg)
	repo, err := name.NewRepository(s.Ref("reading/app"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := resolve.PolicySpec{Strategy: "newest-build", Platforms: []string{"linux/arm64"}}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	res, err := resolve.NewResolver(reads).Resolve(context.Background(), repo, repo.String(), p)
	if err != nil || res.Tag != "build-2" {
		t.Fatalf("resolved %+v, %v; want build-2", res, err)
	}
	layers := map[string]int{}
	for _, st := range reg.Stats() {
		layers[st.Layer] = st.Entries
	}
	if layers[cache.LayerFacts] != 6 || layers[cache.LayerBlob] != 0 || layers[cache.LayerManifest] != 0 {
		t.Errorf("cache layers %v, want 6 facts (3 indexes, 3 children), no blob, no manifest", layers)
	}
	if reads.reading(repo.String()) {
		t.Error("a read is still counted in flight after the resolution")
	}
}

// countingProbe is a registry view whose every read records whether the
// readingRegistry above it counted that read in flight while it ran.
type countingProbe struct {
	reads *readingRegistry
	seen  map[string]bool // method -> counted while it ran
}

func (p *countingProbe) note(method string, repo name.Repository) {
	p.seen[method] = p.reads.reading(repo.String())
}

func (p *countingProbe) ListTags(_ context.Context, repo name.Repository) ([]string, error) {
	p.note("ListTags", repo)
	return nil, nil
}

func (p *countingProbe) Head(_ context.Context, repo name.Repository, _ string) (v1.Descriptor, error) {
	p.note("Head", repo)
	return v1.Descriptor{}, nil
}

func (p *countingProbe) Manifest(_ context.Context, repo name.Repository, _ string) (*resolve.Manifest, error) {
	p.note("Manifest", repo)
	return nil, nil
}

func (p *countingProbe) Blob(_ context.Context, repo name.Repository, _ v1.Hash) ([]byte, error) {
	p.note("Blob", repo)
	return nil, nil
}

func (p *countingProbe) Referrers(_ context.Context, repo name.Repository, _ v1.Hash) (*resolve.Manifest, error) {
	p.note("Referrers", repo)
	return nil, nil
}

func (p *countingProbe) ManifestFacts(_ context.Context, repo name.Repository, _ string, _ resolve.DeriveFacts) (resolve.ManifestFacts, error) {
	p.note("ManifestFacts", repo)
	return resolve.ManifestFacts{}, nil
}

// TestReadingRegistryCountsEveryRead: each read through readingRegistry is
// counted in flight while it runs (a method left to the embedded view would
// not be, and a render that gave up would be told nothing is being read), and
// none is left counted after.
func TestReadingRegistryCountsEveryRead(t *testing.T) {
	probe := &countingProbe{seen: map[string]bool{}}
	reads := newReadingRegistry(probe)
	probe.reads = reads
	repo := name.MustParseReference("registry.example/team/app:1").Context()
	ctx := context.Background()
	_, _ = reads.ListTags(ctx, repo)
	_, _ = reads.Head(ctx, repo, "1")
	_, _ = reads.Manifest(ctx, repo, "1")
	_, _ = reads.Blob(ctx, repo, v1.Hash{})
	_, _ = reads.Referrers(ctx, repo, v1.Hash{})
	_, _ = reads.ManifestFacts(ctx, repo, "1", nil)
	for _, m := range []string{"ListTags", "Head", "Manifest", "Blob", "Referrers", "ManifestFacts"} {
		counted, called := probe.seen[m]
		if !called || !counted {
			t.Errorf("%s: called %v, counted in flight %v; want both", m, called, counted)
		}
	}
	if reads.reading(repo.String()) {
		t.Error("a read is still counted after all returned")
	}
}
