package registrytest_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

type hubTestPage struct {
	Count    int     `json:"count"`
	Next     *string `json:"next"`
	Previous *string `json:"previous"`
	Results  []struct {
		Name          string `json:"name"`
		Digest        string `json:"digest"`
		MediaType     string `json:"media_type"`
		TagLastPushed string `json:"tag_last_pushed"`
		Images        []struct {
			Architecture, OS, Digest string
			Variant                  *string
		} `json:"images"`
	} `json:"results"`
}

// TestDockerHubAPI_Pages: page sizes (asked, default, capped), next and
// previous links, a page past the last, an unknown repository.
func TestDockerHubAPI_Pages(t *testing.T) {
	s := registrytest.New(t)
	metaSeed(t, s, "team/web", 25)
	a := s.DockerHubAPI(t, registrytest.WithAPIMaxPageSize(20))
	base := a.URL + "/v2/namespaces/team/repositories/web/tags"
	for _, c := range []struct {
		query          string
		status, n      int
		next, previous bool
	}{
		{query: "", status: 200, n: 10, next: true},
		{query: "?page_size=8&page=2", status: 200, n: 8, next: true, previous: true},
		{query: "?page_size=100", status: 200, n: 20, next: true},
		{query: "?page_size=20&page=2", status: 200, n: 5, previous: true},
		{query: "?page_size=20&page=3", status: 404},
	} {
		var p hubTestPage
		resp := metaGet(t, http.MethodGet, base+c.query, "", "", &p)
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.query, resp.StatusCode, c.status)
			continue
		}
		if c.status != 200 {
			continue
		}
		if len(p.Results) != c.n || p.Count != 25 || (p.Next != nil) != c.next || (p.Previous != nil) != c.previous {
			t.Errorf("%s: %d results of %d, next %v, previous %v", c.query, len(p.Results), p.Count, p.Next, p.Previous)
		}
		if p.Next != nil && !strings.HasPrefix(*p.Next, a.URL+"/v2/namespaces/team/repositories/web/tags?") {
			t.Errorf("%s: next %s", c.query, *p.Next)
		}
	}
	if resp := metaGet(t, http.MethodGet, a.URL+"/v2/namespaces/team/repositories/nope/tags", "", "", nil); resp.StatusCode != 404 {
		t.Errorf("unknown repository: status %d", resp.StatusCode)
	}
}

// TestDockerHubAPI_Content: newest update first, digests and images as the
// registry holds them (attestations as architecture unknown).
func TestDockerHubAPI_Content(t *testing.T) {
	s := registrytest.New(t)
	s.PushIndex(t, "team/web", "multi", registrytest.Index(t0, []string{"linux/amd64", "linux/arm/v7"}, registrytest.WithAttestation()))
	s.Push(t, "team/web", "single", registrytest.Image(t0, "linux/arm64"))
	s.SetPushed("team/web", "multi", t0.Add(2*time.Hour))
	s.SetPushed("team/web", "single", t0.Add(time.Hour))
	a := s.DockerHubAPI(t)
	var p hubTestPage
	metaGet(t, http.MethodGet, a.URL+"/v2/namespaces/team/repositories/web/tags", "", "", &p)
	if len(p.Results) != 2 || p.Results[0].Name != "multi" || p.Results[1].Name != "single" {
		t.Fatalf("results %+v", p.Results)
	}
	multi := p.Results[0]
	if multi.Digest != s.Digest(t, "team/web", "multi") || multi.MediaType != "application/vnd.oci.image.index.v1+json" ||
		multi.TagLastPushed != "2026-01-01T02:00:00.000000Z" {
		t.Errorf("multi: %+v", multi)
	}
	var archs []string
	for _, img := range multi.Images {
		v := ""
		if img.Variant != nil {
			v = "/" + *img.Variant
		}
		archs = append(archs, img.OS+"/"+img.Architecture+v)
	}
	if got := strings.Join(archs, ","); got != "linux/amd64,linux/arm/v7,unknown/unknown,unknown/unknown" {
		t.Errorf("images %s", got)
	}
	var byName hubTestPage
	metaGet(t, http.MethodGet, a.URL+"/v2/namespaces/team/repositories/web/tags?ordering=-name", "", "", &byName)
	if byName.Results[0].Name != "single" {
		t.Errorf("ordering=-name: %s first", byName.Results[0].Name)
	}
}

// TestDockerHubAPI_Auth: both login endpoints issue a token for the
// configured credentials only; pages need it.
func TestDockerHubAPI_Auth(t *testing.T) {
	s := registrytest.New(t)
	metaSeed(t, s, "team/web", 1)
	a := s.DockerHubAPI(t, registrytest.WithAPIAuth("ci", "pw-1234"))
	var tok struct {
		AccessToken string `json:"access_token"`
		Token       string `json:"token"`
	}
	for _, c := range []struct{ path, body string }{
		{"/v2/auth/token", `{"identifier":"ci","secret":"pw-1234"}`},
		{"/v2/users/login", `{"username":"ci","password":"pw-1234"}`},
	} {
		if resp := metaGet(t, http.MethodPost, a.URL+c.path, "", c.body, &tok); resp.StatusCode != 200 {
			t.Errorf("%s: status %d", c.path, resp.StatusCode)
		}
		bad := strings.Replace(c.body, "pw-1234", "nope", 1)
		if resp := metaGet(t, http.MethodPost, a.URL+c.path, "", bad, nil); resp.StatusCode != 401 {
			t.Errorf("%s with a wrong password: status %d", c.path, resp.StatusCode)
		}
	}
	if tok.AccessToken == "" || tok.Token == "" {
		t.Fatalf("tokens %+v", tok)
	}
	u := a.URL + "/v2/namespaces/team/repositories/web/tags"
	for _, c := range []struct {
		auth   string
		status int
	}{{"", 401}, {"Bearer nope", 401}, {"Bearer " + tok.AccessToken, 200}, {"Bearer " + tok.Token, 200}} {
		if resp := metaGet(t, http.MethodGet, u, c.auth, "", nil); resp.StatusCode != c.status {
			t.Errorf("%q: status %d, want %d", c.auth, resp.StatusCode, c.status)
		}
	}
	a.RevokeTokens()
	if resp := metaGet(t, http.MethodGet, u, "Bearer "+tok.AccessToken, "", nil); resp.StatusCode != 401 {
		t.Errorf("revoked token: status %d", resp.StatusCode)
	}
	if got := a.Counts(); fmt.Sprint(got) != "map[login:4 page:5]" {
		t.Errorf("counts %v", got)
	}
}
