package registrytest_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

type harborTestArtifact struct {
	Digest            string `json:"digest"`
	MediaType         string `json:"media_type"`
	ManifestMediaType string `json:"manifest_media_type"`
	PushTime          string `json:"push_time"`
	ExtraAttrs        *struct {
		OS, Architecture, Created string
	} `json:"extra_attrs"`
	References []struct {
		ChildDigest string `json:"child_digest"`
		Platform    struct{ OS, Architecture, Variant string }
	} `json:"references"`
	Tags []struct {
		Name     string `json:"name"`
		PushTime string `json:"push_time"`
	} `json:"tags"`
}

// TestHarborAPI_Route: a repository with a slash is encoded twice; once is
// not found.
func TestHarborAPI_Route(t *testing.T) {
	s := registrytest.New(t)
	metaSeed(t, s, "proj/team/web", 2)
	a := s.HarborAPI(t)
	for _, c := range []struct {
		path   string
		status int
	}{
		{"/api/v2.0/projects/proj/repositories/team%252Fweb/artifacts", 200},
		{"/api/v2.0/projects/proj/repositories/team%2Fweb/artifacts", 404},
		{"/api/v2.0/projects/proj/repositories/team/web/artifacts", 404},
		{"/api/v2.0/projects/proj/repositories/nope/artifacts", 404},
	} {
		if resp := metaGet(t, http.MethodGet, a.URL+c.path, "", "", nil); resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.path, resp.StatusCode, c.status)
		}
	}
	if got := a.Counts(); got[registrytest.APIPage] != 2 || got[registrytest.APIOther] != 2 {
		t.Errorf("counts %v", got)
	}
}

// TestHarborAPI_Pages: Link (prev, next) and X-Total-Count; sort.
func TestHarborAPI_Pages(t *testing.T) {
	s := registrytest.New(t)
	metaSeed(t, s, "team/web", 5)
	for i := range 5 {
		s.SetPushed("team/web", "1.0."+string(rune('0'+i)), time.Now().Add(time.Duration(i)*time.Hour))
	}
	a := s.HarborAPI(t)
	base := a.URL + "/api/v2.0/projects/team/repositories/web/artifacts"
	for _, c := range []struct {
		query, links, first string
		n                   int
	}{
		{"?page=1&page_size=2", `rel="next"`, "1.0.4", 2},
		{"?page=2&page_size=2", `rel="prev",rel="next"`, "1.0.2", 2},
		{"?page=3&page_size=2", `rel="prev"`, "1.0.0", 1},
		{"?page=1&page_size=2&sort=push_time", `rel="next"`, "1.0.0", 2},
	} {
		var arts []harborTestArtifact
		resp := metaGet(t, http.MethodGet, base+c.query, "", "", &arts)
		var rels []string
		for _, l := range strings.Split(resp.Header.Get("Link"), ",") {
			if _, rel, ok := strings.Cut(l, ";"); ok {
				rels = append(rels, strings.TrimSpace(rel))
			}
		}
		if len(arts) != c.n || arts[0].Tags[0].Name != c.first || strings.Join(rels, ",") != c.links ||
			resp.Header.Get("X-Total-Count") != "5" {
			t.Errorf("%s: %d artifacts, first %s, Link %q, total %s", c.query, len(arts), arts[0].Tags[0].Name,
				resp.Header.Get("Link"), resp.Header.Get("X-Total-Count"))
		}
		if l := resp.Header.Get("Link"); !strings.HasPrefix(l, "</api/v2.0/projects/team/repositories/web/artifacts?") {
			t.Errorf("%s: Link %s", c.query, l)
		}
	}
}

// TestHarborAPI_Content: one artifact per digest with its tags; an image's
// extra_attrs and media types, an index's references; Basic auth.
func TestHarborAPI_Content(t *testing.T) {
	s := registrytest.New(t)
	s.PushIndex(t, "team/web", "multi", registrytest.Index(t0, []string{"linux/amd64", "linux/arm/v7"}))
	s.Tag(t, "team/web", "alias", s.Digest(t, "team/web", "multi"))
	s.Push(t, "team/web", "single", registrytest.Image(t0.Add(time.Hour), "linux/arm64"))
	a := s.HarborAPI(t, registrytest.WithAPIAuth("robot$ci", "pw-1234"))
	u := a.URL + "/api/v2.0/projects/team/repositories/web/artifacts?sort=name"
	if resp := metaGet(t, http.MethodGet, u, "", "", nil); resp.StatusCode != 401 {
		t.Errorf("anonymous: status %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.SetBasicAuth("robot$ci", "pw-1234")
	var arts []harborTestArtifact
	resp := metaGet(t, http.MethodGet, u, req.Header.Get("Authorization"), "", &arts)
	if resp.StatusCode != 200 || len(arts) != 2 {
		t.Fatalf("status %d, %d artifacts", resp.StatusCode, len(arts))
	}
	idx, img := arts[0], arts[1]
	if len(idx.Tags) != 2 || idx.Tags[0].Name != "alias" || idx.Tags[1].Name != "multi" || len(idx.References) != 2 ||
		idx.References[1].Platform.Variant != "v7" || idx.ExtraAttrs != nil || idx.ManifestMediaType != "application/vnd.oci.image.index.v1+json" {
		t.Errorf("index: %+v", idx)
	}
	if img.ExtraAttrs == nil || img.ExtraAttrs.Architecture != "arm64" || img.ExtraAttrs.Created != "2026-01-01T01:00:00Z" ||
		img.MediaType != "application/vnd.oci.image.config.v1+json" || img.ManifestMediaType != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("image: %+v", img)
	}

	// getArtifact: an index's child by digest; an unknown digest is not found.
	base := a.URL + "/api/v2.0/projects/team/repositories/web/artifacts/"
	var child harborTestArtifact
	resp = metaGet(t, http.MethodGet, base+idx.References[1].ChildDigest, req.Header.Get("Authorization"), "", &child)
	if resp.StatusCode != 200 || child.Digest != idx.References[1].ChildDigest || child.ExtraAttrs == nil ||
		child.ExtraAttrs.Architecture != "arm" || child.ExtraAttrs.Created != "2026-01-01T00:00:00Z" || len(child.Tags) != 0 {
		t.Errorf("child: status %d, %+v", resp.StatusCode, child)
	}
	unknown := "sha256:" + strings.Repeat("0", 64)
	if resp := metaGet(t, http.MethodGet, base+unknown, req.Header.Get("Authorization"), "", nil); resp.StatusCode != 404 {
		t.Errorf("unknown digest: status %d", resp.StatusCode)
	}
	if n := a.Count(registrytest.APIArtifact); n != 2 {
		t.Errorf("%d artifact requests, want 2", n)
	}
}
