package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/compose"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

var verifyT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	ghIssuer   = "https://token.actions.githubusercontent.com"
	ghWorkflow = "https://github.com/org/web/.github/workflows/release.yml@refs/tags/"
)

// tableSigner is a test-only resolve.SignatureVerifier: a single-function fake
// for the unit test of resolve's flags and output (flags -> PolicySpec.Verify ->
// the resolver, whose walk is real, -> text, JSON). It answers from a table of
// who signed which digest; the real verification of sigstore bundles on a
// registry is resolve/signature's, tested there.
type tableSigner struct {
	mu     sync.Mutex
	by     map[string]resolve.Verified
	trusts []string
}

func (f *tableSigner) Verify(_ context.Context, s resolve.Subject, t *resolve.Trust) (*resolve.Verified, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trusts = append(f.trusts, t.Describe())
	v, ok := f.by[s.Digest.String()]
	switch {
	case !ok:
		return nil, &resolve.UnverifiedError{Reason: "unsigned"}
	case v.Key != "" && v.Key != t.Key, v.Key == "" && !t.MatchCertificate(v.Identity, v.Issuer):
		return nil, &resolve.UnverifiedError{Reason: "signed by " + v.Describe() + ", not by " + t.Describe()}
	}
	v.Digest = s.Digest.String()
	return &v, nil
}

// runResolve runs the resolve command in this process, its resolver built as
// compose builds it from the configuration, with the signature verifier f and
// the options opts.
func runResolve(t *testing.T, f resolve.SignatureVerifier, opts []resolve.ResolverOption, args ...string) (string, error) {
	t.Helper()
	rc := &resolveCommand{newResolver: func(c config.Config, ro ...resolve.RemoteOption) (*resolve.Resolver, error) {
		reg, _, err := compose.NewRemote(c, nil, nil, ro...)
		if err != nil {
			return nil, err
		}
		// compose's own verifier is replaced: options given last win.
		return compose.NewResolver(c, reg, nil, nil, append([]resolve.ResolverOption{resolve.WithSignatureVerifier(f)}, opts...)...)
	}}
	cmd := resolveCommandFor(rc)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true // as under the root command
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// The --verify-* flags require a signature: the newest tag signed by the identity
// wins; -o json has the chosen tag's verified signer and each skipped candidate's
// reason; the text and --explain say the same; when none verifies, the error
// says how many were tried and why each failed, and the output still shows them.
func TestResolveCommandVerify(t *testing.T) {
	t.Setenv(config.DefaultPlatformsEnv, "")
	s := rt.New(t)
	for i, tag := range []string{"1.0.0", "1.1.0", "1.2.0"} {
		s.Push(t, "org/web", tag, rt.Image(verifyT0.Add(time.Duration(i)*time.Hour), "linux/amd64"))
	}
	f := &tableSigner{by: map[string]resolve.Verified{
		s.Digest(t, "org/web", "1.0.0"): {Identity: ghWorkflow + "v1.0.0", Issuer: ghIssuer, Source: "referrers"},
		s.Digest(t, "org/web", "1.1.0"): {Identity: "https://github.com/org/other/.github/workflows/x.yml@refs/heads/main", Issuer: ghIssuer, Source: "cosign-tag"},
	}}
	web := s.Ref("org/web")
	keyless := []string{web, "--verify-identity", "regexp:^" + ghWorkflow, "--verify-issuer", ghIssuer}

	out, err := runResolve(t, f, nil, append(keyless, "-o", "json")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got struct {
		Tag      string
		Verified map[string]string
		Skipped  []struct{ Tag, Reason string }
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	wantVerified := map[string]string{"identity": ghWorkflow + "v1.0.0", "issuer": ghIssuer, "digest": s.Digest(t, "org/web", "1.0.0"), "source": "referrers"}
	if got.Tag != "1.0.0" || !equalMaps(got.Verified, wantVerified) || len(got.Skipped) != 2 ||
		got.Skipped[0].Tag != "1.2.0" || got.Skipped[0].Reason != "signature: unsigned" ||
		got.Skipped[1].Tag != "1.1.0" || !strings.HasPrefix(got.Skipped[1].Reason, "signature: signed by https://github.com/org/other/") {
		t.Errorf("json = %+v\n%s", got, out)
	}
	if want := "identity regexp:^" + ghWorkflow + " (issuer " + ghIssuer + ")"; len(f.trusts) != 3 || f.trusts[2] != want {
		t.Errorf("the verifier was asked %q, want %q", f.trusts, want)
	}
	if c := s.Counts(); c[rt.Ping] != 1 || c[rt.Tags] != 1 || c[rt.ManifestHead] != 3 || s.Total() != 5 {
		t.Errorf("registry requests %v, want a ping, a tag list and a HEAD per candidate checked", c)
	}

	out, err = runResolve(t, f, nil, append(keyless, "--explain")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		web + ":1.0.0\n",
		"  platforms   any (no platform required)\n  signed by   " + ghWorkflow + "v1.0.0 (issuer " + ghIssuer + "); signature from referrers\n",
		"  skipped     1.2.0: signature: unsigned\n",
		"  skipped  1.1.0: signature: signed by https://github.com/org/other/",
		"  chosen   1.0.0: highest semantic version, signed by " + ghWorkflow + "v1.0.0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}

	out, err = runResolve(t, f, nil, web, "--verify-key", "release", "-o", "json")
	if !errors.Is(err, resolve.ErrNoTag) || exitCode(err) != exitNoTag ||
		!strings.Contains(err.Error(), "no candidate is signed by key release: tried 3: 1.2.0: unsigned; 1.1.0: signed by") {
		t.Errorf("no signed tag: %v", err)
	}
	var none struct {
		Tag      string
		Verified map[string]string
		Skipped  []struct{ Tag, Reason string }
	}
	if err := json.Unmarshal([]byte(out), &none); err != nil || none.Tag != "" || none.Verified != nil || len(none.Skipped) != 3 {
		t.Errorf("no signed tag: json %+v (%v)\n%s", none, err, out)
	}
}

// Bad --verify-* values are input errors naming the flag, before the registry is
// read; key material is refused and never repeated; a requirement that conflicts
// with the operator's for the registry names the flag and the registries entry.
func TestResolveCommandVerifyErrors(t *testing.T) {
	t.Setenv(config.DefaultPlatformsEnv, "")
	s := rt.New(t)
	s.Push(t, "org/web", "1.0.0", rt.Image(verifyT0, "linux/amd64"))
	web := s.Ref("org/web")
	const pem = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEesHEB7vX5Y2RxXypjMy1nI1z7iRG\n-----END PUBLIC KEY-----\n"
	opsKey := []resolve.ResolverOption{resolve.WithRequiredTrust(func(name.Repository) (*resolve.Trust, string) {
		return &resolve.Trust{Key: "ops"}, `registries entry "` + s.Host + `" requireSignature`
	})}
	tests := []struct {
		name string
		opts []resolve.ResolverOption
		args []string
		want []string
	}{
		{"identity without issuer", nil, []string{web, "--verify-identity", ghWorkflow + "v1"},
			[]string{`--verify-issuer: invalid value "": verify-identity "` + ghWorkflow + `v1" needs its OIDC issuer`}},
		{"bad regexp", nil, []string{web, "--verify-identity", "regexp:(", "--verify-issuer", ghIssuer},
			[]string{`--verify-identity: invalid value "regexp:(": error parsing regexp`}},
		{"key and identity", nil, []string{web, "--verify-key", "release", "--verify-identity", "x", "--verify-issuer", "y"},
			[]string{`--verify-identity: invalid value "x": verify-key "release" is set too`}},
		{"key material", nil, []string{web, "--verify-key", pem},
			[]string{`--verify-key: invalid value "(not shown)"`, "look like key material"}},
		{"conflict with the operator", opsKey, []string{web, "--verify-identity", "x", "--verify-issuer", "y"},
			[]string{`--verify-identity: invalid value "x": conflicts with registries entry "` + s.Host + `" requireSignature, which requires key ops`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.ResetCounts()
			out, err := runResolve(t, &tableSigner{}, tt.opts, tt.args...)
			if exitCode(err) != exitInput {
				t.Errorf("exit %d, want %d: %v", exitCode(err), exitInput, err)
			}
			for _, want := range tt.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v lacks %q", err, want)
				}
			}
			if err != nil && strings.Contains(err.Error()+out, "MFkw") {
				t.Errorf("key material repeated: %v %s", err, out)
			}
			if s.Total() != 0 {
				t.Errorf("%d registry requests for bad input", s.Total())
			}
		})
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// The whole path, in the binary, with the real signature verifier: resolve's
// --verify-* flags and the operator's trust settings (keys, trusted root) choose
// the newest tag signed as required, from signatures stored in a real registry by
// signtest (a virtual Sigstore and an ephemeral key); -o json names the signer
// and why each newer tag was skipped.
func TestResolveCommandVerifiesSignatures(t *testing.T) {
	s := rt.New(t)
	for i, tag := range []string{"1.0.0", "1.1.0", "1.2.0"} {
		s.Push(t, "org/web", tag, rt.Image(verifyT0.Add(time.Duration(i)*time.Hour), "linux/amd64"))
	}
	signer, err := signtest.New()
	if err != nil {
		t.Fatal(err)
	}
	sign := func(tag string, layout signtest.Layout, spec signtest.Spec) {
		d, err := name.NewDigest(s.Ref("org/web") + "@" + s.Digest(t, "org/web", tag))
		if err != nil {
			t.Fatal(err)
		}
		if err := signer.Sign(context.Background(), d, layout, spec, remote.WithTransport(s.Client().Transport)); err != nil {
			t.Fatal(err)
		}
	}
	sign("1.0.0", signtest.Referrers, signtest.Spec{Identity: "ci@example.com", Issuer: "https://issuer.example.com"})
	sign("1.1.0", signtest.CosignTag, signtest.Spec{Key: "release"})
	dir := t.TempDir()
	pem, err := signer.PublicKeyPEM("release")
	if err != nil {
		t.Fatal(err)
	}
	rootJSON, err := signer.TrustedRootJSON()
	if err != nil {
		t.Fatal(err)
	}
	for file, b := range map[string][]byte{"release.pub": pem, "trusted_root.json": rootJSON} {
		if err := os.WriteFile(filepath.Join(dir, file), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"IMAGE_RESOLVER_TRUST_KEYS=release=" + filepath.Join(dir, "release.pub"),
		"IMAGE_RESOLVER_TRUST_TRUSTED_ROOT=" + filepath.Join(dir, "trusted_root.json"),
		"IMAGE_RESOLVER_TRUST_REQUIRE_SCT=false"} // the virtual CA's certificates have no SCT
	web := s.Ref("org/web")

	type out struct {
		Tag      string
		Verified map[string]string
		Skipped  []struct{ Tag, Reason string }
	}
	tests := []struct {
		name     string
		args     []string
		tag      string
		verified map[string]string
		skipped  []string // "tag: reason prefix"
	}{
		{"key", []string{"--verify-key", "release"}, "1.1.0",
			map[string]string{"key": "release", "digest": s.Digest(t, "org/web", "1.1.0"), "source": "cosign-tag"},
			[]string{"1.2.0: signature: unsigned"}},
		{"keyless", []string{"--verify-identity", "ci@example.com", "--verify-issuer", "https://issuer.example.com"}, "1.0.0",
			map[string]string{"identity": "ci@example.com", "issuer": "https://issuer.example.com", "digest": s.Digest(t, "org/web", "1.0.0"), "source": "referrers"},
			[]string{"1.2.0: signature: unsigned", "1.1.0: signature: signed with a key, not by identity ci@example.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := resolveCmd(t, env, append([]string{web, "-o", "json"}, tt.args...)...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			var got out
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, r.stdout)
			}
			if got.Tag != tt.tag || !equalMaps(got.Verified, tt.verified) || len(got.Skipped) != len(tt.skipped) {
				t.Fatalf("json = %+v\nwant tag %s, verified %v, skipped %q", got, tt.tag, tt.verified, tt.skipped)
			}
			for i, want := range tt.skipped {
				if sk := got.Skipped[i]; !strings.HasPrefix(sk.Tag+": "+sk.Reason, want) {
					t.Errorf("skipped[%d] = %s: %s, want %s...", i, sk.Tag, sk.Reason, want)
				}
			}
			if strings.Contains(r.stdout+r.stderr, "BEGIN") || strings.Contains(r.stdout+r.stderr, "MEUC") {
				t.Errorf("signature or key material in the output:\n%s\n%s", r.stdout, r.stderr)
			}
		})
	}
}
