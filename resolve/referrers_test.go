package resolve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// Remote.Referrers: the registry's list; a registry without the API, or an
// answer that is not an index, is ErrReferrersUnsupported; a failing registry
// is a *RegistryError after retries; a list over the byte cap is a
// *ReferrersLimitError.
func TestRemoteReferrers(t *testing.T) {
	index := http.Header{"Content-Type": {string(types.OCIImageIndex)}}
	cases := []struct {
		name        string
		opts        []rt.Option
		fault       *rt.Fault
		unsupported bool
		registryErr bool
		limit       bool
		referrers   int // requests
	}{
		{name: "API", referrers: 1},
		{name: "no API (404)", opts: []rt.Option{rt.WithoutReferrers()}, unsupported: true, referrers: 1},
		{name: "400", fault: &rt.Fault{Kind: rt.Referrers, Status: 400}, unsupported: true, referrers: 1},
		{name: "406", fault: &rt.Fault{Kind: rt.Referrers, Status: 406}, unsupported: true, referrers: 1},
		{name: "not an index", fault: &rt.Fault{Kind: rt.Referrers, Body: []byte(`<html>`), Header: http.Header{"Content-Type": {"text/html"}}}, unsupported: true, referrers: 1},
		{name: "an index media type, not an index", fault: &rt.Fault{Kind: rt.Referrers, Body: []byte(`{"schemaVersion":2}`), Header: index}, unsupported: true, referrers: 1},
		{name: "503", fault: &rt.Fault{Kind: rt.Referrers, Status: 503}, registryErr: true, referrers: fastRetry.Attempts},
		{name: "over the cap", fault: &rt.Fault{Kind: rt.Referrers, Body: bytes.Repeat([]byte(" "), 2<<20), Header: index}, limit: true, referrers: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := rt.New(t, c.opts...)
			img := rt.Image(t0, "linux/amd64")
			s.Push(t, "app", "1.0.0", img)
			d, _ := img.Digest()
			if c.fault != nil {
				s.Inject(*c.fault)
			}
			reg, err := resolve.NewRemote(resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain()), resolve.WithSignatureLimits(1<<20))
			if err != nil {
				t.Fatal(err)
			}
			m, err := reg.Referrers(context.Background(), repoRef(t, s, "app"), d)
			var re *resolve.RegistryError
			var le *resolve.ReferrersLimitError
			switch {
			case c.unsupported && !errors.Is(err, resolve.ErrReferrersUnsupported),
				c.registryErr && (!errors.As(err, &re) || errors.Is(err, resolve.ErrReferrersUnsupported)),
				c.limit && (!errors.As(err, &le) || le.Max != 1<<20),
				!c.unsupported && !c.registryErr && !c.limit && err != nil:
				t.Fatalf("Referrers = %v", err)
			}
			if err == nil {
				var idx v1.IndexManifest
				if m.MediaType != types.OCIImageIndex || json.Unmarshal(m.Raw, &idx) != nil || len(idx.Manifests) != 0 {
					t.Errorf("list %s %s", m.MediaType, m.Raw)
				}
			}
			if got := s.Count(rt.Referrers); got != c.referrers {
				t.Errorf("%d referrers requests, want %d", got, c.referrers)
			}
			if s.Count(rt.ManifestGet) != 0 {
				t.Errorf("Referrers read a fallback tag itself")
			}
		})
	}
}

func repoRef(t testing.TB, s *rt.Server, repo string) name.Repository {
	t.Helper()
	r, err := name.NewRepository(s.Ref(repo))
	if err != nil {
		t.Fatal(err)
	}
	return r
}
