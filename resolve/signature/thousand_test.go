package signature_test

import (
	"fmt"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

// thousandTags seeds 1,000 semver tags of multi-platform indexes (linux/amd64,
// linux/arm64) in pages of 100: the 3 newest unsigned, the 4th signed keyless.
// It returns the repository and the signed tag's digest.
func thousandTags(t testing.TB, e *env) (name.Repository, v1.Hash) {
	t.Helper()
	old, _ := e.pushIndex("app", "0.0.1", "linux/amd64", "linux/arm64")
	for i := 2; i < 997; i++ {
		e.s.Tag(t, "app", fmt.Sprintf("0.%d.%d", i/100, i%100), old.String())
	}
	var signed v1.Hash
	for i, tag := range []string{"1.0.0", "1.0.1", "1.0.2", "1.0.3"} {
		d, _ := e.pushIndex("app", tag, "linux/amd64", "linux/arm64")
		if i == 0 {
			signed = d
		}
	}
	e.sign("app", signed, signtest.Referrers, keyless(release))
	return e.repo("app"), signed
}

var thousandPolicy = resolve.PolicySpec{Strategy: "semver", Platforms: []string{"linux/amd64"}, Verify: verifyRelease}

// Semver over 1,000 tags whose 3 newest are unsigned and the 4th signed, with a
// platform check. Cold: 1 ping + 10 tag pages + 4 x (the index, for the platform
// check) + 4 x referrers + the signed one's bundle manifest and bundle = 21
// requests, within the bound tag pages + 4 x (referrers + bundle manifest +
// bundle) + the platform check's 4 = 26 (+ the ping). Warm, through
// cache.Registry with the same verdict cache: 0.
func TestSemverThousandTagsThreeNewestUnsigned(t *testing.T) {
	e := newEnv(t, rt.WithPageSize(100))
	repo, signed := thousandTags(t, e)
	cr := cache.NewRegistry(e.reg)
	defer cr.Close()
	verdicts := signature.NewMemoryCache(nil)
	v := e.verifier(cr, signature.WithVerdictCache(verdicts))

	res, err := resolveSigned(t, cr, v, repo, thousandPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if res.Tag != "1.0.0" || res.Verified == nil || res.Verified.Digest != signed.String() || len(res.Skipped) != 3 {
		t.Fatalf("chose %s verified %+v skipped %+v", res.Tag, res.Verified, res.Skipped)
	}
	assertCounts(t, e.s, map[rt.Kind]int{rt.Ping: 1, rt.Tags: 10, rt.ManifestGet: 4 + 1, rt.Referrers: 4, rt.BlobGet: 1})
	if total, bound := e.s.Total(), 1+10+4*3+4; total > bound {
		t.Errorf("cold: %d requests, over the bound %d", total, bound)
	}

	e.s.ResetCounts()
	res, err = resolveSigned(t, cr, v, repo, thousandPolicy)
	if err != nil || res.Tag != "1.0.0" || res.Verified == nil {
		t.Fatalf("warm: %+v, %v", res, err)
	}
	if e.s.Total() != 0 {
		t.Errorf("warm: %d requests (%v), want 0", e.s.Total(), e.s.Counts())
	}
}
