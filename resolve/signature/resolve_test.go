package signature_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

func resolveSigned(t testing.TB, reg resolve.Registry, v resolve.SignatureVerifier, repo name.Repository, spec resolve.PolicySpec) (*resolve.Result, error) {
	t.Helper()
	p, err := spec.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return resolve.NewResolver(reg, resolve.WithSignatureVerifier(v)).Resolve(context.Background(), repo, repo.String(), p)
}

var verifyRelease = resolve.VerifySpec{Identity: release, Issuer: ghIssuer}

// The newest tag unsigned and the next signed: the next wins, the newest is
// skipped with its reason.
func TestNewestUnsignedNextSigned(t *testing.T) {
	for _, noAPI := range []bool{false, true} {
		t.Run(fmt.Sprintf("no-referrers-api=%v", noAPI), func(t *testing.T) {
			var opts []rt.Option
			if noAPI {
				opts = append(opts, rt.WithoutReferrers())
			}
			e := newEnv(t, opts...)
			e.push("app", "1.2.0")
			signed := e.push("app", "1.1.0")
			e.push("app", "1.0.0")
			layout := signtest.Referrers
			if noAPI {
				layout = signtest.ReferrersTag
			}
			e.sign("app", signed, layout, keyless(release))
			res, err := resolveSigned(t, e.reg, e.verifier(e.reg), e.repo("app"), resolve.PolicySpec{Strategy: "semver", Verify: verifyRelease})
			if err != nil {
				t.Fatal(err)
			}
			if res.Tag != "1.1.0" || res.Verified == nil || res.Verified.Identity != release || res.Verified.Digest != signed.String() {
				t.Fatalf("chose %s, verified %+v", res.Tag, res.Verified)
			}
			if len(res.Skipped) != 1 || res.Skipped[0].Tag != "1.2.0" || res.Skipped[0].Reason != "signature: unsigned" {
				t.Errorf("skipped %+v", res.Skipped)
			}
			// With the API: tags, HEAD + referrers per candidate, the bundle
			// manifest and bundle. Without: one 404 from the API for the
			// registry; the listed tags say 1.2.0 has no sha256-<hex> tag and no
			// .sig, so only 1.1.0's referrers tag is read.
			want := map[rt.Kind]int{rt.Ping: 1, rt.Tags: 1, rt.ManifestHead: 2, rt.Referrers: 2, rt.ManifestGet: 1, rt.BlobGet: 1}
			if noAPI {
				want = map[rt.Kind]int{rt.Ping: 1, rt.Tags: 1, rt.ManifestHead: 2, rt.Referrers: 1, rt.ManifestGet: 2, rt.BlobGet: 1}
			}
			assertCounts(t, e.s, want)
		})
	}
}

// A registry without the referrers API costs one 404 however many candidates,
// and falls back without error.
func TestNoReferrersAPIOneNotFound(t *testing.T) {
	e := newEnv(t, rt.WithoutReferrers())
	var ds []v1.Hash
	for i := range 5 {
		ds = append(ds, e.push("app", fmt.Sprintf("1.%d.0", i)))
	}
	e.sign("app", ds[0], signtest.ReferrersTag, keyless(release))
	v := e.verifier(e.reg)
	for i, d := range ds {
		_, err := v.Verify(context.Background(), subject(e, "app", d, nil), kl(t))
		var ue *resolve.UnverifiedError
		if (i == 0) != (err == nil) || (i > 0 && !errors.As(err, &ue)) {
			t.Fatalf("candidate %d: %v", i, err)
		}
	}
	// One 404 for the registry; per candidate the sha256-<hex> tag (1 found, 4
	// 404s), and .sig for the 4 unsigned; the bundle manifest and bundle.
	assertCounts(t, e.s, map[rt.Kind]int{rt.Ping: 1, rt.Referrers: 1, rt.ManifestGet: 5 + 4 + 1, rt.BlobGet: 1})
}

// A multi-platform tag is accepted when its index digest is signed; a signature
// on a platform manifest only does not count.
func TestIndexVersusPlatformManifest(t *testing.T) {
	e := newEnv(t)
	signedIdx, _ := e.pushIndex("app", "2.0.0", "linux/amd64", "linux/arm64")
	_, platforms := e.pushIndex("app", "1.9.0", "linux/amd64", "linux/arm64")
	e.sign("app", signedIdx, signtest.Referrers, keyless(release))
	e.sign("app", platforms[0], signtest.Referrers, keyless(release))
	res, err := resolveSigned(t, e.reg, e.verifier(e.reg), e.repo("app"), resolve.PolicySpec{Strategy: "semver", Verify: verifyRelease, Platforms: []string{"linux/amd64"}})
	if err != nil || res.Tag != "2.0.0" || res.Verified.Digest != signedIdx.String() {
		t.Fatalf("resolve = %+v, %v", res, err)
	}
	res, err = resolveSigned(t, e.reg, e.verifier(e.reg), e.repo("app"), resolve.PolicySpec{Strategy: "semver", Constraint: "<2", Verify: verifyRelease})
	var nt *resolve.NoTagError
	if !errors.As(err, &nt) || !strings.Contains(err.Error(), "1.9.0: unsigned") {
		t.Fatalf("resolve of a tag signed on a platform manifest only = %+v, %v", res, err)
	}
}

// Verdicts are cached: a success for the success TTL, a failure for the
// shorter failure TTL, after which a signature added meanwhile is seen.
func TestVerdictCache(t *testing.T) {
	e := newEnv(t)
	signed := e.push("app", "1.0.0")
	unsigned := e.push("app", "1.1.0")
	e.sign("app", signed, signtest.Referrers, keyless(release))
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	v := e.verifier(e.reg, signature.WithClock(clock), signature.WithVerdictTTL(time.Hour, time.Minute))
	ctx := context.Background()
	verify := func(d v1.Hash) error {
		_, err := v.Verify(ctx, subject(e, "app", d, nil), kl(t))
		return err
	}
	if verify(signed) != nil || verify(unsigned) == nil {
		t.Fatal("first verification")
	}
	e.s.ResetCounts()
	e.sign("app", unsigned, signtest.Referrers, keyless(release))
	now = now.Add(59 * time.Second)
	if verify(signed) != nil || verify(unsigned) == nil || e.s.Total() != 0 {
		t.Fatalf("cached verdicts: %v requests", e.s.Counts())
	}
	now = now.Add(2 * time.Second) // past the failure TTL, within the success TTL
	if err := verify(unsigned); err != nil {
		t.Fatalf("a signature added after the failure TTL: %v", err)
	}
	if verify(signed) != nil {
		t.Fatal("success")
	}
	assertCounts(t, e.s, map[rt.Kind]int{rt.Referrers: 1, rt.ManifestGet: 1, rt.BlobGet: 1})
}

// A registry failure is an error (the resolution fails), never a skip, and is not
// cached.
func TestRegistryErrorsFailAndAreNotCached(t *testing.T) {
	e := newEnv(t)
	d := e.push("app", "1.0.0")
	e.sign("app", d, signtest.Referrers, keyless(release))
	e.s.Inject(rt.Fault{Kind: rt.Referrers, Status: 503, Times: fastRetry.Attempts})
	v := e.verifier(e.reg)
	_, err := v.Verify(context.Background(), subject(e, "app", d, nil), kl(t))
	var ue *resolve.UnverifiedError
	var re *resolve.RegistryError
	if err == nil || errors.As(err, &ue) || !errors.As(err, &re) {
		t.Fatalf("Verify with a failing registry = %v; want a registry error", err)
	}
	if _, err := v.Verify(context.Background(), subject(e, "app", d, nil), kl(t)); err != nil {
		t.Fatalf("after the registry recovered: %v", err)
	}
}

// Through cache.Registry: its Referrers passes through to the network client;
// over a client without referrers it reads the referrers tag schema.
func TestThroughCacheRegistry(t *testing.T) {
	e := newEnv(t)
	d := e.push("app", "1.0.0")
	e.sign("app", d, signtest.Referrers, keyless(release))
	e.sign("app", d, signtest.ReferrersTag, keyless(release))
	for _, c := range []struct {
		inner  resolve.Registry
		source string
	}{{e.reg, "referrers"}, {onlyRegistry{e.reg}, "referrers-tag"}} {
		cr := cache.NewRegistry(c.inner)
		got, err := e.verifier(cr).Verify(context.Background(), subject(e, "app", d, nil), kl(t))
		cr.Close()
		if err != nil || got.Source != c.source {
			t.Errorf("Verify through cache over %T = %+v, %v; want source %s", c.inner, got, err, c.source)
		}
	}
}

// onlyRegistry hides a registry's Referrers.
type onlyRegistry struct{ resolve.Registry }
