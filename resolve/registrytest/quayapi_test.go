package registrytest_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

type quayTestPage struct {
	Tags []struct {
		Name           string `json:"name"`
		StartTS        int64  `json:"start_ts"`
		ManifestDigest string `json:"manifest_digest"`
		IsManifestList bool   `json:"is_manifest_list"`
		LastModified   string `json:"last_modified"`
	} `json:"tags"`
	Page          int  `json:"page"`
	HasAdditional bool `json:"has_additional"`
}

// TestQuayAPI_Pages: limit (default 50, at most 100), page, has_additional,
// newest start_ts first.
func TestQuayAPI_Pages(t *testing.T) {
	s := registrytest.New(t)
	metaSeed(t, s, "team/web", 120)
	s.SetPushed("team/web", "1.0.7", time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
	a := s.QuayAPI(t)
	base := a.URL + "/api/v1/repository/team/web/tag/"
	for _, c := range []struct {
		query string
		n     int
		more  bool
		page  int
	}{
		{"", 50, true, 1},
		{"?limit=500", 100, true, 1},
		{"?limit=100&page=2", 20, false, 2},
		{"?limit=100&page=3", 0, false, 3},
	} {
		var p quayTestPage
		if resp := metaGet(t, http.MethodGet, base+c.query, "", "", &p); resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", c.query, resp.StatusCode)
		}
		if len(p.Tags) != c.n || p.HasAdditional != c.more || p.Page != c.page {
			t.Errorf("%s: %d tags, has_additional %v, page %d", c.query, len(p.Tags), p.HasAdditional, p.Page)
		}
		if c.page == 1 && (p.Tags[0].Name != "1.0.7" || p.Tags[0].LastModified != time.Unix(p.Tags[0].StartTS, 0).UTC().Format("Mon, 02 Jan 2006 15:04:05 -0000")) {
			t.Errorf("%s: first %+v", c.query, p.Tags[0])
		}
	}
	if resp := metaGet(t, http.MethodGet, a.URL+"/api/v1/repository/team/nope/tag/", "", "", nil); resp.StatusCode != 404 {
		t.Errorf("unknown repository: status %d", resp.StatusCode)
	}
}

// TestQuayAPI_AuthAndLoop: Bearer token; NextLoop serves the first page again.
func TestQuayAPI_AuthAndLoop(t *testing.T) {
	s := registrytest.New(t)
	metaSeed(t, s, "team/web", 3)
	a := s.QuayAPI(t, registrytest.WithAPIAuth("$oauthtoken", "tok-1234"))
	u := a.URL + "/api/v1/repository/team/web/tag/?limit=2&page=2"
	for _, c := range []struct {
		auth   string
		status int
	}{{"", 401}, {"Bearer nope", 401}, {"Bearer tok-1234", 200}} {
		if resp := metaGet(t, http.MethodGet, u, c.auth, "", nil); resp.StatusCode != c.status {
			t.Errorf("%q: status %d, want %d", c.auth, resp.StatusCode, c.status)
		}
	}
	a.Inject(registrytest.APIFault{Kind: registrytest.APIPage, NextLoop: true})
	var p quayTestPage
	metaGet(t, http.MethodGet, u, "Bearer tok-1234", "", &p)
	if !p.HasAdditional || p.Page != 2 || len(p.Tags) != 2 {
		t.Errorf("loop: %+v", p)
	}
}
