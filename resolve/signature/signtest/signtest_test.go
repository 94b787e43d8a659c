package signtest_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

func newKey(t *testing.T, c elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A key given with SetKey is the one a Spec naming it signs with: a verifier
// trusting its public half under that name accepts the signature, one trusting
// another key of the same name does not.
func TestSetKeySigns(t *testing.T) {
	s := rt.New(t)
	img := rt.Image(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), "linux/amd64", rt.WithSeed("web1.0.0"))
	s.Push(t, "web", "1.0.0", img)
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	repo, err := name.NewRepository(s.Ref("web"))
	if err != nil {
		t.Fatal(err)
	}
	sg, err := signtest.New()
	if err != nil {
		t.Fatal(err)
	}
	key := newKey(t, elliptic.P256())
	if err := sg.SetKey("ci", key); err != nil {
		t.Fatal(err)
	}
	if err := sg.Sign(context.Background(), repo.Digest(d.String()), signtest.Referrers, signtest.Spec{Key: "ci"}, remote.WithAuth(authn.Anonymous)); err != nil {
		t.Fatal(err)
	}
	tr, err := resolve.VerifySpec{Key: "ci"}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := resolve.NewRemote(resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		pub  any
		ok   bool
	}{
		{"the key set", key.Public(), true},
		{"another key", newKey(t, elliptic.P256()).Public(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := signature.New(reg, signature.WithPublicKeys(map[string]crypto.PublicKey{"ci": c.pub}))
			if err != nil {
				t.Fatal(err)
			}
			got, err := v.Verify(context.Background(), resolve.Subject{Repo: repo, Digest: d}, tr)
			switch {
			case c.ok && err != nil:
				t.Fatalf("Verify: %v", err)
			case c.ok && (got.Key != "ci" || got.Digest != d.String()):
				t.Errorf("verified %+v, want key ci for %s", *got, d)
			case !c.ok && err == nil:
				t.Errorf("verified %+v with a key that did not sign", *got)
			}
		})
	}
}

func TestSetKeyRefuses(t *testing.T) {
	sg, err := signtest.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, keyName string
		key           *ecdsa.PrivateKey
		want          string
	}{
		{"no name", "", newKey(t, elliptic.P256()), "an empty key name"},
		{"no key", "ci", nil, "SetKey ci: no key"},
		{"P-384", "ci", newKey(t, elliptic.P384()), "SetKey ci: curve P-384 (accepted: ECDSA P-256)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := sg.SetKey(c.keyName, c.key)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("SetKey(%q) = %v, want an error saying %q", c.keyName, err, c.want)
			}
		})
	}
}
