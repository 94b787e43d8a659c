package pipeline

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature"
)

const (
	ghIssuer   = "https://token.actions.githubusercontent.com"
	ghWorkflow = "https://github.com/org/web/.github/workflows/release.yml@refs/tags/"
)

// signer is a test-only resolve.SignatureVerifier: a single-function fake for
// the unit tests of the output (the policy's path to the resolver, the report and
// the annotations). It answers from a table of who signed which digest; the real
// verification (sigstore bundles on a registry) is resolve/signature's, tested
// there. It records the requirements it was asked to check.
type signer struct {
	mu     sync.Mutex
	by     map[string]resolve.Verified // digest -> who signed it
	trusts []string
}

func (f *signer) Verify(_ context.Context, s resolve.Subject, t *resolve.Trust) (*resolve.Verified, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trusts = append(f.trusts, t.Describe())
	v, ok := f.by[s.Digest.String()]
	switch {
	case !ok:
		return nil, &resolve.UnverifiedError{Reason: "unsigned (no signature in the referrers API, the referrers tag or the cosign tag)"}
	case v.Key != "" && v.Key != t.Key, v.Key == "" && !t.MatchCertificate(v.Identity, v.Issuer):
		return nil, &resolve.UnverifiedError{Reason: "signed by " + v.Describe() + ", not by " + t.Describe()}
	}
	v.Digest = s.Digest.String()
	return &v, nil
}

// signedRegistry serves org/web with 1.0.0 signed by the release workflow, 1.1.0
// signed by another workflow and 1.2.0 unsigned.
func signedRegistry(t *testing.T) (*rt.Server, *signer) {
	t.Helper()
	s := rt.New(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, tag := range []string{"1.0.0", "1.1.0", "1.2.0"} {
		s.Push(t, "org/web", tag, rt.Image(t0.Add(time.Duration(i)*time.Hour), "linux/amd64"))
	}
	f := &signer{by: map[string]resolve.Verified{
		s.Digest(t, "org/web", "1.0.0"): {Identity: ghWorkflow + "v1.0.0", Issuer: ghIssuer, Source: "referrers"},
		s.Digest(t, "org/web", "1.1.0"): {Identity: "https://github.com/org/other/.github/workflows/x.yml@refs/heads/main", Issuer: ghIssuer, Source: "cosign-tag"},
	}}
	return s, f
}

func verifyingResolver(t *testing.T, f resolve.SignatureVerifier, opts ...resolve.ResolverOption) *resolve.Resolver {
	t.Helper()
	reg, err := resolve.NewRemote(resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	return resolve.NewResolver(reg, append([]resolve.ResolverOption{resolve.WithSignatureVerifier(f)}, opts...)...)
}

// An app's verify parameters reach the resolver as its requirement; the newest
// tag signed by the identity wins; the workload's resolved annotation names the
// signer, its skipped annotation says why each newer tag was passed over, and
// preview's table and JSON say the same.
func TestRenderVerify(t *testing.T) {
	s, f := signedRegistry(t)
	web := s.Ref("org/web")
	dir := appDir(t, map[string]string{"app.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n        - name: web\n          image: " + web + ":0.9.0\n"})
	env := envWith(t, "image-list", "web="+web, "web.verify-identity", "regexp:^"+ghWorkflow, "web.verify-issuer", ghIssuer)

	out, report, err := New(verifyingResolver(t, f), Settings{}).Render(context.Background(), dir, env)
	if err != nil {
		t.Fatal(err)
	}
	if want := "identity regexp:^" + ghWorkflow + " (issuer " + ghIssuer + ")"; len(f.trusts) != 3 || f.trusts[0] != want {
		t.Errorf("the verifier was asked %q, want 3 times %q", f.trusts, want)
	}
	if got := s.Counts(); got[rt.Ping] != 1 || got[rt.Tags] != 1 || got[rt.ManifestHead] != 3 || s.Total() != 5 {
		t.Errorf("registry requests %v, want a ping, 1 tag list and 3 manifest HEADs", got)
	}
	signer := ghWorkflow + "v1.0.0 (issuer " + ghIssuer + ")"
	for _, want := range []string{
		"image: " + web + ":1.0.0\n",
		"argocd-image-resolver/resolved: '" + "web=" + web + ":1.0.0 (semver; signed by " + signer + ")'",
		"argocd-image-resolver/skipped: 'web=" + web + ":1.2.0: signature: unsigned (no signature in the referrers API",
		"; web=" + web + ":1.1.0: signature: signed by https://github.com/org/other/.github/workflows/x.yml@refs/heads/main (issuer " + ghIssuer + "), not by identity regexp:^" + ghWorkflow,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("manifests lack %q:\n%s", want, out)
		}
	}

	var table bytes.Buffer
	if err := report.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"semver; signed by " + signer, "skipped 1.2.0: signature: unsigned", "skipped 1.1.0: signature: signed by https://github.com/org/other/"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("preview's table lacks %q:\n%s", want, table.String())
		}
	}
	v := report.View()
	res, _ := v.Images[0].Result.(*resolve.Result)
	if res == nil || res.Verified == nil || res.Verified.Identity != ghWorkflow+"v1.0.0" || res.Verified.Source != "referrers" ||
		len(res.Skipped) != 2 || !strings.HasPrefix(res.Skipped[1].Reason, "signature: signed by") {
		t.Errorf("preview's JSON result %+v", res)
	}
}

// An app's verify that conflicts with the operator's requirement for the
// registry is an error naming both: the app's parameter and the registries entry.
func TestRenderVerifyConflictNamesTheParameter(t *testing.T) {
	s, f := signedRegistry(t)
	web := s.Ref("org/web")
	dir := appDir(t, map[string]string{"app.yaml": "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n    - name: web\n      image: " + web + ":0.9.0\n"})
	required := func(repo name.Repository) (*resolve.Trust, string) {
		return &resolve.Trust{Key: "ops"}, `registries entry "` + s.Host + `" requireSignature`
	}
	env := envWith(t, "image-list", "web="+web, "web.verify-identity", ghWorkflow+"v1.0.0", "verify-issuer", ghIssuer)
	_, _, err := New(verifyingResolver(t, f, resolve.WithRequiredTrust(required)), Settings{}).Render(context.Background(), dir, env)
	var ie *resolve.InputError
	if !errors.As(err, &ie) {
		t.Errorf("error %v is no input error", err)
	}
	for _, want := range []string{`image web (used by Pod/web)`, `parameter "web.verify-identity": invalid value "` + ghWorkflow + `v1.0.0"`,
		`conflicts with registries entry "` + s.Host + `" requireSignature, which requires key ops`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if s.Total() != 0 || len(f.trusts) != 0 {
		t.Errorf("a policy error read the registry (%d requests) or checked signatures (%q)", s.Total(), f.trusts)
	}
}

// A verify-key the operator has no key of is the app's input error, named by its
// parameter: the real verifier of resolve/signature, configured with no keys.
func TestRenderVerifyUnknownKeyNamesTheParameter(t *testing.T) {
	s, _ := signedRegistry(t)
	web := s.Ref("org/web")
	dir := appDir(t, map[string]string{"app.yaml": "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n    - name: web\n      image: " + web + ":0.9.0\n"})
	reg, err := resolve.NewRemote(resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	v, err := signature.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	env := envWith(t, "image-list", "web="+web, "web.verify-key", "nope")
	_, _, err = New(resolve.NewResolver(reg, resolve.WithSignatureVerifier(v)), Settings{}).Render(context.Background(), dir, env)
	var ie *resolve.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("error %v is no input error", err)
	}
	for _, want := range []string{`parameter "web.verify-key": invalid value "nope"`, "trust.keys (none is configured)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}
