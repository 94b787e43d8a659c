package config

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// pemFile writes a PEM block of typ holding der.
func pemFile(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	return writeFile(t, name, string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})))
}

// publicKeyFile writes pub as a PKIX PUBLIC KEY, as cosign generate-key-pair does.
func publicKeyFile(t *testing.T, name string, pub crypto.PublicKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pemFile(t, name, "PUBLIC KEY", der)
}

func ecKey(t *testing.T, c elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const trustedRootJSON = `{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1", "tlogs": [], "certificateAuthorities": []}`

// tufRootJSON has the shape of TUF root metadata (its signatures are checked by
// the signature verifier, not here).
const tufRootJSON = `{"signed": {"_type": "root", "version": 1}, "signatures": [{"keyid": "ab", "sig": "cd"}]}`

func TestTrustDefaults(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := TrustConfig{RequireTlog: true, RequireSCT: true, TUFRefresh: 24 * time.Hour, VerifyCandidates: resolve.DefaultVerifyCandidates, MaxReferrers: 128, MaxSignatureBytes: 1 << 20}
	if !reflect.DeepEqual(c.Trust, want) {
		t.Errorf("trust defaults %+v, want %+v", c.Trust, want)
	}
}

// TestTrustPrecedence: the trust: section, then IMAGE_RESOLVER_TRUST_*, then the
// --trust-* flags; keys merge by name, a later source's key of a name replacing
// an earlier one's.
func TestTrustPrecedence(t *testing.T) {
	p256 := ecKey(t, elliptic.P256())
	p384 := ecKey(t, elliptic.P384())
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	fileA, fileB := publicKeyFile(t, "a.pub", &p256.PublicKey), publicKeyFile(t, "b.pub", edPub)
	envB, envC := publicKeyFile(t, "b2.pub", &rsaKey.PublicKey), publicKeyFile(t, "c.pub", &p384.PublicKey)
	flagA := publicKeyFile(t, "a2.pub", &p384.PublicKey)
	root := writeFile(t, "trusted_root.json", trustedRootJSON)
	tufRoot, tufRoot2 := writeFile(t, "root.json", tufRootJSON), writeFile(t, "2.root.json", tufRootJSON)
	file := writeFile(t, "c.yaml", `
trust:
  keys: {a: `+fileA+`, b: `+fileB+`}
  trustedRoot: `+root+`
  tufURL: https://tuf.example.com/file
  tufRoot: `+tufRoot+`
  tufRefresh: 12h
  requireTlog: false
  verifyCandidates: 5
  maxSignatureBytes: 512KiB
registries:
  - {prefix: ghcr.io/org, requireSignature: {key: c}}
  - {prefix: ghcr.io/other, requireSignature: {identity: "regexp:^https://github.com/org/", issuer: "https://token.actions.githubusercontent.com"}}
`)
	env := map[string]string{ConfigEnv: file, "IMAGE_RESOLVER_TRUST_KEYS": "b=" + envB + ", c=" + envC,
		"IMAGE_RESOLVER_TRUST_VERIFY_CANDIDATES": "7", "IMAGE_RESOLVER_TRUST_MAX_SIGNATURE_BYTES": "2MiB",
		"IMAGE_RESOLVER_TRUST_TUF_URL": "https://tuf.example.com/env", "IMAGE_RESOLVER_TRUST_TUF_REFRESH": "6h"}
	c, err := load(t, []string{"--trust-key", "a=" + flagA, "--trust-require-sct=false", "--trust-max-referrers", "64", "--trust-verify-candidates", "9",
		"--trust-tuf-root", tufRoot2, "--trust-tuf-refresh", "90m"}, env)
	if err != nil {
		t.Fatal(err)
	}
	want := TrustConfig{Keys: map[string]string{"a": flagA, "b": envB, "c": envC}, TrustedRoot: root, RequireTlog: false, RequireSCT: false,
		TUFURL: "https://tuf.example.com/env", TUFRoot: tufRoot2, TUFRefresh: 90 * time.Minute,
		VerifyCandidates: 9, MaxReferrers: 64, MaxSignatureBytes: 2 << 20}
	if !reflect.DeepEqual(c.Trust, want) {
		t.Errorf("trust %+v\nwant  %+v", c.Trust, want)
	}
	keys, err := c.Trust.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	if !p384.PublicKey.Equal(keys["a"]) || !rsaKey.PublicKey.Equal(keys["b"]) || !p384.PublicKey.Equal(keys["c"]) || len(keys) != 3 {
		t.Errorf("public keys %v", keys)
	}
	if got := c.Get("trust.keys"); got != "a="+flagA+",b="+envB+",c="+envC {
		t.Errorf("trust.keys written as %q", got)
	}
	if got := c.Get("trust.tufRefresh"); got != "1h30m" {
		t.Errorf("trust.tufRefresh written as %q", got)
	}
	// the file's key a (an Ed25519 key) is also accepted alone
	c, err = load(t, nil, map[string]string{"IMAGE_RESOLVER_TRUST_KEYS": "a=" + fileB})
	if k, _ := c.Trust.PublicKeys(); err != nil || !edPub.Equal(k["a"]) {
		t.Errorf("Ed25519 key: %v %v", k, err)
	}
}

func TestTrustErrors(t *testing.T) {
	p256 := publicKeyFile(t, "p256.pub", &ecKey(t, elliptic.P256()).PublicKey)
	p224 := publicKeyFile(t, "p224.pub", &ecKey(t, elliptic.P224()).PublicKey)
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rsa1024 := publicKeyFile(t, "rsa1024.pub", &small.PublicKey)
	privDER, _ := x509.MarshalECPrivateKey(ecKey(t, elliptic.P256()))
	private := pemFile(t, "cosign.key", "EC PRIVATE KEY", privDER)
	notPEM := writeFile(t, "not.pem", "hello")
	badDER := pemFile(t, "bad.pub", "PUBLIC KEY", []byte("not der"))
	big := writeFile(t, "big.pub", strings.Repeat("x", 65<<10))
	root := writeFile(t, "trusted_root.json", trustedRootJSON)
	notJSON := writeFile(t, "root.txt", "{mediaType")
	tufRoot := writeFile(t, "root.json", tufRootJSON)
	otherJSON := writeFile(t, "bundle.json", `{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}`)
	const keyless = `{identity: "https://github.com/org/web/.github/workflows/release.yml@refs/heads/main", issuer: "https://token.actions.githubusercontent.com"}`

	tests := []struct {
		name string
		file string
		args []string
		env  map[string]string
		want []string // all in the message
	}{
		{"key name", "trust: {keys: {'-a': " + p256 + "}}\n", nil, nil, []string{"trust.keys.-a", `key name "-a"`, "a letter or digit"}},
		{"key file missing", "trust: {keys: {release: /nonexistent/release.pub}}\n", nil, nil, []string{"trust.keys.release", "key release", "/nonexistent/release.pub", "no such file", "PUBLIC KEY"}},
		{"key not PEM", "", []string{"--trust-key", "release=" + notPEM}, nil, []string{"--trust-key", "key release", notPEM, "no PEM block", "ECDSA P-256 or P-384, Ed25519, or RSA"}},
		{"private key", "", nil, map[string]string{"IMAGE_RESOLVER_TRUST_KEYS": "release=" + private}, []string{"IMAGE_RESOLVER_TRUST_KEYS", "key release", private, `"EC PRIVATE KEY" block, not PUBLIC KEY`}},
		{"key not DER", "", []string{"--trust-key", "k=" + badDER}, nil, []string{"--trust-key", "key k", badDER, "asn1"}},
		{"key P-224", "", []string{"--trust-key", "k=" + p224}, nil, []string{"key k", p224, "P-224, not P-256 or P-384"}},
		{"key RSA 1024", "", []string{"--trust-key", "k=" + rsa1024}, nil, []string{"key k", rsa1024, "1024 bits, fewer than 2048"}},
		{"key file too big", "", []string{"--trust-key", "k=" + big}, nil, []string{"key k", big, "larger than 64KiB"}},
		{"key without file", "", nil, map[string]string{"IMAGE_RESOLVER_TRUST_KEYS": "release"}, []string{"IMAGE_RESOLVER_TRUST_KEYS", `"release"`, "NAME=FILE"}},
		{"keys not a mapping", "trust: {keys: [a, b]}\n", nil, nil, []string{"trust.keys", "a mapping of key names to PEM files"}},
		{"unknown trust key", "trust: {requireTLog: false}\n", nil, nil, []string{`unknown key "trust.requireTLog"; did you mean "requireTlog"?`}},
		{"trusted root missing", "trust: {trustedRoot: /nonexistent/trusted_root.json}\n", nil, nil, []string{"trust.trustedRoot", "/nonexistent/trusted_root.json", "no such file", "trusted_root.json"}},
		{"trusted root not JSON", "", []string{"--trust-trusted-root", notJSON}, nil, []string{"--trust-trusted-root", notJSON, "not JSON"}},
		{"trusted root other JSON", "", nil, map[string]string{"IMAGE_RESOLVER_TRUST_TRUSTED_ROOT": otherJSON}, []string{"IMAGE_RESOLVER_TRUST_TRUSTED_ROOT", `mediaType "application/vnd.dev.sigstore.bundle.v0.3+json"`, "application/vnd.dev.sigstore.trustedroot+json"}},
		{"require tlog", "trust: {requireTlog: maybe}\n", nil, nil, []string{"trust.requireTlog", `"maybe"`, "true or false"}},
		{"verify candidates 0", "trust: {verifyCandidates: 0}\n", nil, nil, []string{"trust.verifyCandidates", `"0"`, "from 1 to 1000"}},
		{"verify candidates 1001", "", []string{"--trust-verify-candidates", "1001"}, nil, []string{"--trust-verify-candidates", "from 1 to 1000"}},
		{"max referrers", "", nil, map[string]string{"IMAGE_RESOLVER_TRUST_MAX_REFERRERS": "-1"}, []string{"IMAGE_RESOLVER_TRUST_MAX_REFERRERS", "from 1 to 10000"}},
		{"signature bytes unit", "trust: {maxSignatureBytes: 1 meg}\n", nil, nil, []string{"trust.maxSignatureBytes", `"1 meg"`, "MiB"}},
		{"signature bytes small", "", []string{"--trust-max-signature-bytes", "1KiB"}, nil, []string{"--trust-max-signature-bytes", "from 16KiB to 64MiB"}},
		{"required key not configured", "trust: {keys: {other: " + p256 + "}}\nregistries: [{prefix: ghcr.io/org, requireSignature: {key: release}}]\n", nil, nil,
			[]string{`registries entry "ghcr.io/org": requireSignature.key: invalid value "release"`, `trust.keys has no key "release"`, "configured: other"}},
		{"required key, no keys", "registries: [{prefix: ghcr.io/org, requireSignature: {key: release}}]\n", nil, nil,
			[]string{`registries entry "ghcr.io/org": requireSignature.key`, "none configured"}},
		{"keyless without trusted root", "registries: [{prefix: ghcr.io/org, requireSignature: " + keyless + "}]\n", nil, nil,
			[]string{`registries entry "ghcr.io/org": requireSignature.identity`, "needs trust.trustedRoot or trust.tufURL, and neither is set"}},
		{"tuf url scheme", "trust: {tufURL: 'ftp://tuf.example.com'}\n", nil, nil, []string{"trust.tufURL", `"ftp://tuf.example.com"`, "http or https"}},
		{"tuf url credentials", "", []string{"--trust-tuf-url", "https://robot:s3cret@tuf.example.com"}, nil, []string{"--trust-tuf-url", `"https://robot:xxxxx@tuf.example.com"`, "without credentials"}},
		{"tuf url query", "", nil, map[string]string{"IMAGE_RESOLVER_TRUST_TUF_URL": "https://tuf.example.com/?x=1"}, []string{"IMAGE_RESOLVER_TRUST_TUF_URL", "query"}},
		{"tuf url without root", "trust: {tufURL: 'https://tuf.example.com'}\n", nil, nil,
			[]string{"trust.tufRoot", "trust.tufURL https://tuf.example.com is not Sigstore's public-good repository (https://tuf-repo-cdn.sigstore.dev)", "the TUF root.json of trust.tufURL"}},
		{"tuf root without url", "trust: {tufRoot: " + tufRoot + "}\n", nil, nil, []string{"trust.tufRoot", tufRoot, "trust.tufURL, the repository it is the root of, is not set"}},
		{"tuf root missing", "", []string{"--trust-tuf-root", "/nonexistent/root.json"}, nil, []string{"--trust-tuf-root", "/nonexistent/root.json", "no such file", "TUF root.json"}},
		{"tuf root other JSON", "", []string{"--trust-tuf-root", root}, nil, []string{"--trust-tuf-root", root, `signed._type "" with 0 signatures, not signed root metadata`}},
		{"tuf refresh short", "trust: {tufRefresh: 30s}\n", nil, nil, []string{"trust.tufRefresh", `"30s"`, "from 1m to 720h"}},
		{"tuf refresh long", "", nil, map[string]string{"IMAGE_RESOLVER_TRUST_TUF_REFRESH": "721h"}, []string{"IMAGE_RESOLVER_TRUST_TUF_REFRESH", "from 1m to 720h"}},
		{"registries file, key from flag missing", "", []string{"--trust-trusted-root", root}, map[string]string{RegistriesConfigEnv: writeFile(t, "r.yaml", "registries: [{prefix: quay.io, requireSignature: {key: k}}]\n")},
			[]string{`registries entry "quay.io": requireSignature.key`, `no key "k"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range tt.env {
				env[k] = v
			}
			if tt.file != "" {
				env[ConfigEnv] = writeFile(t, "config.yaml", tt.file)
			}
			_, err := load(t, tt.args, env)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestTrustRequirementsMet: a keyless requirement with the trusted root set and a
// key requirement whose key is configured load.
func TestTrustRequirementsMet(t *testing.T) {
	key := publicKeyFile(t, "release.pub", &ecKey(t, elliptic.P256()).PublicKey)
	root := writeFile(t, "trusted_root.json", trustedRootJSON)
	file := writeFile(t, "c.yaml", `registries:
  - {prefix: ghcr.io/org, requireSignature: {identity: "regexp:^https://github.com/org/", issuer: "https://token.actions.githubusercontent.com"}}
  - {prefix: quay.io/org, requireSignature: {key: release}}
`)
	c, err := load(t, []string{"--trust-key", "release=" + key}, map[string]string{ConfigEnv: file, "IMAGE_RESOLVER_TRUST_TRUSTED_ROOT": root})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Registries) != 2 || c.Registries[1].RequireSignature.Key != "release" || c.Trust.TrustedRoot != root {
		t.Errorf("config %+v", c)
	}
}

// TestTrustTUFSettings: Sigstore's public-good repository needs no TUF root (it
// is built in); a keyless requirement is met by a TUF repository alone; the TUF
// URL and the trusted root file may be given together.
func TestTrustTUFSettings(t *testing.T) {
	root := writeFile(t, "trusted_root.json", trustedRootJSON)
	file := writeFile(t, "c.yaml", `registries:
  - {prefix: ghcr.io/org, requireSignature: {identity: "regexp:^https://github.com/org/", issuer: "https://token.actions.githubusercontent.com"}}
`)
	for _, u := range []string{PublicGoodTUFURL, PublicGoodTUFURL + "/"} {
		c, err := load(t, []string{"--trust-tuf-url", u}, map[string]string{ConfigEnv: file})
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		if c.Trust.TUFURL != u || c.Trust.TUFRoot != "" || c.Trust.TUFRefresh != 24*time.Hour {
			t.Errorf("%s: trust %+v", u, c.Trust)
		}
	}
	c, err := load(t, []string{"--trust-tuf-url", PublicGoodTUFURL, "--trust-trusted-root", root}, nil)
	if err != nil || c.Trust.TrustedRoot != root || c.Trust.TUFURL != PublicGoodTUFURL {
		t.Errorf("tufURL and trustedRoot together: %+v %v", c.Trust, err)
	}
	bad := DefaultConfig()
	bad.Trust.TUFURL = "https://tuf.example.com"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "trust.tufRoot") {
		t.Errorf("built in code, tufURL without tufRoot: %v", err)
	}
	bad.Trust.TUFURL, bad.Trust.TUFRefresh = PublicGoodTUFURL, 0
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "trust.tufRefresh") {
		t.Errorf("built in code, tufRefresh 0: %v", err)
	}
}

// TestTrustValidateBuiltInCode: Validate checks the keys of a Config built in code.
func TestTrustValidateBuiltInCode(t *testing.T) {
	c := DefaultConfig()
	c.Trust.Keys = map[string]string{"release": "/nonexistent/release.pub"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "trust.keys.release") || !strings.Contains(err.Error(), "/nonexistent/release.pub") {
		t.Errorf("missing key file: %v", err)
	}
	c = DefaultConfig()
	c.Trust.VerifyCandidates = 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "trust.verifyCandidates") {
		t.Errorf("zero verifyCandidates: %v", err)
	}
}
