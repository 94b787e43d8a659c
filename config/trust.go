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
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

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
	// TUFURL is the base URL of a TUF repository the trusted root
	// (trusted_root.json) is fetched from and refreshed, verified by its TUF
	// metadata; "" (the default): none, verification is offline.
	TUFURL string
	// TUFRoot is the TUF root.json trust in TUFURL starts from; "" is accepted
	// only for Sigstore's public-good repository (PublicGoodTUFURL), whose root
	// is built in.
	TUFRoot string
	// TUFRefresh is how old the fetched trusted root may get before a
	// verification refreshes it.
	TUFRefresh time.Duration
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
	DefaultTrustTUFRefresh        = 24 * time.Hour
	// PublicGoodTUFURL is the TUF repository of Sigstore's public-good instance,
	// whose root.json the daemon has built in (sigstore-go's).
	PublicGoodTUFURL = "https://tuf-repo-cdn.sigstore.dev"
	// trustedRootMediaType starts the mediaType of a Sigstore trusted root
	// ("application/vnd.dev.sigstore.trustedroot+json;version=0.1").
	trustedRootMediaType = "application/vnd.dev.sigstore.trustedroot+json"
	// maxPublicKeyFile and maxTrustedRootFile bound what is read of the files.
	maxPublicKeyFile   = 64 << 10
	maxTrustedRootFile = 8 << 20
	// maxTUFRootFile is the TUF client's own bound on a root.json.
	maxTUFRootFile = 512000
)

// DefaultTrustConfig has no keys and no trusted root; a keyless signature needs
// its transparency-log entry and certificate timestamp, as cosign does.
func DefaultTrustConfig() TrustConfig {
	return TrustConfig{
		RequireTlog:       true,
		RequireSCT:        true,
		TUFRefresh:        DefaultTrustTUFRefresh,
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
	tufURLAccepted      = `the base URL of a TUF repository (http or https, without credentials, query or fragment), e.g. ` + PublicGoodTUFURL + `, or "" for none`
	tufRootAccepted     = `the path of the TUF root.json of trust.tufURL (signed metadata whose signed._type is root: the repository's 1.root.json or a later version obtained out of band), or "" for Sigstore's public-good repository`
)

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
			Usage: "Sigstore trusted_root.json keyless signatures are checked against, read from the file (offline); a keyless requirement needs it or trust.tufURL; with trust.tufURL, the root used until the first fetch succeeds",
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
		{Key: trustSection + "tufURL", Env: "IMAGE_RESOLVER_TRUST_TUF_URL", Flag: "trust-tuf-url", Type: "url",
			Usage: `TUF repository the Sigstore trusted_root.json is fetched from, verified by its TUF metadata, and refreshed every trust.tufRefresh (a failed refresh keeps the last good root); "" (default): none, offline`,
			set: func(c *Config, v string) error {
				v = strings.TrimSpace(v)
				if err := checkTUFURL(v); err != nil {
					return err
				}
				c.Trust.TUFURL = v
				return nil
			},
			get: func(c *Config) string { return c.Trust.TUFURL }},
		{Key: trustSection + "tufRoot", Env: "IMAGE_RESOLVER_TRUST_TUF_ROOT", Flag: "trust-tuf-root", Type: "path",
			Usage: "TUF root.json trust in trust.tufURL starts from; required with trust.tufURL, except for Sigstore's public-good repository (" + PublicGoodTUFURL + "), whose root is built in",
			set: func(c *Config, v string) error {
				v = strings.TrimSpace(v)
				if v != "" {
					if err := checkTUFRoot(v); err != nil {
						return &resolve.InputError{Value: v, Accepted: tufRootAccepted, Err: err}
					}
				}
				c.Trust.TUFRoot = v
				return nil
			},
			get: func(c *Config) string { return c.Trust.TUFRoot }},
		durationRangeSetting(trustSection+"tufRefresh", "IMAGE_RESOLVER_TRUST_TUF_REFRESH", "trust-tuf-refresh",
			"how old the trusted root fetched from trust.tufURL may get before a verification refreshes it (in the background); after a failure the next try is in a minute, doubling up to this",
			func(c *Config) *time.Duration { return &c.Trust.TUFRefresh }, time.Minute, 30*24*time.Hour),
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

// durationRangeSetting is a duration from lo to hi.
func durationRangeSetting(key, env, flag, usage string, field func(*Config) *time.Duration, lo, hi time.Duration) Setting {
	return Setting{Key: key, Env: env, Flag: flag, Usage: usage, Type: "duration",
		set: func(c *Config, v string) error {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil || d < lo || d > hi {
				return &resolve.InputError{Value: v, Accepted: fmt.Sprintf("%s, from %s to %s", durationAccepted, formatDuration(lo), formatDuration(hi))}
			}
			*field(c) = d
			return nil
		},
		get: func(c *Config) string { return formatDuration(*field(c)) },
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
	case !resolve.CheckKeyName(n):
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

// checkTUFURL accepts "" or an http or https URL with a host and no
// credentials, query or fragment. The error shows the URL without its password.
func checkTUFURL(v string) error {
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil {
		return &resolve.InputError{Value: "(not a URL)", Accepted: tufURLAccepted}
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return &resolve.InputError{Value: u.Redacted(), Accepted: tufURLAccepted}
	}
	return nil
}

// checkTUFRoot checks that a file is TUF root metadata; its signatures are
// checked by the signature verifier.
func checkTUFRoot(path string) error {
	raw, err := readBounded(path, maxTUFRootFile)
	if err != nil {
		return err
	}
	var doc struct {
		Signed struct {
			Type string `json:"_type"`
		} `json:"signed"`
		Signatures []json.RawMessage `json:"signatures"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("%s: not JSON: %w", path, err)
	}
	if doc.Signed.Type != "root" || len(doc.Signatures) == 0 {
		return fmt.Errorf("%s: signed._type %q with %d signatures, not signed root metadata", path, doc.Signed.Type, len(doc.Signatures))
	}
	return nil
}

// isPublicGoodTUF is whether u is Sigstore's public-good TUF repository.
func isPublicGoodTUF(u string) bool { return strings.TrimSuffix(u, "/") == PublicGoodTUFURL }

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
	if err := t.validateTUF(); err != nil {
		return err
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
		if t.TrustedRoot == "" && t.TUFURL == "" {
			return &resolve.InputError{Field: field + ".identity", Value: rs.Identity,
				Err:      errors.New("a keyless requirement needs trust.trustedRoot or trust.tufURL, and neither is set"),
				Accepted: "a keyless requirement once trust.trustedRoot names the Sigstore trusted_root.json its certificates chain to (or trust.tufURL the TUF repository it is fetched from), or {key: NAME} of trust.keys"}
		}
	}
	return nil
}

// validateTUF checks the TUF settings together (a Config built in code
// included): a TUF root needs its repository, a repository other than
// Sigstore's public-good one needs its TUF root.
func (t TrustConfig) validateTUF() error {
	if err := checkTUFURL(t.TUFURL); err != nil {
		return resolve.WithField(err, "trust.tufURL")
	}
	switch {
	case t.TUFRoot != "" && t.TUFURL == "":
		return &resolve.InputError{Field: "trust.tufRoot", Value: t.TUFRoot, Err: errors.New("trust.tufURL, the repository it is the root of, is not set"),
			Accepted: "a TUF root.json together with trust.tufURL, or none"}
	case t.TUFURL != "" && t.TUFRoot == "" && !isPublicGoodTUF(t.TUFURL):
		return &resolve.InputError{Field: "trust.tufRoot", Value: "",
			Err:      fmt.Errorf("trust.tufURL %s is not Sigstore's public-good repository (%s), whose root is built in", t.TUFURL, PublicGoodTUFURL),
			Accepted: tufRootAccepted}
	case t.TUFRoot != "":
		if err := checkTUFRoot(t.TUFRoot); err != nil {
			return &resolve.InputError{Field: "trust.tufRoot", Value: t.TUFRoot, Accepted: tufRootAccepted, Err: err}
		}
	}
	if t.TUFURL != "" && (t.TUFRefresh < time.Minute || t.TUFRefresh > 30*24*time.Hour) {
		return &resolve.InputError{Field: "trust.tufRefresh", Value: formatDuration(t.TUFRefresh), Accepted: durationAccepted + ", from 1m to 720h"}
	}
	return nil
}
