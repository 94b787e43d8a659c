package daemon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

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
