package registrytest

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Azure Container Registry's metadata API (azure-rest-api-specs,
// specification/containerregistry/data-plane/Azure.ContainerRegistry/stable/2021-07-01)
// as the resolver reads it, on the registry's own host:
//
//   - POST /oauth2/token (form grant_type=refresh_token, service, scope,
//     refresh_token) and GET /oauth2/token?service=&scope= (Basic user and
//     password, or anonymous), counted as APILogin, answer {"access_token"};
//   - GET /acr/v1/{repository}/_manifests?n=&orderby=&last=, counted as APIPage:
//     {"registry", "imageName", "manifests": [...]}, every manifest of the
//     repository (an index's children untagged among them): digest, imageSize,
//     createdTime and lastUpdateTime (the first and the last push of its tags,
//     RFC 3339 with 7 fractional digits), mediaType, tags (absent when none),
//     changeableAttributes; an image's architecture, os (without its variant, as
//     ACR) and configMediaType; an index's references (digest, architecture,
//     os of each child). orderby timedesc (timeasc) sorts by lastUpdateTime,
//     else by digest; n is at most 1000 (default 100); more pages are in a Link
//     header, </acr/v1/{repository}/_manifests?last=<digest>&n=N&orderby=O>;
//     rel="next";
//   - GET /acr/v1/{repository}/_tags, counted as APIPage: {"registry",
//     "imageName", "tags": [{name, digest, createdTime, lastUpdateTime, signed,
//     changeableAttributes}]}, paginated alike (last=<tag>).
//
// An unknown repository is 404 NAME_UNKNOWN; errors are {"errors": [{"code",
// "message", "detail"}]}. With WithAPIAuth(user, secret) the pages need a
// Bearer access token issued for their repository's scope
// (repository:{repository}:metadata_read or pull); without one the answer is
// 401 with WWW-Authenticate: Bearer realm="<URL>/oauth2/token",
// service="<Host>", scope="repository:{repository}:metadata_read". The token
// endpoint issues tokens for service Host only: to the refresh token secret
// (POST) when user is 00000000-0000-0000-0000-000000000000, to Basic
// user:secret (GET). Without WithAPIAuth no token is needed and the token
// endpoint issues one to anyone. APIFault.NextURL replaces the Link target,
// NextLoop makes it the page itself.

// acrRefreshUser is the user name ACR expects with a refresh token.
const acrRefreshUser = "00000000-0000-0000-0000-000000000000"

// acrState is what an ACR API server remembers: the scope of each token.
type acrState struct {
	mu     sync.Mutex
	scopes map[string]string // token -> repository
}

// ACRAPI starts ACR's API answering from s, closed when the test ends.
func (s *Server) ACRAPI(t testing.TB, opts ...APIOption) *APIServer {
	t.Helper()
	st := &acrState{scopes: map[string]string{}}
	opts = append([]APIOption{WithAPIMaxPageSize(1000)}, opts...)
	return newAPIServer(t, s, apiVendor{name: "acr", defaultLimit: 100, route: acrRoute, errorBody: acrError,
		serve: func(a *APIServer, w http.ResponseWriter, r *http.Request, repo string, f *APIFault) {
			if r.URL.Path == "/oauth2/token" {
				st.serveToken(a, w, r, repo)
				return
			}
			if a.cfg.auth && !st.authorized(a, r, repo) {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/oauth2/token",service="%s",scope="repository:%s:metadata_read"`,
					a.URL, a.Host, repo))
				a.Error(w, http.StatusUnauthorized, "authentication required, visit https://aka.ms/acr/authorization for more information.")
				return
			}
			serveACRList(a, w, r, repo, f)
		}}, opts)
}

// acrError is ACR's error JSON.
func acrError(status int, msg string) any {
	codes := map[int]string{400: "BAD_REQUEST", 401: "UNAUTHORIZED", 403: "DENIED", 404: "NAME_UNKNOWN",
		429: "TOOMANYREQUESTS", 500: "INTERNAL_SERVER_ERROR", 503: "UNAVAILABLE"}
	code, ok := codes[status]
	if !ok {
		code = "UNKNOWN"
	}
	return map[string]any{"errors": []map[string]any{{"code": code, "message": msg, "detail": map[string]any{}}}}
}

// acrRoute classifies an ACR API request; a token request's repository is its
// scope's.
func acrRoute(r *http.Request) (APIKind, string) {
	p := r.URL.Path
	if p == "/oauth2/token" && (r.Method == http.MethodGet || r.Method == http.MethodPost) {
		if err := r.ParseForm(); err != nil {
			return APILogin, ""
		}
		repo, _ := acrScope(r.Form.Get("scope"))
		return APILogin, repo
	}
	rest, ok := strings.CutPrefix(p, "/acr/v1/")
	if !ok || r.Method != http.MethodGet {
		return APIOther, ""
	}
	for _, suffix := range []string{"/_manifests", "/_tags"} {
		if repo, ok := strings.CutSuffix(rest, suffix); ok && repo != "" {
			return APIPage, repo
		}
	}
	return APIOther, ""
}

// acrScope reads repository:{repository}:{actions}; ok when the actions allow
// reading metadata.
func acrScope(scope string) (string, bool) {
	rest, ok := strings.CutPrefix(scope, "repository:")
	i := strings.LastIndex(rest, ":")
	if !ok || i <= 0 {
		return "", false
	}
	actions := strings.Split(rest[i+1:], ",")
	return rest[:i], slices.Contains(actions, "metadata_read") || slices.Contains(actions, "pull")
}

// authorized reports whether r carries a token issued for repo.
func (st *acrState) authorized(a *APIServer, r *http.Request, repo string) bool {
	if !a.bearerOK(r) {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.scopes[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")] == repo
}

// serveToken is the token endpoint.
func (st *acrState) serveToken(a *APIServer, w http.ResponseWriter, r *http.Request, repo string) {
	if r.Form.Get("service") != a.Host {
		a.Error(w, http.StatusBadRequest, "invalid service "+r.Form.Get("service"))
		return
	}
	if _, ok := acrScope(r.Form.Get("scope")); !ok {
		a.Error(w, http.StatusBadRequest, "invalid scope")
		return
	}
	ok := !a.cfg.auth
	switch {
	case r.Method == http.MethodPost:
		ok = ok || (r.PostForm.Get("grant_type") == "refresh_token" && a.cfg.user == acrRefreshUser &&
			r.PostForm.Get("refresh_token") == a.cfg.pass)
	default:
		ok = ok || a.basicOK(r)
	}
	if !ok {
		a.Error(w, http.StatusUnauthorized, "authentication required")
		return
	}
	tok := a.IssueToken()
	st.mu.Lock()
	st.scopes[tok] = repo
	st.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"access_token": tok})
}

// serveACRList answers _manifests and _tags.
func serveACRList(a *APIServer, w http.ResponseWriter, r *http.Request, repo string, f *APIFault) {
	tags, ok := a.describe(w, repo)
	if !ok {
		return
	}
	q := r.URL.Query()
	orderby, last, n := q.Get("orderby"), q.Get("last"), a.pageSize(r, "n")
	var items []acrItem
	var err error
	if strings.HasSuffix(r.URL.Path, "/_tags") {
		items = acrTags(tags)
	} else if items, err = acrManifests(a.Registry, repo, tags); err != nil {
		a.Error(w, http.StatusInternalServerError, err.Error())
		return
	}
	if err := sortACR(items, orderby); err != nil {
		a.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	start := 0
	if last != "" {
		start = slices.IndexFunc(items, func(it acrItem) bool { return it.key == last }) + 1
		if start == 0 {
			start = len(items)
		}
	}
	page := items[start:min(start+n, len(items))]
	if next := acrNext(r, f, page, start+len(page) < len(items)); next != "" {
		w.Header().Set("Link", fmt.Sprintf(`<%s>; rel="next"`, next))
	}
	body := map[string]any{"registry": a.Host, "imageName": repo}
	list := make([]any, len(page))
	for i, it := range page {
		list[i] = it.body
	}
	if strings.HasSuffix(r.URL.Path, "/_tags") {
		body["tags"] = list
	} else {
		body["manifests"] = list
	}
	writeJSON(w, http.StatusOK, body)
}

// acrNext is the Link target of the page after page ("" for none), or the
// fault's.
func acrNext(r *http.Request, f *APIFault, page []acrItem, more bool) string {
	switch {
	case f != nil && f.NextURL != "":
		return f.NextURL
	case f != nil && f.NextLoop:
		return r.URL.RequestURI()
	case !more:
		return ""
	}
	q := r.URL.Query()
	v := url.Values{"last": {page[len(page)-1].key}}
	for _, k := range []string{"n", "orderby"} {
		if q.Get(k) != "" {
			v.Set(k, q.Get(k))
		}
	}
	return r.URL.Path + "?" + v.Encode()
}

// acrItem is one manifest or tag of a listing: its key for last, its
// lastUpdateTime for orderby and its JSON.
type acrItem struct {
	key     string
	updated time.Time
	body    any
}

// sortACR orders a listing as orderby says: timedesc, timeasc, else by key.
func sortACR(items []acrItem, orderby string) error {
	var cmp func(x, y acrItem) int
	switch orderby {
	case "", "none":
		cmp = func(x, y acrItem) int { return 0 }
	case "timedesc":
		cmp = func(x, y acrItem) int { return y.updated.Compare(x.updated) }
	case "timeasc":
		cmp = func(x, y acrItem) int { return x.updated.Compare(y.updated) }
	default:
		return fmt.Errorf("invalid orderby %q", orderby)
	}
	slices.SortStableFunc(items, func(x, y acrItem) int {
		if c := cmp(x, y); c != 0 {
			return c
		}
		return strings.Compare(x.key, y.key)
	})
	return nil
}

// acrTime is ACR's time format: RFC 3339, UTC, 7 fractional digits.
func acrTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.0000000Z") }

// acrChangeable is every item's changeableAttributes.
var acrChangeable = map[string]bool{"deleteEnabled": true, "writeEnabled": true, "readEnabled": true, "listEnabled": true}

// acrTags lists the tags as _tags does.
func acrTags(tags []TagDescription) []acrItem {
	out := make([]acrItem, 0, len(tags))
	for _, td := range tags {
		out = append(out, acrItem{key: td.Tag, updated: td.Pushed, body: map[string]any{
			"name": td.Tag, "digest": td.Digest, "createdTime": acrTime(td.Pushed), "lastUpdateTime": acrTime(td.Pushed),
			"signed": false, "changeableAttributes": acrChangeable}})
	}
	return out
}

// acrManifests lists the manifests as _manifests does.
func acrManifests(s *Server, repo string, tags []TagDescription) ([]acrItem, error) {
	images := cloudImages(tags)
	out := make([]acrItem, 0, len(images))
	for _, ci := range images {
		m := map[string]any{"digest": ci.Digest, "imageSize": ci.Size, "createdTime": acrTime(ci.FirstPushed),
			"lastUpdateTime": acrTime(ci.LastPushed), "mediaType": ci.MediaType, "changeableAttributes": acrChangeable}
		if len(ci.Tags) > 0 {
			m["tags"] = ci.Tags
		}
		if ci.Index {
			refs := make([]map[string]string, 0, len(ci.Manifests))
			for _, c := range ci.Manifests {
				refs = append(refs, acrPlatform(map[string]string{"digest": c.Digest}, c.Platform))
			}
			m["references"] = refs
		} else {
			cmt, err := configMediaType(s, repo, ci.Digest)
			if err != nil {
				return nil, err
			}
			m["configMediaType"] = cmt
			for k, v := range acrPlatform(map[string]string{}, ci.Self.Platform) {
				m[k] = v
			}
		}
		out = append(out, acrItem{key: ci.Digest, updated: ci.LastPushed, body: m})
	}
	return out, nil
}

// acrPlatform adds a platform's architecture and os to m, without its variant
// (ACR records none).
func acrPlatform(m map[string]string, p *v1.Platform) map[string]string {
	if p != nil && p.OS != "" {
		m["architecture"], m["os"] = p.Architecture, p.OS
	}
	return m
}

// configMediaType is the media type of an image manifest's config.
func configMediaType(s *Server, repo, digest string) (string, error) {
	body, _, err := s.manifest(repo, digest)
	if err != nil {
		return "", err
	}
	m, err := v1.ParseManifest(strings.NewReader(string(body)))
	if err != nil {
		return "", fmt.Errorf("registrytest: manifest %s@%s: %w", repo, digest, err)
	}
	return string(m.Config.MediaType), nil
}
