package signtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/root"
)

// Annotations of cosign's legacy signature layers.
const (
	AnnotationSignature   = "dev.cosignproject.cosign/signature"
	AnnotationCertificate = "dev.sigstore.cosign/certificate"
	AnnotationChain       = "dev.sigstore.cosign/chain"
	AnnotationBundle      = "dev.sigstore.cosign/bundle"
)

const emptyMediaType = "application/vnd.oci.empty.v1+json"

// Sign signs subject (repository@digest) as spec says and stores the signature in
// the registry in layout, over HTTP with opts (transport, auth, ...). It reads
// the subject's descriptor (a HEAD), and for a message signature its manifest.
// A signature added where others are keeps them (the referrers tag's index and
// the .sig manifest are appended to).
func (s *Signer) Sign(ctx context.Context, subject name.Digest, layout Layout, spec Spec, opts ...remote.Option) error {
	opts = append([]remote.Option{remote.WithContext(ctx)}, opts...)
	d, err := v1.NewHash(subject.DigestStr())
	if err != nil {
		return fmt.Errorf("signtest: subject %s: %w", subject, err)
	}
	desc, err := remote.Head(subject, opts...)
	if err != nil {
		return fmt.Errorf("signtest: head %s: %w", subject, err)
	}
	if layout == CosignTag {
		return s.writeCosignTag(subject, d, spec, opts)
	}
	var manifest []byte
	if spec.MessageSignature {
		got, err := remote.Get(subject, opts...)
		if err != nil {
			return fmt.Errorf("signtest: get %s: %w", subject, err)
		}
		manifest = got.Manifest
	}
	b, err := s.Bundle(subject.Context().Name(), d, spec, manifest)
	if err != nil {
		return err
	}
	return WriteBundle(subject, *desc, b, layout, predicateOf(spec), opts...)
}

func predicateOf(spec Spec) string {
	switch {
	case spec.MessageSignature:
		return ""
	case spec.PredicateType != "":
		return spec.PredicateType
	}
	return PredicateCosignSign
}

// WriteBundle stores bundle (a Sigstore bundle's JSON) for subject, whose
// descriptor is desc, as cosign does: a manifest of artifactType
// BundleArtifactType with the bundle as its one layer and subject as its subject,
// listed by the referrers API (Referrers) or by the index at tag sha256-<hex>
// (ReferrersTag). predicateType, when not "", is annotated.
func WriteBundle(subject name.Digest, desc v1.Descriptor, bundle []byte, layout Layout, predicateType string, opts ...remote.Option) error {
	repo := subject.Context()
	layer := static.NewLayer(bundle, types.MediaType(BundleArtifactType))
	config := static.NewLayer([]byte("{}"), emptyMediaType)
	for _, l := range []v1.Layer{layer, config} {
		if err := remote.WriteLayer(repo, l, opts...); err != nil {
			return fmt.Errorf("signtest: write blob to %s: %w", repo, err)
		}
	}
	ld, _ := descriptorOf(layer)
	cd, _ := descriptorOf(config)
	ld.Annotations = map[string]string{"org.opencontainers.image.title": "sha256-" + ld.Digest.Hex + ".sigstore.json"}
	ann := map[string]string{"org.opencontainers.image.created": time.Now().UTC().Format(time.RFC3339)}
	if predicateType != "" {
		ann["dev.sigstore.bundle.content"] = "dsse-envelope"
		ann["dev.sigstore.bundle.predicateType"] = predicateType
	} else {
		ann["dev.sigstore.bundle.content"] = "message-signature"
	}
	m := map[string]any{
		"schemaVersion": 2, "mediaType": types.OCIManifestSchema1, "artifactType": BundleArtifactType,
		"config": cd, "layers": []v1.Descriptor{ld}, "annotations": ann,
		"subject": v1.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size},
	}
	raw, _ := json.Marshal(m)
	h, size, _ := v1.SHA256(strings.NewReader(string(raw)))
	ref := repo.Digest(h.String())
	putOpts := opts
	if layout == Referrers {
		putOpts = append(append([]remote.Option(nil), opts...), remote.WithReferrersTagFallback(false))
	}
	if err := remote.Put(ref, rawManifest{raw, types.OCIManifestSchema1}, putOpts...); err != nil {
		return fmt.Errorf("signtest: put %s: %w", ref, err)
	}
	if layout != ReferrersTag {
		return nil
	}
	return addToTagIndex(subject, v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: h, Size: size,
		ArtifactType: BundleArtifactType, Annotations: ann}, opts)
}

// addToTagIndex lists d in the index at subject's referrers tag (sha256-<hex>).
func addToTagIndex(subject name.Digest, d v1.Descriptor, opts []remote.Option) error {
	tag := subject.Context().Tag(strings.Replace(subject.DigestStr(), ":", "-", 1))
	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{}}
	got, err := remote.Get(tag, opts...)
	switch {
	case err == nil:
		if err := json.Unmarshal(got.Manifest, &idx); err != nil {
			return fmt.Errorf("signtest: %s: %w", tag, err)
		}
	case !notFound(err):
		return fmt.Errorf("signtest: get %s: %w", tag, err)
	}
	for _, m := range idx.Manifests {
		if m.Digest == d.Digest {
			return nil
		}
	}
	idx.Manifests = append(idx.Manifests, d)
	raw, _ := json.Marshal(idx)
	if err := remote.Put(tag, rawManifest{raw, types.OCIImageIndex}, opts...); err != nil {
		return fmt.Errorf("signtest: put %s: %w", tag, err)
	}
	return nil
}

// writeCosignTag stores a legacy simple signing signature at sha256-<hex>.sig.
func (s *Signer) writeCosignTag(subject name.Digest, d v1.Hash, spec Spec, opts []remote.Option) error {
	signed := d
	if spec.SignedDigest.Hex != "" {
		signed = spec.SignedDigest
	}
	payload := SimpleSigningPayload(subject.Context().Name(), signed)
	ann, err := s.legacyAnnotations(payload, spec)
	if err != nil {
		return err
	}
	repo := subject.Context()
	layer := static.NewLayer(payload, SimpleSigningMediaType)
	if err := remote.WriteLayer(repo, layer, opts...); err != nil {
		return fmt.Errorf("signtest: write blob to %s: %w", repo, err)
	}
	ld, _ := descriptorOf(layer)
	ld.Annotations = ann
	tag := repo.Tag(strings.Replace(d.String(), ":", "-", 1) + ".sig")
	var m v1.Manifest
	got, err := remote.Get(tag, opts...)
	switch {
	case err == nil:
		if err := json.Unmarshal(got.Manifest, &m); err != nil {
			return fmt.Errorf("signtest: %s: %w", tag, err)
		}
	case notFound(err):
		cfg := static.NewLayer([]byte(`{"architecture":"","os":"","config":{},"rootfs":{"type":"layers","diff_ids":[]}}`), types.OCIConfigJSON)
		if err := remote.WriteLayer(repo, cfg, opts...); err != nil {
			return fmt.Errorf("signtest: write blob to %s: %w", repo, err)
		}
		cd, _ := descriptorOf(cfg)
		m = v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: cd}
	default:
		return fmt.Errorf("signtest: get %s: %w", tag, err)
	}
	m.Layers = append(m.Layers, ld)
	raw, _ := json.Marshal(m)
	if err := remote.Put(tag, rawManifest{raw, types.OCIManifestSchema1}, opts...); err != nil {
		return fmt.Errorf("signtest: put %s: %w", tag, err)
	}
	return nil
}

// SimpleSigningPayload is cosign's legacy signed payload for an image digest.
func SimpleSigningPayload(repo string, digest v1.Hash) []byte {
	b, _ := json.Marshal(map[string]any{
		"critical": map[string]any{
			"identity": map[string]string{"docker-reference": repo},
			"image":    map[string]string{"docker-manifest-digest": digest.String()},
			"type":     "cosign container image signature",
		},
		"optional": nil,
	})
	return b
}

// legacyAnnotations signs payload: keyless, the signature, certificate, chain and
// Rekor bundle annotations; with a key, the signature only (nothing logged).
func (s *Signer) legacyAnnotations(payload []byte, spec Spec) (map[string]string, error) {
	if spec.Key != "" {
		k, err := s.key(spec.Key)
		if err != nil {
			return nil, err
		}
		h := sha256.Sum256(payload)
		sig, err := ecdsa.SignASN1(rand.Reader, k, h[:])
		if err != nil {
			return nil, fmt.Errorf("signtest: sign with key %s: %w", spec.Key, err)
		}
		return map[string]string{AnnotationSignature: base64.StdEncoding.EncodeToString(sig)}, nil
	}
	e, err := s.vs.Sign(spec.Identity, spec.Issuer, payload)
	if err != nil {
		return nil, fmt.Errorf("signtest: sign: %w", err)
	}
	sc, err := e.SignatureContent()
	if err != nil {
		return nil, err
	}
	vc, err := e.VerificationContent()
	if err != nil {
		return nil, err
	}
	entries, err := e.TlogEntries()
	if err != nil || len(entries) != 1 {
		return nil, fmt.Errorf("signtest: log entries: %v", err)
	}
	tle, err := s.logEntry(entries[0])
	if err != nil {
		return nil, err
	}
	rb, err := rekorBundle(tle)
	if err != nil {
		return nil, err
	}
	return map[string]string{
		AnnotationSignature:   base64.StdEncoding.EncodeToString(sc.Signature()),
		AnnotationCertificate: string(certPEM(vc.Certificate())),
		AnnotationChain:       string(s.chainPEM()),
		AnnotationBundle:      string(rb),
	}, nil
}

// rekorBundle is cosign's dev.sigstore.cosign/bundle annotation for a log entry.
func rekorBundle(tle *protorekor.TransparencyLogEntry) ([]byte, error) {
	return json.Marshal(map[string]any{
		"SignedEntryTimestamp": tle.InclusionPromise.SignedEntryTimestamp,
		"Payload": map[string]any{
			"body":           base64.StdEncoding.EncodeToString(tle.CanonicalizedBody),
			"integratedTime": tle.IntegratedTime,
			"logIndex":       tle.LogIndex,
			"logID":          hex.EncodeToString(tle.LogId.KeyId),
		},
	})
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// chainPEM is the virtual Fulcio's intermediates and root, as cosign's chain
// annotation carries them.
func (s *Signer) chainPEM() []byte {
	var out []byte
	for _, ca := range s.vs.FulcioCertificateAuthorities() {
		f, ok := ca.(*root.FulcioCertificateAuthority)
		if !ok {
			continue
		}
		for _, c := range f.Intermediates {
			out = append(out, certPEM(c)...)
		}
		out = append(out, certPEM(f.Root)...)
	}
	return out
}

func descriptorOf(l v1.Layer) (v1.Descriptor, error) {
	d, err := l.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := l.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := l.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: d, Size: size}, nil
}

func notFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// rawManifest is manifest bytes to put as they are.
type rawManifest struct {
	raw []byte
	mt  types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mt, nil }
