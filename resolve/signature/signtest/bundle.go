package signtest

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Bundle media types.
const (
	bundleV03 = "application/vnd.dev.sigstore.bundle.v0.3+json"
	bundleV01 = "application/vnd.dev.sigstore.bundle+json;version=0.1"
	inTotoV1  = "https://in-toto.io/Statement/v1"
	inTotoPT  = "application/vnd.in-toto+json"
)

// Statement returns the in-toto statement `cosign sign` signs for an image
// digest (predicate type as spec says).
func Statement(repo string, digest v1.Hash, predicateType string) []byte {
	if predicateType == "" {
		predicateType = PredicateCosignSign
	}
	b, _ := json.Marshal(map[string]any{
		"_type":         inTotoV1,
		"subject":       []any{map[string]any{"name": repo, "digest": map[string]string{digest.Algorithm: digest.Hex}}},
		"predicateType": predicateType,
		"predicate":     map[string]any{},
	})
	return b
}

// Bundle returns the JSON of a Sigstore bundle signing digest as spec says: a
// DSSE envelope of Statement (keyless: certificate, Rekor entry with inclusion
// proof and promise, RFC 3161 timestamp; key: the key's name as hint, nothing
// logged). manifest is the subject's manifest bytes, needed for a message
// signature only.
func (s *Signer) Bundle(repo string, digest v1.Hash, spec Spec, manifest []byte) ([]byte, error) {
	signed := digest
	if spec.SignedDigest.Hex != "" {
		signed = spec.SignedDigest
	}
	if spec.MessageSignature {
		if spec.Key != "" {
			return nil, errors.New("signtest: a message signature is keyless only")
		}
		if spec.SignedDigest.Hex != "" {
			manifest = append([]byte("tampered "), manifest...)
		}
		e, err := s.vs.Sign(spec.Identity, spec.Issuer, manifest)
		if err != nil {
			return nil, fmt.Errorf("signtest: sign: %w", err)
		}
		return s.entityBundle(e, bundleV01)
	}
	stmt := Statement(repo, signed, spec.PredicateType)
	if spec.Key != "" {
		return s.keyBundle(spec.Key, stmt)
	}
	e, err := s.vs.AttestAtTime(spec.Identity, spec.Issuer, stmt, time.Now().Add(5*time.Minute), true)
	if err != nil {
		return nil, fmt.Errorf("signtest: attest: %w", err)
	}
	return s.entityBundle(e, bundleV03)
}

// keyBundle signs stmt as a DSSE envelope with the named key.
func (s *Signer) keyBundle(name string, stmt []byte) ([]byte, error) {
	k, err := s.key(name)
	if err != nil {
		return nil, err
	}
	pae := fmt.Sprintf("DSSEv1 %d %s %d %s", len(inTotoPT), inTotoPT, len(stmt), stmt)
	h := sha256.Sum256([]byte(pae))
	sig, err := ecdsa.SignASN1(rand.Reader, k, h[:])
	if err != nil {
		return nil, fmt.Errorf("signtest: sign with key %s: %w", name, err)
	}
	pb := &protobundle.Bundle{
		MediaType: bundleV03,
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content: &protobundle.VerificationMaterial_PublicKey{PublicKey: &protocommon.PublicKeyIdentifier{Hint: name}},
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload: stmt, PayloadType: inTotoPT, Signatures: []*protodsse.Signature{{Sig: sig}},
		}},
	}
	return protojson.Marshal(pb)
}

// entityBundle turns a virtual Sigstore's signed entity into a protobuf bundle's
// JSON.
func (s *Signer) entityBundle(e *ca.TestEntity, mediaType string) ([]byte, error) {
	vc, err := e.VerificationContent()
	if err != nil {
		return nil, err
	}
	vm := &protobundle.VerificationMaterial{}
	raw := vc.Certificate().Raw
	if mediaType == bundleV03 {
		vm.Content = &protobundle.VerificationMaterial_Certificate{Certificate: &protocommon.X509Certificate{RawBytes: raw}}
	} else {
		vm.Content = &protobundle.VerificationMaterial_X509CertificateChain{X509CertificateChain: &protocommon.X509CertificateChain{
			Certificates: []*protocommon.X509Certificate{{RawBytes: raw}}}}
	}
	entries, err := e.TlogEntries()
	if err != nil {
		return nil, err
	}
	for _, entry := range entries {
		tle, err := s.logEntry(entry)
		if err != nil {
			return nil, err
		}
		vm.TlogEntries = append(vm.TlogEntries, tle)
	}
	tss, err := e.Timestamps()
	if err != nil {
		return nil, err
	}
	vm.TimestampVerificationData = &protobundle.TimestampVerificationData{}
	for _, ts := range tss {
		vm.TimestampVerificationData.Rfc3161Timestamps = append(vm.TimestampVerificationData.Rfc3161Timestamps,
			&protocommon.RFC3161SignedTimestamp{SignedTimestamp: ts})
	}
	pb := &protobundle.Bundle{MediaType: mediaType, VerificationMaterial: vm}
	sc, err := e.SignatureContent()
	if err != nil {
		return nil, err
	}
	if env := sc.EnvelopeContent(); env != nil {
		pb.Content, err = dsseContent(env.RawEnvelope())
		if err != nil {
			return nil, err
		}
	} else {
		ms := sc.MessageSignatureContent()
		pb.Content = &protobundle.Bundle_MessageSignature{MessageSignature: &protocommon.MessageSignature{
			MessageDigest: &protocommon.HashOutput{Algorithm: protocommon.HashAlgorithm_SHA2_256, Digest: ms.Digest()},
			Signature:     ms.Signature(),
		}}
	}
	return protojson.Marshal(pb)
}

// dsseContent converts a DSSE envelope (base64 payload and signatures) to a
// bundle's content.
func dsseContent(env *dsse.Envelope) (*protobundle.Bundle_DsseEnvelope, error) {
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return nil, fmt.Errorf("signtest: envelope payload: %w", err)
	}
	out := &protodsse.Envelope{Payload: payload, PayloadType: env.PayloadType}
	for _, sg := range env.Signatures {
		sig, err := base64.StdEncoding.DecodeString(sg.Sig)
		if err != nil {
			return nil, fmt.Errorf("signtest: envelope signature: %w", err)
		}
		out.Signatures = append(out.Signatures, &protodsse.Signature{Sig: sig, Keyid: sg.KeyID})
	}
	return &protobundle.Bundle_DsseEnvelope{DsseEnvelope: out}, nil
}

// logEntry is entry as a bundle's transparency log entry: kind and version, and an
// inclusion promise (the virtual log's signed entry timestamp) besides what the
// entry carries.
func (s *Signer) logEntry(entry *tlog.Entry) (*protorekor.TransparencyLogEntry, error) {
	tle := proto.Clone(entry.TransparencyLogEntry()).(*protorekor.TransparencyLogEntry)
	var kv struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(tle.CanonicalizedBody, &kv); err != nil {
		return nil, fmt.Errorf("signtest: log entry body: %w", err)
	}
	tle.KindVersion = &protorekor.KindVersion{Kind: kv.Kind, Version: kv.APIVersion}
	set, err := s.set(tle)
	if err != nil {
		return nil, err
	}
	tle.InclusionPromise = &protorekor.InclusionPromise{SignedEntryTimestamp: set}
	return tle, nil
}

// set signs a log entry's signed entry timestamp with the virtual log's key.
func (s *Signer) set(tle *protorekor.TransparencyLogEntry) ([]byte, error) {
	set, err := s.vs.RekorSignPayload(tlog.RekorPayload{
		Body:           base64.StdEncoding.EncodeToString(tle.CanonicalizedBody),
		IntegratedTime: tle.IntegratedTime,
		LogIndex:       tle.LogIndex,
		LogID:          hex.EncodeToString(tle.LogId.KeyId),
	})
	if err != nil {
		return nil, fmt.Errorf("signtest: signed entry timestamp: %w", err)
	}
	return set, nil
}
