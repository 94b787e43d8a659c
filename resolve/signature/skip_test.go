package signature_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

// unverified runs Verify and returns the skip reason; it fails on a success or
// another error.
func unverified(t *testing.T, v *signature.Verifier, s resolve.Subject, tr *resolve.Trust) string {
	t.Helper()
	got, err := v.Verify(context.Background(), s, tr)
	var ue *resolve.UnverifiedError
	if !errors.As(err, &ue) {
		t.Fatalf("Verify = %+v, %v; want an *UnverifiedError", got, err)
	}
	return ue.Reason
}

// A signature that does not satisfy the requirement is a skip with its reason.
func TestSkipReasons(t *testing.T) {
	other := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	cases := []struct {
		name   string
		layout signtest.Layout
		spec   signtest.Spec
		trust  func(t testing.TB) *resolve.Trust
		reason string
	}{
		{"unsigned", "", signtest.Spec{}, kl, "unsigned"},
		{"another identity", signtest.Referrers, keyless(other2), kl,
			"signed by " + other2 + " (issuer " + ghIssuer + "), not identity " + release + " (issuer " + ghIssuer + ")"},
		{"another issuer", signtest.Referrers, signtest.Spec{Identity: release, Issuer: "https://accounts.example.com"}, kl,
			"signed by " + release + " (issuer https://accounts.example.com), not identity " + release},
		{"tampered bundle", signtest.Referrers, signtest.Spec{Identity: release, Issuer: ghIssuer, SignedDigest: other}, kl,
			"bundle is for another image (" + other.String() + ")"},
		{"tampered legacy", signtest.CosignTag, signtest.Spec{Identity: release, Issuer: ghIssuer, SignedDigest: other}, kl,
			"signature is for another image (\"" + other.String() + "\")"},
		{"attestation only", signtest.Referrers, signtest.Spec{Identity: release, Issuer: ghIssuer, PredicateType: signtest.PredicateSLSA}, kl,
			"only attestations (predicate " + signtest.PredicateSLSA + "), no signature"},
		{"another key", signtest.Referrers, keyed("other"), kr, "signature does not verify: "},
		{"another key, legacy", signtest.CosignTag, keyed("other"), kr, "signature does not verify: "},
		{"key where keyless is required", signtest.Referrers, keyed("release"), kl, "signed with a key, not by identity " + release},
		{"keyless where a key is required", signtest.Referrers, keyless(release), kr, "signed keyless (with a certificate), not with key release"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			d := e.push("app", "1.0.0")
			if c.layout != "" {
				e.sign("app", d, c.layout, c.spec)
			}
			got := unverified(t, e.verifier(e.reg), subject(e, "app", d, nil), c.trust(t))
			t.Logf("reason: %s", got)
			if !strings.HasPrefix(got, c.reason) {
				t.Errorf("reason %q, want it to start with %q", got, c.reason)
			}
		})
	}
}

const other2 = "https://github.com/mallory/web/.github/workflows/release.yml@refs/heads/main"

func kl(t testing.TB) *resolve.Trust { return trustKeyless(t, release, ghIssuer) }
func kr(t testing.TB) *resolve.Trust { return trustKey(t, "release") }

// A malformed bundle, certificate or legacy annotation is a skip with its
// reason, never a panic.
func TestMalformedSignatures(t *testing.T) {
	cases := []struct {
		name   string
		bundle string
		reason string
	}{
		{"not json", "{not json", "malformed bundle: "},
		{"empty object", "{}", "malformed bundle: "},
		{"unknown media type", `{"mediaType":"application/x-other"}`, "malformed bundle: "},
		{"bad certificate", `{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{"certificate":{"rawBytes":"AAAA"}},"messageSignature":{"messageDigest":{"algorithm":"SHA2_256","digest":"DIGEST"},"signature":"AAAA"}}`, "malformed bundle: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			d := e.push("app", "1.0.0")
			ref := e.repo("app").Digest(d.String())
			desc, err := remote.Head(ref, remote.WithAuth(authn.Anonymous))
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := hex.DecodeString(d.Hex)
			b := strings.ReplaceAll(c.bundle, "DIGEST", base64.StdEncoding.EncodeToString(raw))
			if err := signtest.WriteBundle(ref, *desc, []byte(b), signtest.Referrers, signtest.PredicateCosignSign, remote.WithAuth(authn.Anonymous)); err != nil {
				t.Fatal(err)
			}
			got := unverified(t, e.verifier(e.reg), subject(e, "app", d, nil), kl(t))
			t.Logf("reason: %s", got)
			if !strings.HasPrefix(got, c.reason) {
				t.Errorf("reason %q, want it to start with %q", got, c.reason)
			}
		})
	}
}

// A keyless message signature over the manifest's digest counts as a signature.
func TestMessageSignature(t *testing.T) {
	e := newEnv(t)
	d := e.push("app", "1.0.0")
	e.sign("app", d, signtest.Referrers, signtest.Spec{Identity: release, Issuer: ghIssuer, MessageSignature: true})
	got, err := e.verifier(e.reg).Verify(context.Background(), subject(e, "app", d, nil), kl(t))
	if err != nil || got.Identity != release || got.Source != "referrers" {
		t.Fatalf("Verify = %+v, %v", got, err)
	}
	// One over another image's bytes is not.
	d2 := e.push("app", "2.0.0")
	e.sign("app", d2, signtest.Referrers, signtest.Spec{Identity: release, Issuer: ghIssuer, MessageSignature: true, SignedDigest: d})
	if r := unverified(t, e.verifier(e.reg), subject(e, "app", d2, nil), kl(t)); !strings.HasPrefix(r, "bundle is for another image (sha256:") {
		t.Errorf("reason %q", r)
	}
}

// Keyless certificates need a signed certificate timestamp unless told not to
// (the virtual CA issues none).
func TestRequireSCT(t *testing.T) {
	e := newEnv(t)
	d := e.push("app", "1.0.0")
	e.sign("app", d, signtest.Referrers, keyless(release))
	r := unverified(t, e.verifier(e.reg, signature.WithRequireSCT(true)), subject(e, "app", d, nil), kl(t))
	if !strings.Contains(r, "signature does not verify: ") || !strings.Contains(r, "certificate timestamp") {
		t.Errorf("reason %q", r)
	}
}

// A key-mode requirement can ask for a transparency-log entry; key signatures
// logged nowhere then fail.
func TestKeyRequireTlog(t *testing.T) {
	e := newEnv(t)
	d := e.push("app", "1.0.0")
	e.sign("app", d, signtest.Referrers, keyed("release"))
	r := unverified(t, e.verifier(e.reg, signature.WithRequireTlog(true)), subject(e, "app", d, nil), kr(t))
	if !strings.HasPrefix(r, "signature does not verify: ") {
		t.Errorf("reason %q", r)
	}
}

// The requirement's matchers must all match: an operator's regexp and an app's
// exact identity together.
func TestTwoIdentityMatchers(t *testing.T) {
	required, err := resolve.VerifySpec{Identity: "regexp:^https://github.com/org/", Issuer: ghIssuer}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	merged, err := resolve.MergeTrust(required, `registries entry "x"`, kl(t))
	if err != nil || len(merged.Identities) != 2 {
		t.Fatalf("MergeTrust = %v, %v", merged, err)
	}
	orgOther := "https://github.com/org/api/.github/workflows/release.yml@refs/tags/v1"
	e := newEnv(t)
	cases := []struct {
		identity string
		ok       bool
	}{{release, true}, {orgOther, false}, {other2, false}}
	v := e.verifier(e.reg)
	for i, c := range cases {
		d := e.push("app", "1.0."+string(rune('0'+i)))
		e.sign("app", d, signtest.Referrers, keyless(c.identity))
		got, err := v.Verify(context.Background(), subject(e, "app", d, nil), merged)
		if c.ok != (err == nil) {
			t.Errorf("%s: Verify = %+v, %v; want ok %v", c.identity, got, err, c.ok)
		}
		var ue *resolve.UnverifiedError
		if !c.ok && (!errors.As(err, &ue) || !strings.Contains(ue.Reason, "not identity regexp:^https://github.com/org/ and "+release)) {
			t.Errorf("%s: %v", c.identity, err)
		}
	}
}

// A requirement the verifier cannot check is an error naming the setting, not a
// skip.
func TestConfigurationErrors(t *testing.T) {
	e := newEnv(t)
	d := e.push("app", "1.0.0")
	v, err := signature.New(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		trust *resolve.Trust
		want  string
	}{
		{kl(t), "trust.trustedRoot"},
		{trustKey(t, "nope"), `verify-key: invalid value "nope" (accepted: the name of a public key of the operator's trust.keys (none is configured))`},
	}
	for _, c := range cases {
		_, err := v.Verify(context.Background(), subject(e, "app", d, nil), c.trust)
		var ue *resolve.UnverifiedError
		if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Verify(%s) = %v; want an error naming %q", c.trust.Describe(), err, c.want)
		}
	}
	// A key the operator does not have is the app's input to fix (exit 2, no alert).
	_, err = v.Verify(context.Background(), subject(e, "app", d, nil), trustKey(t, "nope"))
	if a := resolve.AnswerOf(nil, err); a.ErrorKind != resolve.KindInput {
		t.Errorf("an unknown key is a %s error, want %s", a.ErrorKind, resolve.KindInput)
	}
	if e.s.Total() != 0 {
		t.Errorf("%d requests for a requirement that cannot be checked", e.s.Total())
	}
	_ = rt.Kinds
}
