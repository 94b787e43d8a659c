package metadata

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Docker Hub's tags API (https://docs.docker.com/reference/api/hub/latest/):
//
//	GET {base}/v2/namespaces/{namespace}/repositories/{repository}/tags?page_size=100
//
// answers {"count", "next", "previous", "results": [tag]} newest update first,
// next being the absolute URL of the next page (null on the last). Each tag has
// its name, digest, media_type, tag_last_pushed and last_updated, and images[]:
// per image manifest its os, architecture, variant, digest, status and
// last_pushed; an image of architecture "unknown" is an attestation. Hub gives
// no build time: Created stays zero. Listing tags is not a pull (it does not
// count against the pull rate limit).
//
// Authentication: anonymous for public repositories. With a credential (user
// name and password or personal access token for index.docker.io), the client
// obtains a short-lived JWT from POST {base}/v2/auth/token
// {"identifier","secret"} -> {"access_token"} (the current endpoint; the older
// POST /v2/users/login {"username","password"} -> {"token"} is deprecated) and
// sends it as a Bearer token, cached until it expires (its exp claim, else 10
// minutes as documented) or a page answers 401.

// DefaultDockerHubURL is Docker Hub's API.
const DefaultDockerHubURL = "https://hub.docker.com"

// hubMaxPageSize is the largest page_size Hub accepts.
const hubMaxPageSize = 100

// hubTokenLifetime is an access token's lifetime when its exp is not readable.
const hubTokenLifetime = 10 * time.Minute

// DockerHub reads Docker Hub's tags API. It is safe for concurrent use.
type DockerHub struct {
	c    apiClient
	base string

	mu     sync.Mutex
	tokens map[string]hubToken // by credential fingerprint
}

type hubToken struct {
	value   string
	expires time.Time
}

// NewDockerHub returns a Docker Hub client (o.BaseURL "" for
// DefaultDockerHubURL).
func NewDockerHub(o Options) (*DockerHub, error) {
	base, err := baseURL(resolve.MetadataDockerHub, o.BaseURL, DefaultDockerHubURL)
	if err != nil {
		return nil, err
	}
	return &DockerHub{c: newAPIClient(resolve.MetadataDockerHub, o, hubMaxPageSize), base: base,
		tokens: map[string]hubToken{}}, nil
}

// Name is resolve.MetadataDockerHub.
func (h *DockerHub) Name() string { return resolve.MetadataDockerHub }

// ListTagRecords lists every tag of repo (namespace/repository; official
// images under library/).
func (h *DockerHub) ListTagRecords(ctx context.Context, repo name.Repository) ([]resolve.TagRecord, error) {
	ns, rp, ok := strings.Cut(repo.RepositoryStr(), "/")
	if !ok || strings.Contains(rp, "/") {
		return nil, fmt.Errorf("%s API: repository %s: Docker Hub repositories are namespace/name", h.Name(), repo)
	}
	cred, err := h.c.credential(ctx, repo)
	if err != nil {
		return nil, err
	}
	first := fmt.Sprintf("%s/v2/namespaces/%s/repositories/%s/tags?page=1&page_size=%d",
		h.base, url.PathEscape(ns), url.PathEscape(rp), h.c.pageSize)
	p, err := h.c.newPager(repo.String(), first)
	if err != nil {
		return nil, err
	}
	var out []resolve.TagRecord
	for cur, next := "", first; next != ""; {
		u, err := p.page(cur, next)
		if err != nil {
			return nil, err
		}
		var page hubPage
		if err := h.get(ctx, p, u, cred, &page); err != nil {
			return nil, err
		}
		for _, t := range page.Results {
			if err := p.tag(u, t.Name); err != nil {
				return nil, err
			}
			rec, err := h.record(u, t)
			if err != nil {
				return nil, err
			}
			out = append(out, rec)
		}
		cur, next = u, ""
		if page.Next != nil {
			next = *page.Next
		}
	}
	return out, nil
}

// get reads one page, authenticated when cred is set: a 401 with a cached
// token drops it and reads the page once more with a fresh one.
func (h *DockerHub) get(ctx context.Context, p *pager, u string, cred *authn.AuthConfig, v any) error {
	if cred == nil {
		_, err := p.get(ctx, u, nil, v)
		return err
	}
	for attempt := 0; ; attempt++ {
		tok, fresh, err := h.token(ctx, cred)
		if err != nil {
			return err
		}
		_, err = p.get(ctx, u, http.Header{"Authorization": {"Bearer " + tok}}, v)
		var ae *APIError
		if attempt == 0 && !fresh && errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			h.forget(cred, tok)
			continue
		}
		return err
	}
}

// token returns a valid access token for cred, and whether it was just issued.
func (h *DockerHub) token(ctx context.Context, cred *authn.AuthConfig) (string, bool, error) {
	key := credentialKey(cred)
	h.mu.Lock()
	t, ok := h.tokens[key]
	h.mu.Unlock()
	if ok && time.Now().Before(t.expires) {
		return t.value, false, nil
	}
	t, err := h.login(ctx, cred)
	if err != nil {
		return "", false, err
	}
	h.mu.Lock()
	h.tokens[key] = t
	h.mu.Unlock()
	return t.value, true, nil
}

// forget drops cred's token if it is still tok.
func (h *DockerHub) forget(cred *authn.AuthConfig, tok string) {
	key := credentialKey(cred)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tokens[key].value == tok {
		delete(h.tokens, key)
	}
}

// login exchanges cred for an access token (POST /v2/auth/token). A
// credential carrying a registry token only (no user name and secret) cannot
// be exchanged: it is an error.
func (h *DockerHub) login(ctx context.Context, cred *authn.AuthConfig) (hubToken, error) {
	secret := cred.Password
	if secret == "" {
		secret = cred.IdentityToken
	}
	if cred.Username == "" || secret == "" {
		return hubToken{}, fmt.Errorf("%s API: the credential has no user name and password or access token to log in with", h.Name())
	}
	var out struct {
		AccessToken string `json:"access_token"`
	}
	in := map[string]string{"identifier": cred.Username, "secret": secret}
	if _, err := h.c.postJSON(ctx, h.base+"/v2/auth/token", nil, in, &out); err != nil {
		return hubToken{}, fmt.Errorf("%s API: login as %s: %w", h.Name(), cred.Username, err)
	}
	if out.AccessToken == "" {
		return hubToken{}, fmt.Errorf("%s API: login as %s: no access_token in the answer", h.Name(), cred.Username)
	}
	resolve.DefaultRedactor.Add(out.AccessToken)
	return hubToken{value: out.AccessToken, expires: jwtExpiry(out.AccessToken, hubTokenLifetime)}, nil
}

// credentialKey identifies a credential without keeping its secret.
func credentialKey(c *authn.AuthConfig) string {
	sum := sha256.Sum256([]byte(c.Username + "\x00" + c.Password + "\x00" + c.IdentityToken + "\x00" + c.RegistryToken))
	return hex.EncodeToString(sum[:])
}

// jwtExpiry is when a JWT expires, less a margin: its exp claim, else
// now+lifetime.
func jwtExpiry(tok string, lifetime time.Duration) time.Time {
	const margin = 30 * time.Second
	now := time.Now()
	parts := strings.Split(tok, ".")
	if len(parts) == 3 {
		if raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "=")); err == nil {
			var claims struct {
				Exp json.Number `json:"exp"`
			}
			if json.Unmarshal(raw, &claims) == nil {
				if exp, err := strconv.ParseInt(claims.Exp.String(), 10, 64); err == nil {
					return time.Unix(exp, 0).Add(-margin)
				}
			}
		}
	}
	return now.Add(lifetime - margin)
}

type hubPage struct {
	Next    *string  `json:"next"`
	Results []hubTag `json:"results"`
}

type hubTag struct {
	Name          string     `json:"name"`
	Digest        string     `json:"digest"`
	MediaType     string     `json:"media_type"`
	LastUpdated   *string    `json:"last_updated"`
	TagLastPushed *string    `json:"tag_last_pushed"`
	Images        []hubImage `json:"images"`
}

type hubImage struct {
	Architecture string  `json:"architecture"`
	OS           string  `json:"os"`
	Variant      *string `json:"variant"`
	Digest       *string `json:"digest"`
}

// record is what one tag of a page (at u) says.
func (h *DockerHub) record(u string, t hubTag) (resolve.TagRecord, error) {
	if err := h.c.checkTag(u, t.Name); err != nil {
		return resolve.TagRecord{}, err
	}
	rec := resolve.TagRecord{Tag: t.Name, MediaType: types.MediaType(t.MediaType)}
	var err error
	if rec.Digest, err = h.c.digestOf(u, t.Digest); err != nil {
		return resolve.TagRecord{}, err
	}
	pushed := deref(t.TagLastPushed)
	if pushed == "" {
		pushed = deref(t.LastUpdated)
	}
	if rec.Pushed, err = h.c.parseTime(u, pushed); err != nil {
		return resolve.TagRecord{}, err
	}
	entries := make([]platformEntry, 0, len(t.Images))
	for _, img := range t.Images {
		entries = append(entries, platformEntry{Digest: deref(img.Digest),
			Platform: v1.Platform{OS: img.OS, Architecture: img.Architecture, Variant: deref(img.Variant)}})
	}
	rec.Platforms, rec.PlatformManifests, err = h.c.runnable(u, entries)
	return rec, err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
