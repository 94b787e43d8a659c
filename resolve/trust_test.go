package resolve_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

func TestVerifySpecCompile(t *testing.T) {
	cases := []struct {
		name  string
		spec  resolve.VerifySpec
		field resolve.PolicyField // "" when valid
		want  string              // Trust.String() when valid
	}{
		{"zero", resolve.VerifySpec{}, "", ""},
		{"keyless exact", resolve.VerifySpec{Identity: "https://github.com/o/r/.github/workflows/r.yml@refs/heads/main", Issuer: "https://token.actions.githubusercontent.com"}, "",
			`keyless:["https://github.com/o/r/.github/workflows/r.yml@refs/heads/main"]|["https://token.actions.githubusercontent.com"]`},
		{"keyless regexp", resolve.VerifySpec{Identity: "regexp:^https://github.com/o/", Issuer: "https://i"}, "", `keyless:["regexp:^https://github.com/o/"]|["https://i"]`},
		{"key", resolve.VerifySpec{Key: " ci "}, "", "key:ci"},
		{"identity without issuer", resolve.VerifySpec{Identity: "x"}, resolve.FieldVerifyIssuer, ""},
		{"issuer without identity", resolve.VerifySpec{Issuer: "x"}, resolve.FieldVerifyIdentity, ""},
		{"key and identity", resolve.VerifySpec{Key: "ci", Identity: "x", Issuer: "y"}, resolve.FieldVerifyIdentity, ""},
		{"key and issuer", resolve.VerifySpec{Key: "ci", Issuer: "y"}, resolve.FieldVerifyIssuer, ""},
		{"key material, not a name", resolve.VerifySpec{Key: "-----BEGIN PUBLIC KEY-----"}, resolve.FieldVerifyKey, ""},
		{"bad regexp", resolve.VerifySpec{Identity: "regexp:(", Issuer: "y"}, resolve.FieldVerifyIdentity, ""},
		{"empty regexp", resolve.VerifySpec{Identity: "x", Issuer: "regexp:"}, resolve.FieldVerifyIssuer, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, err := c.spec.Compile()
			if c.field != "" {
				var ie *resolve.InputError
				if !errors.As(err, &ie) || ie.Policy != c.field || ie.Accepted == "" {
					t.Fatalf("Compile(%+v) = %v, want an InputError for %s with what is accepted", c.spec, err, c.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tr.String(); got != c.want {
				t.Fatalf("Trust = %s, want %s", got, c.want)
			}
		})
	}
}

func mustTrust(t *testing.T, s resolve.VerifySpec) *resolve.Trust {
	t.Helper()
	tr, err := s.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestMergeTrust(t *testing.T) {
	const by = `registries entry "ghcr.io/org" requireSignature`
	gha := "https://token.actions.githubusercontent.com"
	org := resolve.VerifySpec{Identity: "regexp:^https://github.com/org/", Issuer: gha}
	cases := []struct {
		name     string
		required resolve.VerifySpec
		app      resolve.VerifySpec
		conflict resolve.PolicyField
		match    map[string]bool // identity -> whether a gha certificate satisfies the merge
	}{
		{"app narrows the operator's identity", org, resolve.VerifySpec{Identity: "https://github.com/org/web/.github/workflows/release.yml@refs/tags/v1", Issuer: gha}, "",
			map[string]bool{"https://github.com/org/web/.github/workflows/release.yml@refs/tags/v1": true, "https://github.com/org/other/.github/workflows/release.yml@refs/tags/v1": false}},
		{"app cannot widen it", org, resolve.VerifySpec{Identity: "regexp:.*", Issuer: gha}, "",
			map[string]bool{"https://github.com/org/x": true, "https://github.com/evil/x": false}},
		{"another issuer conflicts", org, resolve.VerifySpec{Identity: "https://github.com/org/x", Issuer: "https://evil.example"}, resolve.FieldVerifyIssuer, nil},
		{"a key where keyless is required conflicts", org, resolve.VerifySpec{Key: "ci"}, resolve.FieldVerifyKey, nil},
		{"another key conflicts", resolve.VerifySpec{Key: "ci"}, resolve.VerifySpec{Key: "mine"}, resolve.FieldVerifyKey, nil},
		{"keyless where a key is required conflicts", resolve.VerifySpec{Key: "ci"}, org, resolve.FieldVerifyIdentity, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := resolve.MergeTrust(mustTrust(t, c.required), by, mustTrust(t, c.app))
			if c.conflict != "" {
				var ie *resolve.InputError
				if !errors.As(err, &ie) || ie.Policy != c.conflict || !strings.Contains(err.Error(), by) {
					t.Fatalf("MergeTrust = %v, want an InputError for %s naming %s", err, c.conflict, by)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for id, want := range c.match {
				if got.MatchCertificate(id, gha) != want {
					t.Errorf("merged %s matches %s: %t, want %t", got, id, !want, want)
				}
			}
		})
	}
	if got, _ := resolve.MergeTrust(nil, by, nil); got != nil {
		t.Fatalf("nothing required, got %s", got)
	}
}

func TestIsArtifactTag(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	for tag, want := range map[string]bool{
		"sha256-" + hex: true, "sha256-" + hex + ".sig": true, "sha256-" + hex + ".att": true,
		"sha256-" + hex + ".sbom": true, "v1.2.3.sig": true, "1.0.0": false, "sha256": false,
		"sha256-abc": false, "latest": false, "signed": false,
	} {
		if got := resolve.IsArtifactTag(tag); got != want {
			t.Errorf("IsArtifactTag(%s) = %t, want %t", tag, got, want)
		}
	}
}

// tableVerifier is a single-function fake for these unit tests of the walk: the
// verdict of each digest is given. resolve/signature tests the real thing.
type tableVerifier struct {
	mu      sync.Mutex
	signed  map[string]bool // digest -> signed by the trust
	checked []string        // tags checked, in order
}

func (v *tableVerifier) Verify(_ context.Context, s resolve.Subject, tr *resolve.Trust) (*resolve.Verified, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.checked = append(v.checked, s.Tag)
	if v.signed[s.Digest.String()] {
		return &resolve.Verified{Key: tr.Key, Digest: s.Digest.String(), Source: "referrers"}, nil
	}
	return nil, &resolve.UnverifiedError{Reason: "unsigned"}
}

func TestWalkSkipsUnverifiedCandidates(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "1.0.0", "1.1.0", "1.2.0", "1.3.0")
	hex := strings.Repeat("0", 64)
	pushTags(t, s, "app", "sha256-"+hex, "sha256-"+hex+".sig", "9.9.9.att", "9.9.9.sbom")
	v := &tableVerifier{signed: map[string]bool{s.Digest(t, "app", "1.1.0"): true}}
	reg, err := resolve.NewRemote(resolve.WithRetry(fastRetry))
	if err != nil {
		t.Fatal(err)
	}
	key := resolve.VerifySpec{Key: "ci"}

	r := resolve.NewResolver(reg, resolve.WithSignatureVerifier(v))
	res := mustResolve(t, r, s, "app", resolve.PolicySpec{Verify: key})
	if res.Tag != "1.1.0" || res.Verified == nil || res.Verified.Key != "ci" {
		t.Fatalf("chose %s verified %+v, want 1.1.0 verified by key ci", res.Tag, res.Verified)
	}
	if strings.Join(v.checked, ",") != "1.3.0,1.2.0,1.1.0" {
		t.Fatalf("checked %v, want the candidates in semver order down to the first signed", v.checked)
	}
	if len(res.Skipped) != 2 || res.Skipped[0].Reason != "signature: unsigned" {
		t.Fatalf("skipped %+v, want 1.3.0 and 1.2.0 with the verifier's reason", res.Skipped)
	}
	for _, rej := range res.Rejected {
		if strings.HasPrefix(rej.Tag, "1.") {
			t.Errorf("rejected %s", rej.Tag)
		}
	}

	// The bound: two candidates tried, none signed: the error says so.
	v.checked = nil
	r = resolve.NewResolver(reg, resolve.WithSignatureVerifier(v), resolve.WithVerifyCandidates(2))
	_, err = resolveIn(t, r, s, "app", resolve.PolicySpec{Verify: key})
	var nt *resolve.NoTagError
	if !errors.As(err, &nt) || !strings.Contains(err.Error(), "tried 2 (the first 2 of 4 candidates: trust.verifyCandidates)") ||
		!strings.Contains(err.Error(), "1.3.0: unsigned; 1.2.0: unsigned") {
		t.Fatalf("err = %v, want a NoTagError saying 2 of 4 were tried and why each failed", err)
	}

	// Without a verifier a required signature is an error, never an unchecked tag.
	_, err = resolveIn(t, resolve.NewResolver(reg), s, "app", resolve.PolicySpec{Verify: key})
	if err == nil || !strings.Contains(err.Error(), "no signature verifier") {
		t.Fatalf("err = %v, want the missing verifier named", err)
	}
}

func TestArtifactTagsAreNeverCandidates(t *testing.T) {
	s := rt.New(t)
	hex := strings.Repeat("1", 64)
	pushTags(t, s, "app", "a", "sha256-"+hex, "sha256-"+hex+".sig", "zz.att", "zz.sbom")
	r := newResolver(t)
	for _, st := range []string{"alphabetical", "newest-build"} {
		res := mustResolve(t, r, s, "app", resolve.PolicySpec{Strategy: st})
		if res.Tag != "a" || res.Candidates != 1 {
			t.Errorf("%s chose %s of %d candidates, want a of 1", st, res.Tag, res.Candidates)
		}
	}
	_, err := resolveIn(t, r, s, "app", resolve.PolicySpec{Strategy: "digest", Constraint: "zz.sig"})
	var nt *resolve.NoTagError
	if !errors.As(err, &nt) {
		t.Fatalf("digest strategy following a signature tag: %v, want a NoTagError", err)
	}
}

func TestRequiredTrustAppliesAndConflicts(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "1.0.0", "2.0.0")
	v := &tableVerifier{signed: map[string]bool{s.Digest(t, "app", "1.0.0"): true}}
	reg, err := resolve.NewRemote(resolve.WithRetry(fastRetry))
	if err != nil {
		t.Fatal(err)
	}
	const by = `registries entry "x" requireSignature`
	required := mustTrust(t, resolve.VerifySpec{Key: "ci"})
	r := resolve.NewResolver(reg, resolve.WithSignatureVerifier(v), resolve.WithRequiredTrust(
		func(repo name.Repository) (*resolve.Trust, string) { return required, by }))
	// The app asks for nothing: the operator's requirement still holds.
	if res := mustResolve(t, r, s, "app", resolve.PolicySpec{}); res.Tag != "1.0.0" || res.Verified == nil {
		t.Fatalf("chose %s (%+v), want the signed 1.0.0", res.Tag, res.Verified)
	}
	_, err = resolveIn(t, r, s, "app", resolve.PolicySpec{Verify: resolve.VerifySpec{Key: "other"}})
	var ie *resolve.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), by) {
		t.Fatalf("conflicting key: %v, want an input error naming %s", err, by)
	}
}
