package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature"
)

// writeKey writes a PEM private key of curve c (PKCS #8, or SEC 1 when ec) and
// returns the file and the public half.
func writeKey(t *testing.T, c elliptic.Curve, ec bool) (string, crypto.PublicKey) {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk := &pem.Block{Type: "PRIVATE KEY"}
	if ec {
		blk.Type = "EC PRIVATE KEY"
		blk.Bytes, err = x509.MarshalECPrivateKey(k)
	} else {
		blk.Bytes, err = x509.MarshalPKCS8PrivateKey(k)
	}
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	return f, k.Public()
}

// The signing mode signs the tag's digest where the resolver's verifier finds
// it, under the key name given, in each layout; the verifier trusting the public
// half as that name accepts it. The signing's own requests are counted exactly.
func TestSignRemote(t *testing.T) {
	// The signing's requests: go-containerregistry pings once per call (the two
	// HEADs, each blob upload, each manifest read and write); the blob uploads
	// (HEAD, POST, PUT) and manifest PUTs count as other.
	cases := []struct {
		layout string
		noAPI  bool // the registry has no referrers API
		ec     bool // the key file is SEC 1 "EC PRIVATE KEY"
		want   map[rt.Kind]int
	}{
		// HEAD tag, HEAD digest; 2 blobs, the bundle manifest's PUT (with its
		// subject: the referrers API is asked whether it lists it)
		{"referrers", false, false, map[rt.Kind]int{rt.Ping: 5, rt.ManifestHead: 2, rt.Referrers: 1, rt.Other: 9}},
		// the same on a registry without the API: go-containerregistry's PUT
		// falls back to the sha256-<hex> index (GET 404, PUT), then the index is
		// read again to list the bundle (already there)
		{"referrers-tag", true, true, map[rt.Kind]int{rt.Ping: 6, rt.ManifestHead: 2, rt.ManifestGet: 2, rt.Referrers: 1, rt.Other: 10}},
		// HEAD tag, HEAD digest, the payload blob, GET .sig (404), the config blob, PUT .sig
		{"cosign-tag", false, false, map[rt.Kind]int{rt.Ping: 6, rt.ManifestHead: 2, rt.ManifestGet: 1, rt.Other: 9}},
	}
	for _, c := range cases {
		t.Run(c.layout, func(t *testing.T) {
			var opts []rt.Option
			if c.noAPI {
				opts = append(opts, rt.WithoutReferrers())
			}
			s := rt.New(t, opts...)
			img := rt.Index(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), []string{"linux/amd64", "linux/arm64"}, rt.WithSeed("web1.6.0"))
			s.PushIndex(t, "demo/web", "1.6.0", img)
			d, err := img.Digest()
			if err != nil {
				t.Fatal(err)
			}
			keyFile, pub := writeKey(t, elliptic.P256(), c.ec)
			s.ResetCounts()
			line, err := signRemote(context.Background(), signOptions{remote: "http://" + s.Host, image: "demo/web:1.6.0",
				keyFile: keyFile, keyName: "ci", layout: c.layout})
			if err != nil {
				t.Fatal(err)
			}
			if want := "signed demo/web:1.6.0 (" + d.String() + ") with key ci, stored as " + c.layout; line != want {
				t.Errorf("said %q, want %q", line, want)
			}
			if got := s.Counts(); !equalCounts(got, c.want) {
				t.Errorf("signing requests %v, want %v", got, c.want)
			}

			repo, err := name.NewRepository(s.Ref("demo/web"))
			if err != nil {
				t.Fatal(err)
			}
			reg, err := resolve.NewRemote(resolve.WithKeychain(authn.NewMultiKeychain()))
			if err != nil {
				t.Fatal(err)
			}
			v, err := signature.New(reg, signature.WithPublicKeys(map[string]crypto.PublicKey{"ci": pub}))
			if err != nil {
				t.Fatal(err)
			}
			tr, err := resolve.VerifySpec{Key: "ci"}.Compile()
			if err != nil {
				t.Fatal(err)
			}
			got, err := v.Verify(context.Background(), resolve.Subject{Repo: repo, Digest: d}, tr)
			if err != nil {
				t.Fatalf("the resolver's verifier with the public key as ci: %v", err)
			}
			if want := (resolve.Verified{Key: "ci", Digest: d.String(), Source: c.layout}); *got != want {
				t.Errorf("verified %+v, want %+v", *got, want)
			}
		})
	}
}

func equalCounts(got, want map[rt.Kind]int) bool {
	for _, k := range rt.Kinds {
		if got[k] != want[k] {
			return false
		}
	}
	return true
}

// Bad flags are errors naming the flag and the value, and what is accepted; a
// key file's content is never repeated.
func TestSignRemoteRefuses(t *testing.T) {
	s := rt.New(t)
	s.Push(t, "demo/web", "1.6.0", rt.Image(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), "linux/amd64"))
	good, _ := writeKey(t, elliptic.P256(), false)
	p384, _ := writeKey(t, elliptic.P384(), false)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("s3cr3t-key-material"), 0o600); err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(dir, "pub.pem")
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("s3cr3t-key-material")}), 0o600); err != nil {
		t.Fatal(err)
	}
	base := signOptions{remote: "http://" + s.Host, image: "demo/web:1.6.0", keyFile: good, keyName: "ci", layout: "referrers"}
	cases := []struct {
		name string
		edit func(*signOptions)
		want string
	}{
		{"layout", func(o *signOptions) { o.layout = "sigstore" }, `--layout "sigstore": accepted: referrers (`},
		{"key name", func(o *signOptions) { o.keyName = "" }, `--key-name "": accepted: a letter or digit`},
		{"no key", func(o *signOptions) { o.keyFile = "" }, `--key "": accepted: a PEM file of an unencrypted ECDSA P-256 private key`},
		{"missing key", func(o *signOptions) { o.keyFile = filepath.Join(dir, "nope.pem") }, `--key "` + filepath.Join(dir, "nope.pem") + `": open `},
		{"not PEM", func(o *signOptions) { o.keyFile = notPEM }, `--key "` + notPEM + `": no PEM block (accepted: `},
		{"public key", func(o *signOptions) { o.keyFile = pub }, `--key "` + pub + `": a PEM "PUBLIC KEY" block (accepted: `},
		{"P-384", func(o *signOptions) { o.keyFile = p384 }, `--key "` + p384 + `": not an ECDSA P-256 key (accepted: `},
		{"remote", func(o *signOptions) { o.remote = "http://" + s.Host + "/v2/x" }, `--sign-remote "http://` + s.Host + `/v2/x": accepted: http://HOST[:PORT]`},
		{"no tag", func(o *signOptions) { o.image = "demo/web" }, `--image "demo/web": accepted: REPOSITORY:TAG`},
		{"digest", func(o *signOptions) { o.image = "demo/web@sha256:" + strings.Repeat("0", 64) }, `--image "demo/web@sha256:`},
		{"no such tag", func(o *signOptions) { o.image = "demo/web:9.9.9" }, `--image "demo/web:9.9.9": HEAD http://` + s.Host + `/v2/demo/web/manifests/9.9.9: unexpected status code 404`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := base
			c.edit(&o)
			_, err := signRemote(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("the error repeats the key file's content: %v", err)
			}
		})
	}
}
