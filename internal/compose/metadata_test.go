package compose

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// TestMetadataAPIsByEntryAndHost: the API of a registries entry, else of the
// host; none elsewhere. An API that fails is paused: the next resolutions use
// the OCI protocol without asking it (one fallback counted), and still give
// the OCI answer.
func TestMetadataAPIsByEntryAndHost(t *testing.T) {
	s := rt.New(t)
	for i, tag := range []string{"1.0.0", "1.1.0"} {
		s.Push(t, "proj/app", tag, rt.Image(time.Date(2026, 1, 1+i, 0, 0, 0, 0, time.UTC), "linux/amd64", rt.WithSeed(tag)))
	}
	api := s.HarborAPI(t)
	c := config.DefaultConfig()
	c.Registries = []resolve.RegistryConfig{{Prefix: "harbor.example.com", API: s.Host, Insecure: true, MetadataAPI: resolve.MetadataHarbor, MetadataURL: api.URL}}
	remote, _, err := NewRemote(c, nil, slog.New(slog.DiscardHandler), resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	m := cache.NewMetrics()
	b := &metadataAPIs{c: c, remote: remote, log: slog.New(slog.DiscardHandler), table: resolve.NewRegistryTable(c.Registries)}
	for ref, want := range map[string]string{
		"harbor.example.com/proj/app": resolve.MetadataHarbor, "docker.io/library/nginx": resolve.MetadataDockerHub,
		"quay.io/ns/app": resolve.MetadataQuay, "ghcr.io/org/app": "", "europe-docker.pkg.dev/p/r/app": resolve.MetadataGAR,
	} {
		got := ""
		repo, err := name.NewRepository(ref)
		if err != nil {
			t.Fatal(err)
		}
		if a := b.For(repo); a != nil {
			got = a.Name()
		}
		if got != want {
			t.Errorf("%s: metadata API %q, want %q", ref, got, want)
		}
	}

	r, err := NewResolver(c, remote, nil, slog.New(slog.DiscardHandler), MetadataAPIs(c, remote, nil, m, slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := resolve.PolicySpec{Strategy: "newest-build", Platforms: []string{"linux/amd64"}}.Compile()
	repo, err := name.NewRepository("harbor.example.com/proj/app")
	if err != nil {
		t.Fatal(err)
	}
	api.Inject(rt.APIFault{Kind: rt.APIPage, Status: 500})
	first := 0
	for i := range 3 {
		res, err := r.Resolve(context.Background(), repo, repo.String(), p)
		if err != nil || res.Tag != "1.1.0" || res.MetadataAPI != "" || res.MetadataFallback == "" {
			t.Fatalf("resolution %d: %+v, %v", i, res, err)
		}
		if i == 0 {
			first = api.Total() // the transport's retries of the 500
		}
	}
	if got := api.Total(); first == 0 || got != first {
		t.Errorf("API asked %d times by the first resolution, %d by the next two; want none (paused)", first, got-first)
	}
	if got := testutil.ToFloat64(m.MetadataFallbacks.WithLabelValues(resolve.MetadataHarbor)); got != 1 {
		t.Errorf("fallbacks counted %v, want 1", got)
	}
}
