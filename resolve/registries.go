package resolve

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/yaml"
)

// RegistryConfig is the operator's configuration of one registry, matched by the
// longest prefix of the normalised image repository (docker.io/library/nginx).
type RegistryConfig struct {
	// Prefix is a registry host, optionally with a path: ghcr.io, ghcr.io/org.
	Prefix string `json:"prefix"`
	// API is another endpoint serving the same registry (a mirror or an internal
	// address): host[:port]. Images keep their written name in manifests.
	API string `json:"api,omitempty"`
	// Insecure allows plain HTTP and unverified TLS for this registry.
	Insecure bool `json:"insecure,omitempty"`
	// CA is a PEM file of certificate authorities trusted for this registry (and
	// its API endpoint), besides the system's.
	CA string `json:"ca,omitempty"`
	// Credentials names where this registry's credential comes from (see
	// ParseCredentialSource); empty: the default keychain (docker config).
	Credentials string `json:"credentials,omitempty"`
	// CredentialsExpire is how long a fetched credential is used before it is
	// fetched again (a Go duration: 30m, 12h); empty: the source's own default.
	CredentialsExpire string `json:"credentialsExpire,omitempty"`
	// CredentialsTimeout bounds an ext: script's run (default 60s).
	CredentialsTimeout string `json:"credentialsTimeout,omitempty"`
	// RateLimit is the requests per second allowed to this registry (0: no limit
	// of its own); the daemon's rate limiter reads it.
	RateLimit float64 `json:"rateLimit,omitempty"`
	// PageSize is the tag page size asked for (0: DefaultPageSize).
	PageSize int `json:"pageSize,omitempty"`
	// DefaultNamespace is put before one-component repository names (nginx ->
	// library/nginx). Docker Hub's is always library.
	DefaultNamespace string `json:"defaultNamespace,omitempty"`
	// Apps are globs (path.Match: * does not cross /) of the Argo CD application
	// names that may resolve images under this prefix; empty: every app.
	Apps []string `json:"apps,omitempty"`
	// RequireSignature is the signature every image under this prefix must carry:
	// keyless {identity, issuer} or {key} (a name in the daemon's trust.keys). It
	// applies under every longer prefix too: a more specific entry adds its own
	// requirement (both must hold; see RegistryTable.RequiredTrust), it never
	// lifts a broader one, and an app's verify can only narrow it.
	RequireSignature *VerifySpec `json:"requireSignature,omitempty"`
	// MetadataAPI is the registry's own metadata API tags are listed through
	// (dockerhub, harbor, gar, ecr, acr, quay; none: the OCI protocol only); ""
	// follows the host (DefaultMetadataAPI). MetadataURL is its base URL ("": the
	// vendor's).
	MetadataAPI string `json:"metadataAPI,omitempty"`
	MetadataURL string `json:"metadataURL,omitempty"`
}

// DefaultMetadataAPI is the metadata API of a registry host when its entry
// names none: Docker Hub's, Artifact Registry's, ECR's, ACR's and Quay.io's are
// known by their hosts; Harbor's must be declared; elsewhere none.
func DefaultMetadataAPI(host string) string {
	switch {
	case host == "docker.io" || host == name.DefaultRegistry || host == "registry-1.docker.io":
		return MetadataDockerHub
	case strings.HasSuffix(host, "-docker.pkg.dev"):
		return MetadataGAR
	case reECRHost.MatchString(host):
		return MetadataECR
	case reACRHost.MatchString(host):
		return MetadataACR
	case host == "quay.io":
		return MetadataQuay
	}
	return MetadataNone
}

// EffectiveMetadataAPI is the entry's metadataAPI, or its host's default.
func (rc RegistryConfig) EffectiveMetadataAPI() string {
	if rc.MetadataAPI != "" {
		return rc.MetadataAPI
	}
	return DefaultMetadataAPI(rc.Host())
}

// DefaultCredentialsTimeout bounds an ext: credentials script unless the entry
// says otherwise.
const DefaultCredentialsTimeout = 60 * time.Second

// CredentialsExpiry is the parsed credentialsExpire (0 when not set).
func (rc RegistryConfig) CredentialsExpiry() time.Duration {
	d, _ := time.ParseDuration(rc.CredentialsExpire)
	return d
}

// CredentialsTimeoutOrDefault is the parsed credentialsTimeout, or
// DefaultCredentialsTimeout.
func (rc RegistryConfig) CredentialsTimeoutOrDefault() time.Duration {
	if d, err := time.ParseDuration(rc.CredentialsTimeout); err == nil && d > 0 {
		return d
	}
	return DefaultCredentialsTimeout
}

// Host is the registry host of the entry's prefix (docker.io for Docker Hub).
func (rc RegistryConfig) Host() string {
	host, _, _ := strings.Cut(rc.Prefix, "/")
	return host
}

// AllowsApp reports whether app may resolve images under this entry: always when
// the entry has no apps, else when a glob matches. An empty app (none known) is
// refused by an entry with apps.
func (rc RegistryConfig) AllowsApp(app string) bool {
	if len(rc.Apps) == 0 {
		return true
	}
	if app == "" {
		return false
	}
	for _, g := range rc.Apps {
		if ok, _ := path.Match(g, app); ok {
			return true
		}
	}
	return false
}

// RegistriesFile is the registries configuration file.
type RegistriesFile struct {
	Registries []RegistryConfig `json:"registries"`
}

// LoadRegistries reads and checks a registries configuration file. Unknown keys are
// errors, so a typo does not silently change nothing.
func LoadRegistries(path string) ([]RegistryConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("registries config: %w", err)
	}
	return ParseRegistries(path, raw)
}

var (
	reNamespace = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)
	// ECR private registries: ACCOUNT.dkr.ecr[-fips].REGION.amazonaws.com[.cn].
	reECRHost = regexp.MustCompile(`^(\d{12})\.dkr[.-]ecr(-fips)?\.([a-z0-9-]+)\.(amazonaws\.com(\.cn)?|on\.(aws|amazonwebservices\.com\.cn))$`)
	reACRHost = regexp.MustCompile(`^[a-z0-9-]+\.azurecr\.(io|cn|us|de)$`)
)

// ECRHost splits an ECR private registry host into its account and region.
func ECRHost(host string) (account, region string, ok bool) {
	m := reECRHost.FindStringSubmatch(host)
	if m == nil {
		return "", "", false
	}
	return m[1], m[3], true
}

func isGoogleHost(host string) bool {
	return host == "gcr.io" || strings.HasSuffix(host, ".gcr.io") || strings.HasSuffix(host, ".pkg.dev")
}

// checkMetadataAPI checks an entry's metadataAPI and metadataURL.
func checkMetadataAPI(rc *RegistryConfig, field func(string) string) error {
	if rc.MetadataAPI != "" && !slices.Contains(MetadataAPIs, rc.MetadataAPI) {
		return &InputError{Field: field("metadataAPI"), Value: rc.MetadataAPI, Accepted: strings.Join(MetadataAPIs, ", ")}
	}
	if rc.MetadataURL == "" {
		return nil
	}
	u, err := url.Parse(rc.MetadataURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" {
		return &InputError{Field: field("metadataURL"), Value: redactURL(rc.MetadataURL),
			Accepted: "the API's base URL, https://host[:port][/path], without credentials or query"}
	}
	if rc.EffectiveMetadataAPI() == MetadataNone {
		return &InputError{Field: field("metadataURL"), Value: rc.MetadataURL,
			Accepted: "a metadataURL with a metadataAPI (" + strings.Join(MetadataAPIs[:len(MetadataAPIs)-1], ", ") + ")"}
	}
	return nil
}

// redactURL hides a URL's credentials.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	return s
}

// ParseRegistries parses registries configuration; source names it in errors.
func ParseRegistries(source string, raw []byte) ([]RegistryConfig, error) {
	var f RegistriesFile
	if err := yaml.UnmarshalStrict(bytes.TrimSpace(raw), &f); err != nil {
		return nil, fmt.Errorf("registries config %s: %w", source, err)
	}
	seen := map[string]bool{}
	for i := range f.Registries {
		rc := &f.Registries[i]
		field := func(k string) string { return fmt.Sprintf("%s: registries[%d].%s", source, i, k) }
		if err := checkEndpoint(rc, field, seen); err != nil {
			return nil, err
		}
		if err := checkCredentials(rc, field); err != nil {
			return nil, err
		}
		if rc.RequireSignature != nil {
			if _, err := compileRequirement(source, rc.Prefix, *rc.RequireSignature); err != nil {
				return nil, err
			}
		}
	}
	if _, err := requirements(source, f.Registries); err != nil {
		return nil, err
	}
	return f.Registries, nil
}

// checkEndpoint checks (and normalises) an entry's prefix and where and how its
// registry is reached; field names a key of the entry for messages.
func checkEndpoint(rc *RegistryConfig, field func(string) string, seen map[string]bool) error {
	p, err := normalisePrefix(rc.Prefix)
	if err != nil {
		return &InputError{Field: field("prefix"), Value: rc.Prefix,
			Accepted: "a registry host[:port], optionally followed by /path, e.g. ghcr.io/org", Err: err}
	}
	if seen[p] {
		return &InputError{Field: field("prefix"), Value: rc.Prefix, Accepted: "each prefix once"}
	}
	seen[p] = true
	rc.Prefix = p
	if rc.API != "" {
		if _, err := name.NewRegistry(rc.API, name.StrictValidation); err != nil || strings.Contains(rc.API, "/") {
			return &InputError{Field: field("api"), Value: rc.API, Accepted: "host[:port] of another endpoint of the same registry"}
		}
	}
	if rc.PageSize < 0 {
		return &InputError{Field: field("pageSize"), Value: fmt.Sprint(rc.PageSize), Accepted: "0 (default) or a positive number"}
	}
	if math.IsNaN(rc.RateLimit) || math.IsInf(rc.RateLimit, 0) || rc.RateLimit < 0 {
		return &InputError{Field: field("rateLimit"), Value: fmt.Sprint(rc.RateLimit),
			Accepted: "requests per second: 0 (no limit of its own) or a positive number, e.g. 5 or 0.5"}
	}
	if err := checkMetadataAPI(rc, field); err != nil {
		return err
	}
	if rc.DefaultNamespace != "" {
		ok := reNamespace.MatchString(rc.DefaultNamespace)
		if rc.Prefix == "docker.io" && rc.DefaultNamespace != "library" {
			ok = false
		}
		if !ok {
			return &InputError{Field: field("defaultNamespace"), Value: rc.DefaultNamespace,
				Accepted: "a repository path such as library or team/images (only library on Docker Hub)"}
		}
	}
	if rc.CA != "" {
		if rc.Insecure {
			return &InputError{Field: field("ca"), Value: rc.CA,
				Accepted: "a CA file or insecure: true, not both (insecure turns TLS verification off)"}
		}
		if err := checkCAFile(rc.CA); err != nil {
			return &InputError{Field: field("ca"), Value: rc.CA,
				Accepted: "the absolute path of a readable PEM file holding at least one CERTIFICATE", Err: err}
		}
	}
	for j, g := range rc.Apps {
		if _, err := path.Match(g, ""); err != nil || strings.TrimSpace(g) == "" {
			return &InputError{Field: field(fmt.Sprintf("apps[%d]", j)), Value: g,
				Accepted: "an Argo CD application name or a glob (*, ?, [a-z]; * does not cross /)"}
		}
	}
	return nil
}

// checkCredentials checks where an entry's credential comes from and how long it
// is kept.
func checkCredentials(rc *RegistryConfig, field func(string) string) error {
	if rc.Credentials != "" {
		src, err := ParseCredentialSource(rc.Credentials)
		if err != nil {
			return &InputError{Field: field("credentials"), Value: rc.Credentials, Accepted: CredentialSourceForms, Err: err}
		}
		if err := src.checkHost(rc.Host()); err != nil {
			return &InputError{Field: field("credentials"), Value: rc.Credentials, Err: err,
				Accepted: fmt.Sprintf("%s only for the registries it serves, not for prefix %s", src.Kind, rc.Prefix)}
		}
	}
	if rc.CredentialsExpire != "" {
		d, err := time.ParseDuration(rc.CredentialsExpire)
		if err != nil || d <= 0 || rc.Credentials == "" {
			return &InputError{Field: field("credentialsExpire"), Value: rc.CredentialsExpire,
				Accepted: "a positive duration such as 30m or 12h, with credentials set"}
		}
	}
	if rc.CredentialsTimeout != "" {
		d, err := time.ParseDuration(rc.CredentialsTimeout)
		if err != nil || d <= 0 || !strings.HasPrefix(rc.Credentials, CredExt+":") {
			return &InputError{Field: field("credentialsTimeout"), Value: rc.CredentialsTimeout,
				Accepted: "a positive duration such as 10s or 2m, with credentials: ext:/path/to/script"}
		}
	}
	return nil
}

func checkCAFile(p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("not an absolute path")
	}
	_, err := LoadCAFile(p)
	return err
}

// LoadCAFile reads the certificates of a PEM file.
func LoadCAFile(p string) ([]*x509.Certificate, error) {
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for {
		var b *pem.Block
		b, raw = pem.Decode(raw)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("no PEM CERTIFICATE block")
	}
	return certs, nil
}

// normalisePrefix folds Docker Hub's aliases into docker.io, as RepoKey does.
func normalisePrefix(p string) (string, error) {
	p = strings.TrimSuffix(strings.TrimSpace(p), "/")
	if p == "" {
		return "", fmt.Errorf("empty")
	}
	host, path, _ := strings.Cut(p, "/")
	if _, err := name.NewRegistry(host, name.StrictValidation); err != nil {
		return "", err
	}
	switch host {
	case name.DefaultRegistry, "registry-1.docker.io":
		host = "docker.io"
	}
	if path != "" {
		return host + "/" + path, nil
	}
	return host, nil
}

// registryTable matches repositories to their configuration.
type registryTable []RegistryConfig

func newRegistryTable(cfgs []RegistryConfig) registryTable {
	t := append(registryTable(nil), cfgs...)
	sort.SliceStable(t, func(i, j int) bool { return len(t[i].Prefix) > len(t[j].Prefix) })
	return t
}

// lookup returns the configuration with the longest prefix matching repo, if any.
// A prefix matches whole path components only: ghcr.io/org matches ghcr.io/org/app,
// not ghcr.io/organisation.
func (t registryTable) lookup(repo name.Repository) (RegistryConfig, bool) {
	key := RepoKey(repo)
	for _, rc := range t {
		if key == rc.Prefix || strings.HasPrefix(key, rc.Prefix+"/") {
			return rc, true
		}
	}
	return RegistryConfig{}, false
}

// RegistryTable matches repositories to registry configuration by the longest
// prefix, Docker Hub's aliases folded into docker.io.
type RegistryTable struct {
	t   registryTable
	req map[string]requirement // by entry prefix: the requireSignature in force there
}

// NewRegistryTable returns the table of cfgs.
func NewRegistryTable(cfgs []RegistryConfig) RegistryTable {
	t := newRegistryTable(cfgs)
	req, _ := requirements("", t)
	return RegistryTable{t: t, req: req}
}

// Lookup returns the entry with the longest prefix matching repo, if any.
func (t RegistryTable) Lookup(repo name.Repository) (RegistryConfig, bool) { return t.t.lookup(repo) }
