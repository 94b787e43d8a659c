package resolve

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strings"

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
	// PageSize is the tag page size asked for (0: DefaultPageSize).
	PageSize int `json:"pageSize,omitempty"`
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
		p, err := normalisePrefix(rc.Prefix)
		if err != nil {
			return nil, &InputError{Field: field("prefix"), Value: rc.Prefix,
				Accepted: "a registry host[:port], optionally followed by /path, e.g. ghcr.io/org", Err: err}
		}
		if seen[p] {
			return nil, &InputError{Field: field("prefix"), Value: rc.Prefix, Accepted: "each prefix once"}
		}
		seen[p] = true
		rc.Prefix = p
		if rc.API != "" {
			if _, err := name.NewRegistry(rc.API, name.StrictValidation); err != nil || strings.Contains(rc.API, "/") {
				return nil, &InputError{Field: field("api"), Value: rc.API, Accepted: "host[:port] of another endpoint of the same registry"}
			}
		}
		if rc.PageSize < 0 {
			return nil, &InputError{Field: field("pageSize"), Value: fmt.Sprint(rc.PageSize), Accepted: "0 (default) or a positive number"}
		}
	}
	return f.Registries, nil
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
