// Package signtest signs images for tests and benchmarks, offline: keyless with
// sigstore-go's in-memory Sigstore (ca.VirtualSigstore: a Fulcio CA, a Rekor log
// and a timestamp authority) and with ephemeral ECDSA keys, and stores the
// signatures in any registry over HTTP, in each layout the signature verifier
// reads:
//
//   - Referrers: a Sigstore bundle manifest with a subject (cosign v3's layout),
//     listed by the registry's OCI 1.1 referrers API;
//   - ReferrersTag: the same manifest listed by an image index at tag
//     sha256-<hex> (the referrers tag schema of registries without the API);
//   - CosignTag: cosign's legacy simple signing at tag sha256-<hex>.sig.
//
// The virtual Fulcio CA issues certificates without signed certificate
// timestamps: verify them with the SCT requirement off.
package signtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
)

// Media and predicate types of what the Signer writes.
const (
	// BundleArtifactType is the artifactType of a bundle manifest (cosign's).
	BundleArtifactType = "application/vnd.dev.sigstore.bundle.v0.3+json"
	// SimpleSigningMediaType is the layer media type of cosign's legacy signatures.
	SimpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	// PredicateCosignSign is the in-toto predicate type of `cosign sign` (v3).
	PredicateCosignSign = "https://sigstore.dev/cosign/sign/v1"
	// PredicateSLSA is an attestation's predicate type (not a signature).
	PredicateSLSA = "https://slsa.dev/provenance/v1"
)

// Layout is where a signature is stored.
type Layout string

// The layouts.
const (
	Referrers    Layout = "referrers"
	ReferrersTag Layout = "referrers-tag"
	CosignTag    Layout = "cosign-tag"
)

// Spec says what to sign and how.
type Spec struct {
	// Identity and Issuer sign keyless: the certificate's SAN (an e-mail SAN in
	// the virtual CA) and OIDC issuer.
	Identity, Issuer string
	// Key signs with the Signer's ephemeral key of that name instead.
	Key string
	// SignedDigest, when set, is the digest actually signed: a tampered signature,
	// stored for one image but signed for another.
	SignedDigest v1.Hash
	// PredicateType of the DSSE statement (default PredicateCosignSign); another
	// makes an attestation.
	PredicateType string
	// MessageSignature signs the subject's manifest bytes (a message signature
	// over its digest) instead of a DSSE statement. Keyless only.
	MessageSignature bool
}

// Signer signs with a virtual Sigstore and named ephemeral ECDSA keys. It is safe
// for concurrent use.
type Signer struct {
	vs   *ca.VirtualSigstore
	mu   sync.Mutex
	keys map[string]*ecdsa.PrivateKey
}

// New returns a Signer with a fresh virtual Sigstore. Its certificates and
// timestamps are valid for about an hour.
func New() (*Signer, error) {
	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		return nil, fmt.Errorf("signtest: virtual sigstore: %w", err)
	}
	return &Signer{vs: vs, keys: map[string]*ecdsa.PrivateKey{}}, nil
}

// TrustedMaterial is the virtual Sigstore's trust root (CA, log, TSA), what a
// verifier trusts for keyless signatures.
func (s *Signer) TrustedMaterial() root.TrustedMaterial { return s.vs }

// key returns the ephemeral key named name, made on first use.
func (s *Signer) key(name string) (*ecdsa.PrivateKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.keys[name]; k != nil {
		return k, nil
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("signtest: key %s: %w", name, err)
	}
	s.keys[name] = k
	return k, nil
}

// SetKey makes key the key named name: a Spec with Key name signs with it from
// then on (a key kept in a file, as `cosign sign --key` takes one), in place of
// an ephemeral one. Only ECDSA P-256 keys are taken: the Signer hashes with
// SHA-256, what a verifier expects of a P-256 key (cosign's default key).
func (s *Signer) SetKey(name string, key *ecdsa.PrivateKey) error {
	switch {
	case name == "":
		return errors.New("signtest: SetKey: an empty key name")
	case key == nil:
		return fmt.Errorf("signtest: SetKey %s: no key", name)
	case key.Curve != elliptic.P256():
		return fmt.Errorf("signtest: SetKey %s: curve %s (accepted: ECDSA P-256)", name, key.Curve.Params().Name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[name] = key
	return nil
}

// PublicKey returns the public half of the key named name (made on first use).
func (s *Signer) PublicKey(name string) (crypto.PublicKey, error) {
	k, err := s.key(name)
	if err != nil {
		return nil, err
	}
	return k.Public(), nil
}

// PublicKeyPEM returns the key named name as a PEM "PUBLIC KEY" block, as
// `cosign generate-key-pair` writes cosign.pub.
func (s *Signer) PublicKeyPEM(name string) ([]byte, error) {
	pub, err := s.PublicKey(name)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("signtest: key %s: %w", name, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// PublicKeys returns the named keys' public halves (made on first use), for the
// verifier's WithPublicKeys.
func (s *Signer) PublicKeys(names ...string) (map[string]crypto.PublicKey, error) {
	out := make(map[string]crypto.PublicKey, len(names))
	for _, n := range names {
		pub, err := s.PublicKey(n)
		if err != nil {
			return nil, err
		}
		out[n] = pub
	}
	return out, nil
}

// TrustedRootJSON is the virtual Sigstore as a trusted_root.json, what an
// operator gives the daemon (trust.trustedRoot).
func (s *Signer) TrustedRootJSON() ([]byte, error) { return TrustedRootJSON(s) }

// TrustedRootJSON is one trusted_root.json listing the virtual Sigstores of all
// the signers: their CAs, logs and timestamp authorities.
func TrustedRootJSON(signers ...*Signer) ([]byte, error) {
	var cas []root.CertificateAuthority
	var tsas []root.TimestampingAuthority
	ct, rekor := map[string]*root.TransparencyLog{}, map[string]*root.TransparencyLog{}
	for _, s := range signers {
		cas = append(cas, s.vs.FulcioCertificateAuthorities()...)
		tsas = append(tsas, s.vs.TimestampingAuthorities()...)
		maps.Copy(ct, rawLogIDs(s.vs.CTLogs()))
		maps.Copy(rekor, rawLogIDs(s.vs.RekorLogs()))
	}
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01, cas, ct, tsas, rekor)
	if err != nil {
		return nil, fmt.Errorf("signtest: trusted root: %w", err)
	}
	b, err := tr.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("signtest: trusted root: %w", err)
	}
	return b, nil
}

// rawLogIDs copies the virtual Sigstore's logs with their IDs as raw bytes, as a
// trusted_root.json has them (the virtual logs' IDs are hex text).
func rawLogIDs(logs map[string]*root.TransparencyLog) map[string]*root.TransparencyLog {
	out := make(map[string]*root.TransparencyLog, len(logs))
	for k, l := range logs {
		c := *l
		if id, err := hex.DecodeString(string(l.ID)); err == nil {
			c.ID = id
		}
		out[k] = &c
	}
	return out
}
