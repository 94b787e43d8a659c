package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Azure Container Registry's metadata API (azure-rest-api-specs,
// specification/containerregistry/data-plane/Azure.ContainerRegistry/stable/2021-07-01,
// operation ContainerRegistry_GetManifests):
//
//	GET https://{registry}/acr/v1/{repository}/_manifests?n=1000&orderby=timedesc
//
// answers {"registry", "imageName", "manifests": [ManifestAttributesBase]}, the
// next page in a Link header (rel="next", relative to the registry). Every
// manifest of the repository is listed, untagged ones (an index's children)
// included: digest, imageSize, createdTime, lastUpdateTime, architecture, os
// (of an image's config), mediaType, configMediaType, tags[] and, for an index,
// references[] (per child its digest, architecture and os). orderby timedesc is
// newest lastUpdateTime first. One record per tag; Pushed is lastUpdateTime.
//
// Platforms: an index's references, an image's own architecture and os
// (attestations, unknown/unknown, left out). ACR does not give a platform's
// variant: a tag with an arm platform (whose variants v6 and v7 differ), or
// with two children of the same os and architecture (told apart by their
// variants only), gets no Platforms (read through the OCI protocol); amd64 and
// arm64 are taken to have their default variant. Created stays zero: ACR gives
// no build time (createdTime is the manifest's upload).
//
// Authentication, as ACR's 401 challenge on the API names it (Bearer
// realm="https://{registry}/oauth2/token", service="{registry}",
// scope="repository:{repository}:metadata_read"): the keychain's credential is
// exchanged at the realm for an access token of that scope, sent as a Bearer
// token and cached until it expires (its exp claim, else 5 minutes) or a page
// answers 401. An ACR refresh token (user 00000000-0000-0000-0000-000000000000,
// or an identity token) is exchanged with POST grant_type=refresh_token; a user
// name and password (the admin user, a repository-scoped token) with GET and
// Basic authentication; no credential with an anonymous GET (anonymous pull); a
// registry token is sent as it is.

// acrMaxPageSize is the page size asked of ACR (the n of its listings).
const acrMaxPageSize = 1000

// acrRefreshUser is the user name ACR expects with a refresh token.
const acrRefreshUser = "00000000-0000-0000-0000-000000000000"

// acrTokenLifetime is an access token's lifetime when its exp is not readable.
const acrTokenLifetime = 5 * time.Minute

// ACR reads Azure Container Registry's manifests API. It is safe for
// concurrent use.
type ACR struct {
	c        apiClient
	base     string // https://{registry}, or Options.BaseURL
	registry string // the service of the token exchange

	mu     sync.Mutex
	tokens map[string]acrToken // by scope and credential
}

type acrToken struct {
	value   string
	expires time.Time
}

// NewACR returns an ACR client; o.BaseURL "" is https://<o.Registry>, and
// o.Registry (the login server, x.azurecr.io) is the token exchange's service.
func NewACR(o Options) (*ACR, error) {
	def := ""
	if o.Registry != "" {
		def = "https://" + o.Registry
	}
	base, err := baseURL(resolve.MetadataACR, o.BaseURL, def)
	if err != nil {
		return nil, err
	}
	registry := o.Registry
	if registry == "" {
		registry = strings.TrimPrefix(strings.TrimPrefix(base, "https://"), "http://")
	}
	return &ACR{c: newAPIClient(resolve.MetadataACR, o, acrMaxPageSize), base: base, registry: registry,
		tokens: map[string]acrToken{}}, nil
}

// Name is resolve.MetadataACR.
func (a *ACR) Name() string { return resolve.MetadataACR }

// ListTagRecords lists every tag of repo.
func (a *ACR) ListTagRecords(ctx context.Context, repo name.Repository) ([]resolve.TagRecord, error) {
	cred, err := a.c.credential(ctx, repo)
	if err != nil {
		return nil, err
	}
	path := repo.RepositoryStr()
	first := fmt.Sprintf("%s/acr/v1/%s/_manifests?n=%d&orderby=timedesc", a.base, path, a.c.pageSize)
	p, err := a.c.newPager(repo.String(), first)
	if err != nil {
		return nil, err
	}
	auth := acrAuth{a: a, cred: cred, scope: "repository:" + path + ":metadata_read"}
	var out []resolve.TagRecord
	for cur, next := "", first; next != ""; {
		u, err := p.page(cur, next)
		if err != nil {
			return nil, err
		}
		var page acrPage
		h, err := auth.get(ctx, p, u, &page)
		if err != nil {
			return nil, err
		}
		for _, m := range page.Manifests {
			recs, err := a.records(p, u, m)
			if err != nil {
				return nil, err
			}
			out = append(out, recs...)
		}
		cur, next = u, nextLink(h)
	}
	return out, nil
}

type acrPage struct {
	Manifests []acrManifest `json:"manifests"`
}

type acrManifest struct {
	Digest         string         `json:"digest"`
	LastUpdateTime string         `json:"lastUpdateTime"`
	Architecture   string         `json:"architecture"`
	OS             string         `json:"os"`
	MediaType      string         `json:"mediaType"`
	Tags           []string       `json:"tags"`
	References     []acrReference `json:"references"`
}

type acrReference struct {
	Digest       string `json:"digest"`
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// records are the records of one manifest of the page u, one per tag.
func (a *ACR) records(p *pager, u string, m acrManifest) ([]resolve.TagRecord, error) {
	if len(m.Tags) == 0 {
		return nil, nil
	}
	base := resolve.TagRecord{MediaType: types.MediaType(m.MediaType)}
	var err error
	if base.Digest, err = a.c.digestOf(u, m.Digest); err != nil {
		return nil, err
	}
	if base.Pushed, err = a.c.parseTime(u, m.LastUpdateTime); err != nil {
		return nil, err
	}
	entries := []platformEntry{{Digest: m.Digest, Platform: v1.Platform{OS: m.OS, Architecture: m.Architecture}}}
	if base.MediaType.IsIndex() || len(m.References) > 0 {
		entries = entries[:0]
		for _, r := range m.References {
			entries = append(entries, platformEntry{Digest: r.Digest, Platform: v1.Platform{OS: r.OS, Architecture: r.Architecture}})
		}
	}
	if acrPlatformsExact(entries) {
		if base.Platforms, base.PlatformManifests, err = a.c.runnable(u, entries); err != nil {
			return nil, err
		}
	}
	out := make([]resolve.TagRecord, 0, len(m.Tags))
	for _, tag := range m.Tags {
		if err := a.c.checkTag(u, tag); err != nil {
			return nil, err
		}
		if err := p.tag(u, tag); err != nil {
			return nil, err
		}
		rec := base
		rec.Tag = tag
		rec.Platforms = cloneSlice(base.Platforms)
		rec.PlatformManifests = cloneSlice(base.PlatformManifests)
		out = append(out, rec)
	}
	return out, nil
}

// acrPlatformsExact reports whether platforms without variants name a tag's
// runnable platforms exactly: no arm platform (whose variants differ) and no
// two of the same os and architecture.
func acrPlatformsExact(entries []platformEntry) bool {
	seen := map[resolve.Platform]bool{}
	for _, e := range entries {
		p := resolve.PlatformOf(&e.Platform)
		if p.OS == "" || p.Arch == "" || p.IsUnknown() {
			continue
		}
		if p.Arch == "arm" || seen[p] {
			return false
		}
		seen[p] = true
	}
	return true
}

// ---- authentication ----

// acrAuth authenticates the pages of one listing.
type acrAuth struct {
	a     *ACR
	cred  *authn.AuthConfig
	scope string
}

// get reads the page u with an access token of the scope: a 401 with a cached
// token drops it and reads the page once more with a fresh one.
func (s acrAuth) get(ctx context.Context, p *pager, u string, v any) (http.Header, error) {
	for attempt := 0; ; attempt++ {
		tok, fresh, err := s.a.token(ctx, s.cred, s.scope)
		if err != nil {
			return nil, err
		}
		h, err := p.get(ctx, u, http.Header{"Authorization": {"Bearer " + tok}}, v)
		var ae *APIError
		if attempt == 0 && !fresh && errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			s.a.forget(s.cred, s.scope, tok)
			continue
		}
		return h, err
	}
}

// tokenKey identifies a cached token: its scope and the credential exchanged.
func tokenKey(cred *authn.AuthConfig, scope string) string {
	if cred == nil {
		return scope + "\x00anonymous"
	}
	return scope + "\x00" + credentialKey(cred)
}

// token returns a valid access token of scope for cred, and whether it was
// just issued.
func (a *ACR) token(ctx context.Context, cred *authn.AuthConfig, scope string) (string, bool, error) {
	if cred != nil && cred.RegistryToken != "" {
		return cred.RegistryToken, true, nil
	}
	key := tokenKey(cred, scope)
	a.mu.Lock()
	t, ok := a.tokens[key]
	a.mu.Unlock()
	if ok && time.Now().Before(t.expires) {
		return t.value, false, nil
	}
	t, err := a.exchange(ctx, cred, scope)
	if err != nil {
		return "", false, err
	}
	a.mu.Lock()
	a.tokens[key] = t
	a.mu.Unlock()
	return t.value, true, nil
}

// forget drops the cached token of scope for cred if it is still tok.
func (a *ACR) forget(cred *authn.AuthConfig, scope, tok string) {
	key := tokenKey(cred, scope)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tokens[key].value == tok {
		delete(a.tokens, key)
	}
}

// exchange obtains an access token of scope at {base}/oauth2/token.
func (a *ACR) exchange(ctx context.Context, cred *authn.AuthConfig, scope string) (acrToken, error) {
	realm := a.base + "/oauth2/token"
	form := url.Values{"service": {a.registry}, "scope": {scope}}
	var req *http.Request
	var err error
	if refresh := acrRefreshToken(cred); refresh != "" {
		form.Set("grant_type", "refresh_token")
		form.Set("refresh_token", refresh)
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, realm, strings.NewReader(form.Encode()))
		if err == nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	} else {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, realm+"?"+form.Encode(), nil)
		if err == nil && cred != nil && cred.Username != "" {
			req.SetBasicAuth(cred.Username, cred.Password)
		}
	}
	if err != nil {
		return acrToken{}, &APIError{API: a.Name(), Method: http.MethodPost, URL: RedactURL(realm), Err: err}
	}
	tok, err := a.tokenRequest(req)
	if err != nil {
		return acrToken{}, fmt.Errorf("%s API: token exchange for scope %s: %w", a.Name(), scope, err)
	}
	resolve.DefaultRedactor.Add(tok)
	return acrToken{value: tok, expires: jwtExpiry(tok, acrTokenLifetime)}, nil
}

// acrRefreshToken is cred's ACR refresh token, "" when it has none.
func acrRefreshToken(cred *authn.AuthConfig) string {
	switch {
	case cred == nil:
		return ""
	case cred.IdentityToken != "":
		return cred.IdentityToken
	case cred.Username == acrRefreshUser:
		return cred.Password
	}
	return ""
}

// tokenRequest sends a token request and reads its access_token (or token).
func (a *ACR) tokenRequest(req *http.Request) (string, error) {
	req.Header.Set("Accept", "application/json")
	u := RedactURL(req.URL.String())
	resp, err := a.c.hc.Do(req)
	if err != nil {
		return "", &APIError{API: a.Name(), Method: req.Method, URL: u, Err: unwrapURLError(err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", &APIError{API: a.Name(), Method: req.Method, URL: u, Status: resp.StatusCode,
			Body: excerpt(resp.Body), RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, a.c.maxPageBytes+1))
	if err == nil && int64(len(raw)) > a.c.maxPageBytes {
		err = fmt.Errorf("the answer is over %d bytes", a.c.maxPageBytes)
	}
	var out struct {
		AccessToken string `json:"access_token"`
		Token       string `json:"token"`
	}
	if err == nil {
		err = json.Unmarshal(raw, &out)
	}
	if err == nil && out.AccessToken == "" && out.Token == "" {
		err = errors.New("no access_token in the answer")
	}
	if err != nil {
		// The answer is not shown: a token server's answer may hold a token.
		return "", &APIError{API: a.Name(), Method: req.Method, URL: u, Status: resp.StatusCode,
			Err: fmt.Errorf("malformed answer: %w", err)}
	}
	if out.AccessToken != "" {
		return out.AccessToken, nil
	}
	return out.Token, nil
}
