package config

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// TrustConfig is how the daemon checks signatures (issue 22): the trust: section
// of the configuration file, its variables and flags. It is data: the signature
// verifier is built from it by the composition root.
type TrustConfig struct {
	// Keys are the operator's public keys by name (a policy's verify-key, a
	// registries entry's requireSignature.key): PEM files, read when the
	// configuration is validated and by PublicKeys.
	Keys map[string]string
	// TrustedRoot is the Sigstore trusted_root.json keyless signatures are
	// checked against (certificate authorities, transparency logs, timestamp
	// authorities); "" for none, and then no keyless requirement can be met.
	TrustedRoot string
	// RequireTlog requires a keyless signature's transparency-log entry.
	RequireTlog bool
	// RequireSCT requires a keyless certificate's signed certificate timestamp.
	RequireSCT bool
	// VerifyCandidates is how many candidates one resolution checks for a
	// signature at most.
	VerifyCandidates int
	// MaxReferrers bounds the referrers of one digest read.
	MaxReferrers int
	// MaxSignatureBytes bounds one signature manifest, bundle or layer read.
	MaxSignatureBytes int64
}

// Trust defaults.
const (
	DefaultTrustMaxReferrers      = 128
	DefaultTrustMaxSignatureBytes = 1 << 20
	// trustedRootMediaType starts the mediaType of a Sigstore trusted root
	// ("application/vnd.dev.sigstore.trustedroot+json;version=0.1").
	trustedRootMediaType = "application/vnd.dev.sigstore.trustedroot+json"
	// maxPublicKeyFile and maxTrustedRootFile bound what is read of the files.
	maxPublicKeyFile   = 64 << 10
	maxTrustedRootFile = 8 << 20
)

// DefaultTrustConfig has no keys and no trusted root; a keyless signature needs
// its transparency-log entry and certificate timestamp, as cosign does.
func DefaultTrustConfig() TrustConfig {
	return TrustConfig{
		RequireTlog:       true,
		RequireSCT:        true,
		VerifyCandidates:  resolve.DefaultVerifyCandidates,
		MaxReferrers:      DefaultTrustMaxReferrers,
		MaxSignatureBytes: DefaultTrustMaxSignatureBytes,
	}
}

const trustSection = "trust."

const (
	keyNameAccepted     = "a key name (a letter or digit, then up to 62 letters, digits, ., _ or -)"
	trustKeyAccepted    = "NAME=FILE: " + keyNameAccepted + " and the path of a PEM file holding one PUBLIC KEY (PKIX): ECDSA P-256 or P-384, Ed25519, or RSA of at least 2048 bits"
	trustedRootAccepted = `the path of a Sigstore trusted_root.json (JSON whose mediaType is ` + trustedRootMediaType + `;version=...), or "" for none`
)

var keyNameGrammar = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// trustSettings are the trust.* settings; in the file they are the keys of the
// trust: section (keys: a mapping of names to files there).
func trustSettings() []Setting {
	return []Setting{
		{Key: trustSection + "keys", Env: "IMAGE_RESOLVER_TRUST_KEYS", Flag: "trust-key", List: true, Type: "name=file",
			Usage: "a public key policies (verify-key) and registries entries (requireSignature.key) name: " + trustKeyAccepted +
				"; repeatable; a name given again replaces the file's or env's key of that name",
			set: setTrustKey,
			get: func(c *Config) string {
				var s []string
				for _, n := range slices.Sorted(maps.Keys(c.Trust.Keys)) {
					s = append(s, n+"="+c.Trust.Keys[n])
				}
				return strings.Join(s, ",")
			}},
		{Key: trustSection + "trustedRoot", Env: "IMAGE_RESOLVER_TRUST_TRUSTED_ROOT", Flag: "trust-trusted-root", Type: "path",
			Usage: "Sigstore trusted_root.json keyless signatures are checked against, read from the file (offline); required by any keyless requirement",
			set: func(c *Config, v string) error {
				v = strings.TrimSpace(v)
				if v != "" {
					if err := checkTrustedRoot(v); err != nil {
						return &resolve.InputError{Value: v, Accepted: trustedRootAccepted, Err: err}
					}
				}
				c.Trust.TrustedRoot = v
				return nil
			},
			get: func(c *Config) string { return c.Trust.TrustedRoot }},
		boolSetting(trustSection+"requireTlog", "IMAGE_RESOLVER_TRUST_REQUIRE_TLOG", "trust-require-tlog",
			"a keyless signature must have a transparency-log entry",
			func(c *Config) *bool { return &c.Trust.RequireTlog }),
		boolSetting(trustSection+"requireSCT", "IMAGE_RESOLVER_TRUST_REQUIRE_SCT", "trust-require-sct",
			"a keyless signature's certificate must have a signed certificate timestamp",
			func(c *Config) *bool { return &c.Trust.RequireSCT }),
		intRangeSetting(trustSection+"verifyCandidates", "IMAGE_RESOLVER_TRUST_VERIFY_CANDIDATES", "trust-verify-candidates",
			"candidates one resolution checks for a signature at most; then it fails, saying why each was skipped",
			func(c *Config) *int { return &c.Trust.VerifyCandidates }, 1, 1000),
		intRangeSetting(trustSection+"maxReferrers", "IMAGE_RESOLVER_TRUST_MAX_REFERRERS", "trust-max-referrers",
			"referrers of one image read at most when looking for its signatures",
			func(c *Config) *int { return &c.Trust.MaxReferrers }, 1, 10000),
		byteRangeSetting(trustSection+"maxSignatureBytes", "IMAGE_RESOLVER_TRUST_MAX_SIGNATURE_BYTES", "trust-max-signature-bytes",
			"bytes of one signature manifest, bundle or layer read at most",
			func(c *Config) *int64 { return &c.Trust.MaxSignatureBytes }, 16<<10, 64<<20),
	}
}

// intRangeSetting is a whole number from lo to hi.
func intRangeSetting(key, env, flag, usage string, field func(*Config) *int, lo, hi int) Setting {
	return Setting{Key: key, Env: env, Flag: flag, Usage: usage, Type: "int",
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < lo || n > hi {
				return &resolve.InputError{Value: v, Accepted: fmt.Sprintf("a whole number from %d to %d", lo, hi)}
			}
			*field(c) = n
			return nil
		},
		get: func(c *Config) string { return strconv.Itoa(*field(c)) },
	}
}

// byteRangeSetting is a size (ParseSize) from lo to hi bytes.
func byteRangeSetting(key, env, flag, usage string, field func(*Config) *int64, lo, hi int64) Setting {
	return Setting{Key: key, Env: env, Flag: flag, Usage: usage, Type: "bytes",
		set: func(c *Config, v string) error {
			n, err := ParseSize(v)
			if err != nil {
				return err
			}
			if n < lo || n > hi {
				return &resolve.InputError{Value: v, Accepted: fmt.Sprintf("%s, from %s to %s", sizeAccepted, FormatSize(lo), FormatSize(hi))}
			}
			*field(c) = n
			return nil
		},
		get: func(c *Config) string { return FormatSize(*field(c)) },
	}
}

// setTrustKey adds one NAME=FILE to the keys, after checking the file holds a
// public key.
func setTrustKey(c *Config, v string) error {
	n, file, ok := strings.Cut(strings.TrimSpace(v), "=")
	n, file = strings.TrimSpace(n), strings.TrimSpace(file)
	switch {
	case !ok || file == "":
		return &resolve.InputError{Value: v, Accepted: trustKeyAccepted, Err: errors.New("no =FILE")}
	case !keyNameGrammar.MatchString(n):
		return &resolve.InputError{Value: v, Accepted: trustKeyAccepted, Err: fmt.Errorf("key name %q", n)}
	}
	if _, err := LoadPublicKey(file); err != nil {
		return &resolve.InputError{Value: v, Accepted: trustKeyAccepted, Err: fmt.Errorf("key %s: %w", n, err)}
	}
	keys := maps.Clone(c.Trust.Keys)
	if keys == nil {
		keys = map[string]string{}
	}
	keys[n] = file
	c.Trust.Keys = keys
	return nil
}

// parseTrust reads the trust: section of a configuration file: keys is a mapping
// of names to PEM files; the other keys are the trust.* settings.
func (c *Config) parseTrust(source string, raw json.RawMessage) error {
	keys := func(field string, v json.RawMessage) error {
		var m map[string]string
		if err := json.Unmarshal(v, &m); err != nil {
			return &resolve.InputError{Field: field, Value: string(v), Accepted: "a mapping of key names to PEM files, e.g. {release: /etc/argocd-image-resolver/keys/release.pub}"}
		}
		for _, n := range slices.Sorted(maps.Keys(m)) {
			if err := c.Set(trustSection+"keys", n+"="+m[n], field+"."+n); err != nil {
				return err
			}
		}
		return nil
	}
	return c.parseSection(source, trustSection, trustSettings(), raw, map[string]func(string, json.RawMessage) error{"keys": keys})
}

// LoadPublicKey reads a PEM file holding one public key (PKIX, "PUBLIC KEY", as
// cosign generate-key-pair writes it): ECDSA P-256 or P-384, Ed25519, or RSA of at
// least 2048 bits. Errors name the file and what is wrong, never its content.
func LoadPublicKey(path string) (crypto.PublicKey, error) {
	raw, err := readBounded(path, maxPublicKeyFile)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	if block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("%s: a PEM %q block, not PUBLIC KEY", path, block.Type)
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	switch k := key.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return nil, fmt.Errorf("%s: an ECDSA key on %s, not P-256 or P-384", path, k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("%s: an RSA key of %d bits, fewer than 2048", path, k.N.BitLen())
		}
	default:
		return nil, fmt.Errorf("%s: a %T key", path, key)
	}
	return key, nil
}

// readBounded reads a file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err // *PathError: operation, path and reason
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %s", path, FormatSize(limit))
	}
	return b, nil
}

// checkTrustedRoot checks that a file is JSON of a Sigstore trusted root; what it
// holds is read by the signature verifier.
func checkTrustedRoot(path string) error {
	raw, err := readBounded(path, maxTrustedRootFile)
	if err != nil {
		return err
	}
	var doc struct {
		MediaType string `json:"mediaType"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("%s: not JSON: %w", path, err)
	}
	if !strings.HasPrefix(doc.MediaType, trustedRootMediaType) {
		return fmt.Errorf("%s: mediaType %q", path, doc.MediaType)
	}
	return nil
}

// PublicKeys reads every configured key now, by name.
func (t TrustConfig) PublicKeys() (map[string]crypto.PublicKey, error) {
	out := make(map[string]crypto.PublicKey, len(t.Keys))
	for _, n := range slices.Sorted(maps.Keys(t.Keys)) {
		k, err := LoadPublicKey(t.Keys[n])
		if err != nil {
			return nil, fmt.Errorf("trust.keys.%s: %w", n, err)
		}
		out[n] = k
	}
	return out, nil
}

// Validate checks the keys (a Config built in code), and what registries entries
// require of the trust section: a requireSignature.key must be one of the keys,
// and a keyless requireSignature needs the trusted root.
func (t TrustConfig) Validate(registries []resolve.RegistryConfig) error {
	for _, n := range slices.Sorted(maps.Keys(t.Keys)) {
		if err := setTrustKey(&Config{}, n+"="+t.Keys[n]); err != nil {
			return resolve.WithField(err, "trust.keys."+n)
		}
	}
	for _, rc := range registries {
		rs := rc.RequireSignature
		if rs == nil || rs.IsZero() {
			continue
		}
		field := fmt.Sprintf("registries entry %q: requireSignature", rc.Prefix)
		if key := strings.TrimSpace(rs.Key); key != "" {
			if _, ok := t.Keys[key]; !ok {
				configured := "none configured"
				if len(t.Keys) > 0 {
					configured = "configured: " + strings.Join(slices.Sorted(maps.Keys(t.Keys)), ", ")
				}
				return &resolve.InputError{Field: field + ".key", Value: key, Err: fmt.Errorf("trust.keys has no key %q", key),
					Accepted: "the name of a key in trust.keys (" + configured + ")"}
			}
			continue
		}
		if t.TrustedRoot == "" {
			return &resolve.InputError{Field: field + ".identity", Value: rs.Identity,
				Err:      errors.New("a keyless requirement needs trust.trustedRoot, which is not set"),
				Accepted: "a keyless requirement once trust.trustedRoot names the Sigstore trusted_root.json its certificates chain to, or {key: NAME} of trust.keys"}
		}
	}
	return nil
}
