package resolve

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The verify fields of a policy (parameters <alias>.verify-identity, ...; the policy
// file's verify: {identity, issuer, key}; resolve's --verify-* flags).
const (
	FieldVerifyIdentity PolicyField = "verify-identity"
	FieldVerifyIssuer   PolicyField = "verify-issuer"
	FieldVerifyKey      PolicyField = "verify-key"
)

// DefaultVerifyCandidates is how many candidates one resolution checks for a
// signature before it gives up (setting trust.verifyCandidates).
const DefaultVerifyCandidates = 20

const (
	identityAccepted = "the signer's certificate identity, exact (https://github.com/org/repo/.github/workflows/release.yml@refs/heads/main) or regexp:EXPR; with verify-issuer, without verify-key"
	issuerAccepted   = "the OIDC issuer of the signer's certificate, exact (https://token.actions.githubusercontent.com) or regexp:EXPR; with verify-identity, without verify-key"
	keyAccepted      = "the name of a public key in the operator's trust.keys (letters, digits, ., _, -); without verify-identity and verify-issuer"
)

var keyNameGrammar = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// CheckKeyName reports whether s may name a public key of the operator's
// trust.keys (what verify-key and requireSignature.key name): a letter or digit,
// then up to 62 letters, digits, ., _ or -.
func CheckKeyName(s string) bool { return keyNameGrammar.MatchString(s) }

// VerifySpec is a signature requirement as written: keyless (Identity and Issuer)
// or a named key (Key). The zero value requires nothing.
type VerifySpec struct {
	Identity string `json:"identity,omitempty"`
	Issuer   string `json:"issuer,omitempty"`
	Key      string `json:"key,omitempty"`
}

// IsZero reports whether the spec requires nothing.
func (s VerifySpec) IsZero() bool { return s == VerifySpec{} }

// Compile checks the spec: nil for the zero spec, or a *Trust, or an *InputError
// naming the verify field at fault.
func (s VerifySpec) Compile() (*Trust, error) {
	s = VerifySpec{Identity: strings.TrimSpace(s.Identity), Issuer: strings.TrimSpace(s.Issuer), Key: strings.TrimSpace(s.Key)}
	if s.IsZero() {
		return nil, nil
	}
	if s.Key != "" {
		switch {
		case s.Identity != "":
			return nil, &InputError{Field: string(FieldVerifyIdentity), Policy: FieldVerifyIdentity, Value: s.Identity, Accepted: identityAccepted, Err: fmt.Errorf("verify-key %q is set too; a policy names a key or a keyless identity, not both", s.Key)}
		case s.Issuer != "":
			return nil, &InputError{Field: string(FieldVerifyIssuer), Policy: FieldVerifyIssuer, Value: s.Issuer, Accepted: issuerAccepted, Err: fmt.Errorf("verify-key %q is set too; a policy names a key or a keyless identity, not both", s.Key)}
		case !keyNameGrammar.MatchString(s.Key):
			return nil, &InputError{Field: string(FieldVerifyKey), Policy: FieldVerifyKey, Value: s.Key, Accepted: keyAccepted}
		}
		return &Trust{Key: s.Key}, nil
	}
	if s.Identity == "" {
		return nil, &InputError{Field: string(FieldVerifyIdentity), Policy: FieldVerifyIdentity, Value: "", Accepted: identityAccepted, Err: fmt.Errorf("verify-issuer %q needs the identity it issued", s.Issuer)}
	}
	if s.Issuer == "" {
		return nil, &InputError{Field: string(FieldVerifyIssuer), Policy: FieldVerifyIssuer, Value: "", Accepted: issuerAccepted, Err: fmt.Errorf("verify-identity %q needs its OIDC issuer", s.Identity)}
	}
	id, err := parseIdentityMatcher(FieldVerifyIdentity, s.Identity, identityAccepted)
	if err != nil {
		return nil, err
	}
	iss, err := parseIdentityMatcher(FieldVerifyIssuer, s.Issuer, issuerAccepted)
	if err != nil {
		return nil, err
	}
	return &Trust{Identities: []StringMatcher{id}, Issuers: []StringMatcher{iss}}, nil
}

// StringMatcher matches a certificate's identity or issuer: exactly, or by a
// regular expression (String is "regexp:EXPR" then).
type StringMatcher interface {
	Match(s string) bool
	String() string
}

type exactMatcher string

func (m exactMatcher) Match(s string) bool { return string(m) == s }
func (m exactMatcher) String() string      { return string(m) }

func parseIdentityMatcher(field PolicyField, v, accepted string) (StringMatcher, error) {
	if !hasPrefixFold(v, "regexp:") {
		return exactMatcher(v), nil
	}
	expr := v[len("regexp:"):]
	if expr == "" {
		return nil, &InputError{Field: string(field), Policy: field, Value: v, Accepted: accepted, Err: fmt.Errorf("empty expression")}
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, &InputError{Field: string(field), Policy: field, Value: v, Accepted: accepted, Err: err}
	}
	return regexpMatcher{re: re}, nil
}

// Trust is a checked signature requirement. Keyless: a signature's certificate
// must match every one of Identities and of Issuers (an app's own verify narrows an
// operator's requirement; it never replaces it). Key: a signature must verify with
// the operator's public key named Key.
type Trust struct {
	Identities []StringMatcher
	Issuers    []StringMatcher
	Key        string
}

// Keyless reports whether the requirement is a certificate identity.
func (t *Trust) Keyless() bool { return t.Key == "" }

// MatchCertificate reports whether a certificate's identity (its subject
// alternative name) and OIDC issuer satisfy the requirement.
func (t *Trust) MatchCertificate(identity, issuer string) bool {
	if !t.Keyless() {
		return false
	}
	for _, m := range t.Identities {
		if !m.Match(identity) {
			return false
		}
	}
	for _, m := range t.Issuers {
		if !m.Match(issuer) {
			return false
		}
	}
	return true
}

// String is canonical: equal requirements give equal strings (cache keys).
func (t *Trust) String() string {
	if t == nil {
		return ""
	}
	if !t.Keyless() {
		return "key:" + t.Key
	}
	return fmt.Sprintf("keyless:%q|%q", matcherStrings(t.Identities), matcherStrings(t.Issuers))
}

func matcherStrings(ms []StringMatcher) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.String()
	}
	return out
}

// Describe says the requirement for people: "identity X (issuer Y)" or "key K".
func (t *Trust) Describe() string {
	if !t.Keyless() {
		return "key " + t.Key
	}
	return fmt.Sprintf("identity %s (issuer %s)", strings.Join(matcherStrings(t.Identities), " and "),
		strings.Join(matcherStrings(t.Issuers), " and "))
}

// MergeTrust combines the operator's requirement for a registry prefix (required,
// set by requiredBy, e.g. `registries entry "ghcr.io/org" requireSignature`) with an
// app's own (app, from the policy): an app adds to the requirement and cannot
// weaken it. Either may be nil. A key and a keyless identity, two different keys,
// or two different exact issuers conflict: an *InputError naming both.
func MergeTrust(required *Trust, requiredBy string, app *Trust) (*Trust, error) {
	switch {
	case required == nil:
		return app, nil
	case app == nil:
		return required, nil
	}
	conflict := func(field PolicyField, value string) error {
		return &InputError{Field: string(field), Policy: field, Value: value,
			Accepted: "a requirement compatible with " + requiredBy + " (" + required.Describe() + "): an app may narrow it, not replace it",
			Err:      fmt.Errorf("conflicts with %s, which requires %s", requiredBy, required.Describe())}
	}
	if required.Keyless() != app.Keyless() || required.Key != app.Key {
		if app.Keyless() {
			return nil, conflict(FieldVerifyIdentity, app.Identities[0].String())
		}
		return nil, conflict(FieldVerifyKey, app.Key)
	}
	if !app.Keyless() {
		return required, nil
	}
	for _, a := range app.Issuers {
		for _, r := range required.Issuers {
			_, aExact := a.(exactMatcher)
			_, rExact := r.(exactMatcher)
			if aExact && rExact && a.String() != r.String() {
				return nil, conflict(FieldVerifyIssuer, a.String())
			}
		}
	}
	return &Trust{
		Identities: appendNew(required.Identities, app.Identities),
		Issuers:    appendNew(required.Issuers, app.Issuers),
	}, nil
}

func appendNew(base, add []StringMatcher) []StringMatcher {
	out := append([]StringMatcher(nil), base...)
next:
	for _, a := range add {
		for _, b := range out {
			if a.String() == b.String() {
				continue next
			}
		}
		out = append(out, a)
	}
	return out
}

// Verified says which signature a chosen tag carries.
type Verified struct {
	// Identity and Issuer are the keyless signer's certificate identity and OIDC
	// issuer; Key is the operator's key name in key mode.
	Identity string `json:"identity,omitempty"`
	Issuer   string `json:"issuer,omitempty"`
	Key      string `json:"key,omitempty"`
	// Digest is the manifest the signature is on (the tag's digest).
	Digest string `json:"digest"`
	// Source is where the signature was found: "referrers" (the OCI 1.1 referrers
	// API), "referrers-tag" (the referrers tag schema, sha256-<hex>) or "cosign-tag"
	// (cosign's legacy sha256-<hex>.sig).
	Source string `json:"source"`
}

// Describe says who signed, for people and annotations.
func (v *Verified) Describe() string {
	if v.Key != "" {
		return "key " + v.Key
	}
	return v.Identity + " (issuer " + v.Issuer + ")"
}

// Subject is a candidate whose signatures are looked for.
type Subject struct {
	Repo      name.Repository
	Tag       string
	Digest    v1.Hash
	MediaType types.MediaType
	// Tags is the repository's listed tags when the resolution read the list (nil
	// for the digest strategy): a verifier may learn from it, without a request,
	// that a fallback tag (sha256-<hex>, sha256-<hex>.sig) does not exist.
	Tags map[string]bool
}

// SignatureVerifier finds the signatures of a candidate and checks them against a
// requirement. It returns the signature that satisfies it, or an *UnverifiedError
// saying why none does (the candidate is skipped), or another error when the
// registry could not be read (the resolution fails: it never answers from part of
// the data). Implementations must be safe for concurrent use.
type SignatureVerifier interface {
	Verify(ctx context.Context, s Subject, t *Trust) (*Verified, error)
}

// UnverifiedError says why a candidate has no signature satisfying the
// requirement: unsigned, signed by another identity or key, or a signature that
// does not verify. It carries no signature material.
type UnverifiedError struct {
	Reason string
}

func (e *UnverifiedError) Error() string { return e.Reason }

// Verdict is a verification's outcome, as cached: Verified, or the Reason a
// candidate was skipped.
type Verdict struct {
	Verified *Verified `json:"verified,omitempty"`
	Reason   string    `json:"reason,omitempty"`
}

// VerdictCache keeps verdicts by key (repository, digest and requirement) for a
// time; the daemon's is shared through Redis. Implementations must be safe for
// concurrent use.
type VerdictCache interface {
	GetVerdict(ctx context.Context, key string) (Verdict, bool)
	SetVerdict(ctx context.Context, key string, v Verdict, ttl time.Duration)
}

// IsArtifactTag reports whether a tag names a signature, an attestation or an SBOM
// (sha256-<hex> of the referrers tag schema, cosign's *.sig, *.att, *.sbom): never
// a candidate under any strategy.
func IsArtifactTag(tag string) bool {
	for _, suffix := range []string{".sig", ".att", ".sbom"} {
		if strings.HasSuffix(tag, suffix) {
			return true
		}
	}
	return artifactTagGrammar.MatchString(tag)
}

var artifactTagGrammar = regexp.MustCompile(`^sha(256|512)-[a-f0-9]{64,128}`)

// artifactTagReason is the rejection reason of IsArtifactTag's tags.
const artifactTagReason = "a signature, attestation or SBOM tag (never a candidate)"

// ReferrersLister is a Registry that can list the manifests referring to a digest
// (the OCI 1.1 referrers API, GET /v2/<repo>/referrers/<digest>). Referrers returns
// the registry's image index of them, or an error wrapping ErrReferrersUnsupported
// when the registry has no referrers API (404, 400, 406, or an answer that is not
// an image index): the caller then falls back to the referrers tag schema.
type ReferrersLister interface {
	Referrers(ctx context.Context, repo name.Repository, digest v1.Hash) (*Manifest, error)
}

// ErrReferrersUnsupported says a registry has no referrers API.
var ErrReferrersUnsupported = errors.New("the registry has no referrers API")
