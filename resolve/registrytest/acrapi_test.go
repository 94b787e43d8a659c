package registrytest_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

const acrUser = "00000000-0000-0000-0000-000000000000"

// acrToken asks the token endpoint for scope with method and credentials,
// returning the status and the access token.
func acrToken(t *testing.T, a *registrytest.APIServer, method, service, scope, basic, refresh string) (int, string) {
	t.Helper()
	form := url.Values{"service": {service}, "scope": {scope}}
	u, body := a.URL+"/oauth2/token", ""
	if method == http.MethodPost {
		form.Set("grant_type", "refresh_token")
		form.Set("refresh_token", refresh)
		body = form.Encode()
	} else {
		u += "?" + form.Encode()
	}
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if basic != "" {
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(basic)))
	}
	var out struct {
		AccessToken string `json:"access_token"`
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, out.AccessToken
}

// TestACRAPI_Token: a refresh token (POST) or a user and password (GET,
// Basic) get an access token for the registry's service and a repository
// scope; the token opens that repository's pages only; without one a page is
// 401 with ACR's challenge.
func TestACRAPI_Token(t *testing.T) {
	s := registrytest.New(t)
	metaSeed(t, s, "team/web", 2)
	metaSeed(t, s, "team/api", 2)
	refresh := s.ACRAPI(t, registrytest.WithAPIAuth(acrUser, "refresh-token"))
	admin := s.ACRAPI(t, registrytest.WithAPIAuth("myregistry", "password"))
	scope := "repository:team/web:metadata_read"
	for _, c := range []struct {
		name                          string
		a                             *registrytest.APIServer
		method, service, scope, basic string
		refresh                       string
		status                        int
	}{
		{"refresh token", refresh, http.MethodPost, refresh.Host, scope, "", "refresh-token", 200},
		{"wrong refresh token", refresh, http.MethodPost, refresh.Host, scope, "", "other", 401},
		{"basic", admin, http.MethodGet, admin.Host, scope, "myregistry:password", "", 200},
		{"pull scope", admin, http.MethodGet, admin.Host, "repository:team/web:pull", "myregistry:password", "", 200},
		{"wrong password", admin, http.MethodGet, admin.Host, scope, "myregistry:other", "", 401},
		{"anonymous", admin, http.MethodGet, admin.Host, scope, "", "", 401},
		{"refresh token to a basic registry", admin, http.MethodPost, admin.Host, scope, "", "password", 401},
		{"other service", admin, http.MethodGet, "other.azurecr.io", scope, "myregistry:password", "", 400},
		{"push scope", admin, http.MethodGet, admin.Host, "repository:team/web:push", "myregistry:password", "", 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, tok := acrToken(t, c.a, c.method, c.service, c.scope, c.basic, c.refresh)
			if status != c.status {
				t.Fatalf("token: status %d, want %d", status, c.status)
			}
			if status != http.StatusOK {
				return
			}
			if resp := metaGet(t, http.MethodGet, c.a.URL+"/acr/v1/team/web/_manifests", "Bearer "+tok, "", nil); resp.StatusCode != 200 {
				t.Errorf("team/web with its token: status %d", resp.StatusCode)
			}
			resp := metaGet(t, http.MethodGet, c.a.URL+"/acr/v1/team/api/_manifests", "Bearer "+tok, "", nil)
			want := `Bearer realm="` + c.a.URL + `/oauth2/token",service="` + c.a.Host + `",scope="repository:team/api:metadata_read"`
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != want {
				t.Errorf("team/api with team/web's token: status %d, challenge %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			}
		})
	}
	if got := refresh.Counts(); got[registrytest.APILogin] != 2 {
		t.Errorf("counts %v", got)
	}
}

type acrTestManifests struct {
	Manifests []struct {
		Digest         string   `json:"digest"`
		Tags           []string `json:"tags"`
		LastUpdateTime string   `json:"lastUpdateTime"`
		Architecture   string   `json:"architecture"`
		OS             string   `json:"os"`
		References     []struct {
			Digest, Architecture, OS, Variant string
		} `json:"references"`
	} `json:"manifests"`
}

// TestACRAPI_Pages: _manifests newest update first, n a page, the next page
// in a relative Link with last; children of an index listed untagged, its
// references without variants; _tags alike.
func TestACRAPI_Pages(t *testing.T) {
	s := registrytest.New(t)
	metaSeed(t, s, "team/web", 4)
	sc := &registrytest.Scenario{Repositories: map[string]*registrytest.Repository{"team/web": {Tags: []registrytest.TagSpec{
		{Tag: "multi", Created: "2026-01-01T00:00:00Z", Platforms: []string{"linux/amd64", "linux/arm/v7"}},
	}}}}
	if err := s.SeedScenario(sc); err != nil {
		t.Fatal(err)
	}
	for i, tag := range []string{"1.0.0", "1.0.1", "1.0.2", "1.0.3", "multi"} {
		s.SetPushed("team/web", tag, time.Date(2026, 2, 1, i, 0, 0, 0, time.UTC))
	}
	a := s.ACRAPI(t)
	var tags []string
	var untagged, pages int
	for next := "/acr/v1/team/web/_manifests?n=2&orderby=timedesc"; next != ""; pages++ {
		var page acrTestManifests
		resp := metaGet(t, http.MethodGet, a.URL+next, "", "", &page)
		next = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(resp.Header.Get("Link"), `; rel="next"`), "<"), ">")
		for _, m := range page.Manifests {
			if len(m.Tags) == 0 {
				untagged++
				continue
			}
			tags = append(tags, m.Tags...)
			if m.Tags[0] == "multi" && (len(m.References) != 2 || m.References[1].Architecture != "arm" || m.References[1].Variant != "") {
				t.Errorf("multi: references %+v", m.References)
			}
			if m.Tags[0] != "multi" && (m.OS != "linux" || m.Architecture != "amd64") {
				t.Errorf("%s: platform %s/%s", m.Tags[0], m.OS, m.Architecture)
			}
		}
	}
	// The two untagged children were pushed with multi, the newest.
	if want := []string{"multi", "1.0.3", "1.0.2", "1.0.1", "1.0.0"}; !slices.Equal(tags, want) || untagged != 2 || pages != 4 {
		t.Errorf("tags %v, %d untagged, %d pages; want %v, 2, 4", tags, untagged, pages, want)
	}
	var tl struct {
		Tags []struct {
			Name string `json:"name"`
		} `json:"tags"`
	}
	resp := metaGet(t, http.MethodGet, a.URL+"/acr/v1/team/web/_tags?orderby=timeasc&n=2&last=1.0.1", "", "", &tl)
	if len(tl.Tags) != 2 || tl.Tags[0].Name != "1.0.2" || tl.Tags[1].Name != "1.0.3" || resp.Header.Get("Link") == "" {
		t.Errorf("_tags after 1.0.1: %+v, Link %q", tl.Tags, resp.Header.Get("Link"))
	}
	if resp := metaGet(t, http.MethodGet, a.URL+"/acr/v1/team/web/_manifests?orderby=size", "", "", nil); resp.StatusCode != 400 {
		t.Errorf("orderby=size: status %d", resp.StatusCode)
	}
}

// TestACRAPI_Faults: NextURL and NextLoop replace the Link target.
func TestACRAPI_Faults(t *testing.T) {
	s := registrytest.New(t)
	metaSeed(t, s, "team/web", 3)
	a := s.ACRAPI(t)
	a.Inject(registrytest.APIFault{Kind: registrytest.APIPage, NextURL: "https://evil.example/x", Times: 1})
	a.Inject(registrytest.APIFault{Kind: registrytest.APIPage, NextLoop: true, Times: 1})
	u := "/acr/v1/team/web/_manifests?n=1"
	if l := metaGet(t, http.MethodGet, a.URL+u, "", "", nil).Header.Get("Link"); l != `<https://evil.example/x>; rel="next"` {
		t.Errorf("NextURL: Link %q", l)
	}
	if l := metaGet(t, http.MethodGet, a.URL+u, "", "", nil).Header.Get("Link"); l != `<`+u+`>; rel="next"` {
		t.Errorf("NextLoop: Link %q", l)
	}
}
