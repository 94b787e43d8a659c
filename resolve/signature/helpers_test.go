package signature_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

const (
	ghIssuer = "https://token.actions.githubusercontent.com"
	release  = "https://github.com/org/web/.github/workflows/release.yml@refs/tags/v1"
	other    = "https://github.com/mallory/web/.github/workflows/release.yml@refs/heads/main"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var fastRetry = resolve.RetryPolicy{Attempts: 3, Backoff: 5 * time.Millisecond, MaxWait: time.Second}

// signer is shared: a virtual Sigstore takes a while to make.
var sharedSigner *signtest.Signer

func signer(t testing.TB) *signtest.Signer {
	t.Helper()
	if sharedSigner == nil {
		s, err := signtest.New()
		if err != nil {
			t.Fatal(err)
		}
		sharedSigner = s
	}
	return sharedSigner
}

// env is a registry over HTTP, a registry client on it and a signer.
type env struct {
	t   testing.TB
	s   *rt.Server
	reg *resolve.Remote
	sg  *signtest.Signer
}

func newEnv(t testing.TB, opts ...rt.Option) *env {
	t.Helper()
	s := rt.New(t, opts...)
	reg, err := resolve.NewRemote(resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, s: s, reg: reg, sg: signer(t)}
}

func (e *env) repo(r string) name.Repository {
	e.t.Helper()
	ref, err := name.NewRepository(e.s.Ref(r))
	if err != nil {
		e.t.Fatal(err)
	}
	return ref
}

// push pushes a linux/amd64 image at repo:tag and returns its digest.
func (e *env) push(repo, tag string) v1.Hash {
	e.t.Helper()
	img := rt.Image(t0, "linux/amd64", rt.WithSeed(repo+tag))
	e.s.Push(e.t, repo, tag, img)
	d, err := img.Digest()
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// pushIndex pushes a multi-platform index at repo:tag; its digest and its
// platform manifests' digests.
func (e *env) pushIndex(repo, tag string, platforms ...string) (v1.Hash, []v1.Hash) {
	e.t.Helper()
	idx := rt.Index(t0, platforms, rt.WithSeed(repo+tag))
	e.s.PushIndex(e.t, repo, tag, idx)
	d, err := idx.Digest()
	if err != nil {
		e.t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		e.t.Fatal(err)
	}
	var ps []v1.Hash
	for _, m := range im.Manifests {
		ps = append(ps, m.Digest)
	}
	return d, ps
}

// sign stores a signature of repo@d in layout, over HTTP (not counted: the
// counters are reset after).
func (e *env) sign(repo string, d v1.Hash, layout signtest.Layout, spec signtest.Spec) {
	e.t.Helper()
	ref := e.repo(repo).Digest(d.String())
	if err := e.sg.Sign(context.Background(), ref, layout, spec, remote.WithAuth(authn.Anonymous)); err != nil {
		e.t.Fatal(err)
	}
	e.s.ResetCounts()
}

func keyless(identity string) signtest.Spec {
	return signtest.Spec{Identity: identity, Issuer: ghIssuer}
}

func keyed(name string) signtest.Spec { return signtest.Spec{Key: name} }

// verifier makes a Verifier trusting the signer's virtual Sigstore (no SCTs: the
// virtual CA issues none) and its keys "release" and "other".
func (e *env) verifier(reg resolve.Registry, opts ...signature.Option) *signature.Verifier {
	e.t.Helper()
	keys, err := e.sg.PublicKeys("release", "other")
	if err != nil {
		e.t.Fatal(err)
	}
	base := []signature.Option{signature.WithTrustedMaterial(e.sg.TrustedMaterial()), signature.WithRequireSCT(false),
		signature.WithPublicKeys(keys)}
	v, err := signature.New(reg, append(base, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

func trustKeyless(t testing.TB, identity, issuer string) *resolve.Trust {
	t.Helper()
	tr, err := resolve.VerifySpec{Identity: identity, Issuer: issuer}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func trustKey(t testing.TB, key string) *resolve.Trust {
	t.Helper()
	tr, err := resolve.VerifySpec{Key: key}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func subject(e *env, repo string, d v1.Hash, tags map[string]bool) resolve.Subject {
	return resolve.Subject{Repo: e.repo(repo), Digest: d, Tags: tags}
}

// assertCounts checks the registry's request counts by kind, exactly.
func assertCounts(t testing.TB, s *rt.Server, want map[rt.Kind]int) {
	t.Helper()
	got := s.Counts()
	for _, k := range rt.Kinds {
		if got[k] != want[k] {
			t.Errorf("requests: %s %d, want %d (all: %v, want %v)", k, got[k], want[k], got, want)
			return
		}
	}
}
