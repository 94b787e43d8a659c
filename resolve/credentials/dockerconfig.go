package credentials

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// dockerConfigFile is dockerconfig:/path: a docker config.json (a mounted
// kubernetes.io/dockerconfigjson secret) or a legacy .dockercfg, re-read when the
// file changes (the kubelet swaps a mounted secret's files when it is updated).
func (k *Keychain) dockerConfigFile(path string) fetchFunc {
	return func(context.Context) (*material, error) {
		fi, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		ring, err := parseDockerConfig(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		m := ring.material()
		m.stale = func() bool {
			now, err := os.Stat(path)
			return err != nil || !now.ModTime().Equal(fi.ModTime()) || now.Size() != fi.Size() || !os.SameFile(now, fi)
		}
		return m, nil
	}
}

// keyring is a parsed docker config, matched as the kubelet matches pull secrets:
// keys may carry a scheme, a port, a path prefix and * globs in host labels; the
// most specific key wins; Docker Hub's keys (https://index.docker.io/v1/,
// index.docker.io, docker.io, registry-1.docker.io) are one. Unlike the kubelet, a
// path prefix matches whole path components only.
type keyring struct {
	entries []ringEntry
}

type ringEntry struct {
	key              string // as written, for messages (never a secret)
	host, port, path string // host lower-cased, Docker Hub folded to index.docker.io
	auth             authn.AuthConfig
}

type dockerAuth struct {
	Auth          string `json:"auth,omitempty"`
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// parseDockerConfig reads config.json ({"auths": {...}}) or .dockercfg ({...}).
// Its errors never quote the content.
func parseDockerConfig(raw []byte) (*keyring, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("not a docker config: JSON does not parse")
	}
	auths := top
	if a, ok := top["auths"]; ok {
		auths = nil
		if err := json.Unmarshal(a, &auths); err != nil {
			return nil, fmt.Errorf("not a docker config: auths is not an object")
		}
	}
	ring := &keyring{}
	for key, v := range auths {
		var da dockerAuth
		if err := json.Unmarshal(v, &da); err != nil {
			return nil, fmt.Errorf("docker config entry %q is not an object", key)
		}
		ac := authn.AuthConfig{Username: da.Username, Password: da.Password,
			IdentityToken: da.IdentityToken, RegistryToken: da.RegistryToken}
		if da.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(da.Auth)
			if err != nil {
				return nil, fmt.Errorf("docker config entry %q: auth is not base64", key)
			}
			user, pass, ok := strings.Cut(string(dec), ":")
			if !ok {
				return nil, fmt.Errorf("docker config entry %q: auth is not base64 of user:password", key)
			}
			ac.Username, ac.Password = user, pass
		}
		host, port, path, err := parseKey(key)
		if err != nil {
			return nil, fmt.Errorf("docker config entry %q: %w", key, err)
		}
		ring.entries = append(ring.entries, ringEntry{key: key, host: host, port: port, path: path, auth: ac})
	}
	// Most specific first: longer paths, then hosts without globs, then by key.
	sort.Slice(ring.entries, func(i, j int) bool {
		a, b := ring.entries[i], ring.entries[j]
		if len(a.path) != len(b.path) {
			return len(a.path) > len(b.path)
		}
		if ga, gb := strings.Contains(a.host, "*"), strings.Contains(b.host, "*"); ga != gb {
			return gb
		}
		return a.key < b.key
	})
	return ring, nil
}

// parseKey splits a docker config key (https://host:port/path, host/path, ...).
func parseKey(key string) (host, port, path string, err error) {
	k := strings.TrimSpace(key)
	if !strings.Contains(k, "://") {
		k = "//" + k
	}
	u, err := url.Parse(k)
	if err != nil || u.Host == "" {
		return "", "", "", fmt.Errorf("not a registry host")
	}
	host, port = strings.ToLower(u.Hostname()), u.Port()
	path = strings.Trim(u.Path, "/")
	if path == "v1" || path == "v2" || strings.HasPrefix(path, "v1/") || strings.HasPrefix(path, "v2/") {
		path = strings.Trim(path[2:], "/")
	}
	return foldDockerHub(host), port, path, nil
}

func foldDockerHub(host string) string {
	switch host {
	case "docker.io", "index.docker.io", "registry-1.docker.io":
		return "index.docker.io"
	}
	return host
}

// lookup returns the credential of the most specific key matching repo.
func (r *keyring) lookup(repo name.Repository) (*authn.AuthConfig, bool) {
	host, port, err := net.SplitHostPort(repo.RegistryStr())
	if err != nil {
		host, port = repo.RegistryStr(), ""
	}
	host = foldDockerHub(strings.ToLower(host))
	path := repo.RepositoryStr()
	for _, e := range r.entries {
		if e.port != port || !hostMatch(e.host, host) {
			continue
		}
		if e.path != "" && path != e.path && !strings.HasPrefix(path, e.path+"/") {
			continue
		}
		ac := e.auth
		return &ac, true
	}
	return nil, false
}

// hostMatch matches host against a pattern whose labels may be globs (*.example.com),
// label by label as the kubelet does.
func hostMatch(pattern, host string) bool {
	pl, hl := strings.Split(pattern, "."), strings.Split(host, ".")
	if len(pl) != len(hl) {
		return false
	}
	for i := range pl {
		if ok, _ := filepath.Match(pl[i], hl[i]); !ok {
			return false
		}
	}
	return true
}

// keys lists the keys, for an error saying that none matched.
func (r *keyring) keys() []string {
	var ks []string
	for _, e := range r.entries {
		ks = append(ks, e.key)
	}
	sort.Strings(ks)
	return ks
}

func (r *keyring) material() *material {
	return &material{
		lookup: func(_ context.Context, repo name.Repository) (*authn.AuthConfig, error) {
			if ac, ok := r.lookup(repo); ok {
				return ac, nil
			}
			return nil, fmt.Errorf("no entry for %s among %s (keys are matched as the kubelet does: host[:port][/path])",
				repo.RegistryStr()+"/"+repo.RepositoryStr(), strings.Join(r.keys(), ", "))
		},
		what: fmt.Sprintf("%d registries", len(r.entries)),
	}
}

// expiresFromJWT reads the exp claim of a JWT without verifying it (the token
// is only used to know when to fetch a new one).
func expiresFromJWT(tok string) time.Time {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}
	}
	var claims struct {
		Exp float64 `json:"exp"`
	}
	if json.Unmarshal(raw, &claims) != nil || claims.Exp <= 0 {
		return time.Time{}
	}
	return time.Unix(int64(claims.Exp), 0)
}
