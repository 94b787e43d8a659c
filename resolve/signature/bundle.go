package signature

import (
	"encoding/hex"
	"strings"

	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/verify"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

const inTotoPayloadType = "application/vnd.in-toto+json"

// verifyBundle verifies a Sigstore bundle's JSON as a signature of s satisfying
// c: the signature, or the priority and reason it is skipped.
func (v *Verifier) verifyBundle(raw []byte, s resolve.Subject, c *check) (*resolve.Verified, int, string) {
	var b bundle.Bundle
	if err := b.UnmarshalJSON(raw); err != nil {
		return nil, prioMalformed, "malformed bundle: " + short(err)
	}
	if prio, reason := binding(&b, s); reason != "" {
		return nil, prio, reason
	}
	d, err := hex.DecodeString(s.Digest.Hex)
	if err != nil {
		return nil, prioMalformed, "malformed digest " + s.Digest.String()
	}
	return v.verifyEntity(&b, s, c, s.Digest.Algorithm, d)
}

// binding checks, before any cryptography, that a bundle is a signature of s's
// digest: a cosign signing statement about it, or a message signature over it.
// It reads unverified data for the reason only; the verification decides.
func binding(b *bundle.Bundle, s resolve.Subject) (int, string) {
	sc, err := b.SignatureContent()
	if err != nil {
		return prioMalformed, "malformed bundle: " + short(err)
	}
	if ms := sc.MessageSignatureContent(); ms != nil {
		if hex.EncodeToString(ms.Digest()) != s.Digest.Hex {
			return prioOther, "bundle is for another image (" + algName(ms.DigestAlgorithm()) + ":" + hex.EncodeToString(ms.Digest()) + ")"
		}
		return 0, ""
	}
	env := sc.EnvelopeContent().RawEnvelope()
	if env.PayloadType != inTotoPayloadType {
		return prioMalformed, "a DSSE envelope that is not an in-toto statement (" + env.PayloadType + ")"
	}
	st, err := sc.EnvelopeContent().Statement()
	if err != nil {
		return prioMalformed, "malformed in-toto statement: " + short(err)
	}
	if st.PredicateType != predicateCosignSign {
		return prioAttestation, "only attestations (predicate " + st.PredicateType + "), no signature"
	}
	var other string
	for _, sub := range st.Subject {
		if sub.Digest[s.Digest.Algorithm] == s.Digest.Hex {
			return 0, ""
		}
		for alg, h := range sub.Digest {
			if other == "" {
				other = alg + ":" + h
			}
		}
	}
	return prioOther, "bundle is for another image (" + other + ")"
}

func algName(a string) string {
	switch a {
	case "SHA2_256":
		return "sha256"
	case "SHA2_512":
		return "sha512"
	}
	return strings.ToLower(a)
}

// verifyEntity verifies with sigstore-go a signed entity over digest (alg
// "sha256" or "sha512"), then its signer against the requirement.
func (v *Verifier) verifyEntity(e verify.SignedEntity, s resolve.Subject, c *check, alg string, digest []byte) (*resolve.Verified, int, string) {
	vc, err := e.VerificationContent()
	if err != nil {
		return nil, prioMalformed, "malformed bundle: " + short(err)
	}
	switch hasCert := vc.Certificate() != nil; {
	case hasCert && !c.t.Keyless():
		return nil, prioIdentity, "signed keyless (with a certificate), not with " + c.t.Describe()
	case !hasCert && c.t.Keyless():
		return nil, prioIdentity, "signed with a key, not by " + c.t.Describe()
	}
	res, err := c.sv.Verify(e, verify.NewPolicy(verify.WithArtifactDigest(alg, digest), c.policy))
	if err != nil {
		return nil, prioOther, "signature does not verify: " + strings.TrimPrefix(short(err), "failed to verify signature: ")
	}
	if !c.t.Keyless() {
		return &resolve.Verified{Key: c.t.Key, Digest: s.Digest.String()}, 0, ""
	}
	if res.Signature == nil || res.Signature.Certificate == nil {
		return nil, prioMalformed, "a verified signature without a certificate"
	}
	san, iss := res.Signature.Certificate.SubjectAlternativeName, res.Signature.Certificate.Issuer
	if !c.t.MatchCertificate(san, iss) {
		return nil, prioIdentity, "signed by " + san + " (issuer " + iss + "), not " + c.t.Describe()
	}
	return &resolve.Verified{Identity: san, Issuer: iss, Digest: s.Digest.String()}, 0, ""
}
