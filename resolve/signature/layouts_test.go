package signature_test

import (
	"context"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

// Each layout, keyless and key, verifies; the source says where it was found.
func TestLayouts(t *testing.T) {
	// Requests with the tag list unknown (Subject.Tags nil): every fallback tag
	// is asked for.
	cases := []struct {
		layout signtest.Layout
		noAPI  bool
		source string
		want   map[rt.Kind]int
	}{
		// the list, the bundle manifest, the bundle
		{signtest.Referrers, false, "referrers", map[rt.Kind]int{rt.Ping: 1, rt.Referrers: 1, rt.ManifestGet: 1, rt.BlobGet: 1}},
		// 404 from the API, the sha256-<hex> index, the bundle manifest, the bundle
		{signtest.ReferrersTag, true, "referrers-tag", map[rt.Kind]int{rt.Ping: 1, rt.Referrers: 1, rt.ManifestGet: 2, rt.BlobGet: 1}},
		// an empty list, the .sig manifest, its payload
		{signtest.CosignTag, false, "cosign-tag", map[rt.Kind]int{rt.Ping: 1, rt.Referrers: 1, rt.ManifestGet: 1, rt.BlobGet: 1}},
		// 404 from the API, 404 for sha256-<hex>, the .sig manifest, its payload
		{signtest.CosignTag, true, "cosign-tag", map[rt.Kind]int{rt.Ping: 1, rt.Referrers: 1, rt.ManifestGet: 2, rt.BlobGet: 1}},
	}
	for _, c := range cases {
		for _, mode := range []string{"keyless", "key"} {
			t.Run(string(c.layout)+"/"+mode+map[bool]string{true: "/no-referrers-api"}[c.noAPI], func(t *testing.T) {
				var opts []rt.Option
				if c.noAPI {
					opts = append(opts, rt.WithoutReferrers())
				}
				e := newEnv(t, opts...)
				d := e.push("app", "1.0.0")
				spec, trust := keyless(release), trustKeyless(t, release, ghIssuer)
				want := resolve.Verified{Identity: release, Issuer: ghIssuer, Digest: d.String(), Source: c.source}
				if mode == "key" {
					spec, trust = keyed("release"), trustKey(t, "release")
					want = resolve.Verified{Key: "release", Digest: d.String(), Source: c.source}
				}
				e.sign("app", d, c.layout, spec)
				got, err := e.verifier(e.reg).Verify(context.Background(), subject(e, "app", d, nil), trust)
				if err != nil {
					t.Fatalf("Verify: %v (requests %v)", err, e.s.Counts())
				}
				if *got != want {
					t.Errorf("got %+v, want %+v", *got, want)
				}
				assertCounts(t, e.s, c.want)
			})
		}
	}
}
