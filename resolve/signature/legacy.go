package signature

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Annotations of cosign's legacy signature layers.
const (
	annSignature   = "dev.cosignproject.cosign/signature"
	annCertificate = "dev.sigstore.cosign/certificate"
	annChain       = "dev.sigstore.cosign/chain"
	annBundle      = "dev.sigstore.cosign/bundle"
)

const maxChainCerts = 10

// checkCosignTag verifies the legacy signatures at sha256-<hex>.sig.
func (v *Verifier) checkCosignTag(ctx context.Context, s resolve.Subject, c *check, rs *reasons) (*resolve.Verified, error) {
	m, err := v.fallbackTag(ctx, s, s.Digest.Algorithm+"-"+s.Digest.Hex+".sig")
	if m == nil || err != nil {
		return nil, err
	}
	if int64(len(m.Raw)) > v.o.limits.MaxBytes {
		rs.add(prioCap, fmt.Sprintf("the .sig manifest is over the cap of %d bytes (trust.maxSignatureBytes)", v.o.limits.MaxBytes))
		return nil, nil
	}
	var man v1.Manifest
	if err := json.Unmarshal(m.Raw, &man); err != nil {
		rs.add(prioMalformed, "malformed .sig manifest: "+short(err))
		return nil, nil
	}
	var layers []v1.Descriptor
	for _, l := range man.Layers {
		if l.MediaType == simpleSigningType {
			layers = append(layers, l)
		}
	}
	if len(layers) > v.o.limits.MaxReferrers {
		rs.add(prioCap, fmt.Sprintf("over the cap of %d referrers (trust.maxReferrers): %d signatures in the .sig manifest", v.o.limits.MaxReferrers, len(layers)))
		return nil, nil
	}
	for _, l := range layers {
		payload, ok, err := v.readBlob(ctx, s, l, rs)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		ver, prio, reason := v.verifyLegacy(payload, l.Annotations, s, c)
		if ver != nil {
			ver.Source = SourceCosignTag
			return ver, nil
		}
		rs.add(prio, reason)
	}
	return nil, nil
}

// simpleSigning is the part of cosign's payload that binds it to an image.
type simpleSigning struct {
	Critical struct {
		Image struct {
			Digest string `json:"docker-manifest-digest"`
		} `json:"image"`
	} `json:"critical"`
}

// verifyLegacy verifies one simple signing layer: its payload names s's digest,
// and, as a Sigstore bundle (a message signature over the payload), it verifies.
func (v *Verifier) verifyLegacy(payload []byte, ann map[string]string, s resolve.Subject, c *check) (*resolve.Verified, int, string) {
	var ss simpleSigning
	if err := json.Unmarshal(payload, &ss); err != nil {
		return nil, prioMalformed, "malformed simple signing payload: " + short(err)
	}
	if ss.Critical.Image.Digest != s.Digest.String() {
		return nil, prioOther, "signature is for another image (" + quoteShort(ss.Critical.Image.Digest) + ")"
	}
	pb, err := legacyBundle(payload, ann, c)
	if err != nil {
		return nil, prioMalformed, "malformed cosign signature: " + short(err)
	}
	b, err := bundle.NewBundle(pb)
	if err != nil {
		return nil, prioMalformed, "malformed cosign signature: " + short(err)
	}
	sum := sha256.Sum256(payload)
	return v.verifyEntity(b, s, c, "sha256", sum[:])
}

// legacyBundle converts a simple signing layer to a v0.1 Sigstore bundle: a
// message signature over sha256(payload), the certificate and chain (or the
// requirement's key as hint), and cosign's Rekor bundle as a log entry with its
// inclusion promise.
func legacyBundle(payload []byte, ann map[string]string, c *check) (*protobundle.Bundle, error) {
	sig, err := base64.StdEncoding.DecodeString(ann[annSignature])
	if err != nil || len(sig) == 0 {
		return nil, fmt.Errorf("no base64 signature annotation")
	}
	sum := sha256.Sum256(payload)
	pb := &protobundle.Bundle{
		MediaType: "application/vnd.dev.sigstore.bundle+json;version=0.1",
		Content: &protobundle.Bundle_MessageSignature{MessageSignature: &protocommon.MessageSignature{
			MessageDigest: &protocommon.HashOutput{Algorithm: protocommon.HashAlgorithm_SHA2_256, Digest: sum[:]},
			Signature:     sig,
		}},
		VerificationMaterial: &protobundle.VerificationMaterial{},
	}
	if cert := ann[annCertificate]; cert != "" {
		certs, err := parseCerts(cert + "\n" + ann[annChain])
		if err != nil {
			return nil, err
		}
		pb.VerificationMaterial.Content = &protobundle.VerificationMaterial_X509CertificateChain{
			X509CertificateChain: &protocommon.X509CertificateChain{Certificates: certs}}
	} else {
		pb.VerificationMaterial.Content = &protobundle.VerificationMaterial_PublicKey{
			PublicKey: &protocommon.PublicKeyIdentifier{Hint: c.t.Key}}
	}
	if rb := ann[annBundle]; rb != "" {
		tle, err := rekorEntry([]byte(rb))
		if err != nil {
			return nil, err
		}
		pb.VerificationMaterial.TlogEntries = []*protorekor.TransparencyLogEntry{tle}
	}
	return pb, nil
}

// parseCerts reads PEM certificates (the leaf first), at most maxChainCerts.
func parseCerts(s string) ([]*protocommon.X509Certificate, error) {
	var out []*protocommon.X509Certificate
	rest := []byte(s)
	for len(out) <= maxChainCerts {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return nil, fmt.Errorf("certificate: %w", err)
		}
		out = append(out, &protocommon.X509Certificate{RawBytes: blk.Bytes})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no PEM certificate in the certificate annotation")
	}
	if len(out) > maxChainCerts {
		return nil, fmt.Errorf("more than %d certificates", maxChainCerts)
	}
	return out, nil
}

// rekorBundle is cosign's dev.sigstore.cosign/bundle annotation.
type rekorBundle struct {
	SignedEntryTimestamp []byte `json:"SignedEntryTimestamp"`
	Payload              struct {
		Body           string `json:"body"`
		IntegratedTime int64  `json:"integratedTime"`
		LogIndex       int64  `json:"logIndex"`
		LogID          string `json:"logID"`
	} `json:"Payload"`
}

// rekorEntry converts cosign's Rekor bundle to a log entry with an inclusion
// promise.
func rekorEntry(raw []byte) (*protorekor.TransparencyLogEntry, error) {
	var rb rekorBundle
	if err := json.Unmarshal(raw, &rb); err != nil {
		return nil, fmt.Errorf("rekor bundle: %w", err)
	}
	body, err := base64.StdEncoding.DecodeString(rb.Payload.Body)
	if err != nil {
		return nil, fmt.Errorf("rekor bundle body: %w", err)
	}
	logID, err := hex.DecodeString(rb.Payload.LogID)
	if err != nil {
		return nil, fmt.Errorf("rekor bundle log id: %w", err)
	}
	var kv struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(body, &kv); err != nil {
		return nil, fmt.Errorf("rekor entry: %w", err)
	}
	return &protorekor.TransparencyLogEntry{
		LogIndex:          rb.Payload.LogIndex,
		LogId:             &protocommon.LogId{KeyId: logID},
		KindVersion:       &protorekor.KindVersion{Kind: kv.Kind, Version: kv.APIVersion},
		IntegratedTime:    rb.Payload.IntegratedTime,
		InclusionPromise:  &protorekor.InclusionPromise{SignedEntryTimestamp: rb.SignedEntryTimestamp},
		CanonicalizedBody: body,
	}, nil
}

// quoteShort quotes an untrusted value for a reason, cut to 80 bytes.
func quoteShort(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return fmt.Sprintf("%q", s)
}
