package signature_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

// One cached verdict (target: <= 1 ms).
func BenchmarkVerifyCached(b *testing.B) {
	e := newEnv(b)
	d := e.push("app", "1.0.0")
	e.sign("app", d, signtest.Referrers, keyless(release))
	v := e.verifier(e.reg)
	s, tr := subject(e, "app", d, nil), trustKeyless(b, release, ghIssuer)
	ctx := context.Background()
	if _, err := v.Verify(ctx, s, tr); err != nil {
		b.Fatal(err)
	}
	e.s.ResetCounts()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := v.Verify(ctx, s, tr); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if e.s.Total() != 0 {
		b.Fatalf("%d requests for cached verdicts", e.s.Total())
	}
}

// memRegistry serves a candidate's referrers list, bundle manifest and bundle
// from memory, so that only finding and verifying them is measured.
type memRegistry struct {
	resolve.Registry
	list      *resolve.Manifest
	manifests map[string]*resolve.Manifest
	blobs     map[string][]byte
}

func (m *memRegistry) Referrers(context.Context, name.Repository, v1.Hash) (*resolve.Manifest, error) {
	return m.list, nil
}

func (m *memRegistry) Manifest(_ context.Context, _ name.Repository, ref string) (*resolve.Manifest, error) {
	return m.manifests[ref], nil
}

func (m *memRegistry) Blob(_ context.Context, _ name.Repository, d v1.Hash) ([]byte, error) {
	return m.blobs[d.String()], nil
}

// noCache never has a verdict.
type noCache struct{}

func (noCache) GetVerdict(context.Context, string) (resolve.Verdict, bool) {
	return resolve.Verdict{}, false
}
func (noCache) SetVerdict(context.Context, string, resolve.Verdict, time.Duration) {}

// One keyless bundle verified from bytes already in memory, every time (no
// verdict cache; target: <= 20 ms CPU).
func BenchmarkVerifyKeylessUncached(b *testing.B) {
	e := newEnv(b)
	d := e.push("app", "1.0.0")
	e.sign("app", d, signtest.Referrers, keyless(release))
	ctx := context.Background()
	repo := e.repo("app")
	list, err := e.reg.Referrers(ctx, repo, d)
	if err != nil {
		b.Fatal(err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(list.Raw, &idx); err != nil || len(idx.Manifests) != 1 {
		b.Fatalf("referrers %s: %v", list.Raw, err)
	}
	md := idx.Manifests[0].Digest
	man, err := e.reg.Manifest(ctx, repo, md.String())
	if err != nil {
		b.Fatal(err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(man.Raw, &m); err != nil {
		b.Fatal(err)
	}
	blob, err := e.reg.Blob(ctx, repo, m.Layers[0].Digest)
	if err != nil {
		b.Fatal(err)
	}
	mem := &memRegistry{list: list, manifests: map[string]*resolve.Manifest{md.String(): man},
		blobs: map[string][]byte{m.Layers[0].Digest.String(): blob}}
	v := e.verifier(mem, signature.WithVerdictCache(noCache{}))
	s, tr := subject(e, "app", d, map[string]bool{"1.0.0": true}), trustKeyless(b, release, ghIssuer)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := v.Verify(ctx, s, tr); err != nil {
			b.Fatal(err)
		}
	}
}

// Semver over 1,000 tags, 3 newest unsigned, cold (a new client and verifier
// each time): requests per resolution.
func BenchmarkSemverThousandTagsCold(b *testing.B) {
	e := newEnv(b, rt.WithPageSize(100))
	repo, _ := thousandTags(b, e)
	e.s.ResetCounts()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		reg, err := resolve.NewRemote(resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain()))
		if err != nil {
			b.Fatal(err)
		}
		v := e.verifier(reg)
		b.StartTimer()
		if _, err := resolveSigned(b, reg, v, repo, thousandPolicy); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(e.s.Total())/float64(b.N), "requests/op")
}
