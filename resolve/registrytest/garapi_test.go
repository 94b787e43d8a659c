package registrytest_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

type garTestPage struct {
	DockerImages []struct {
		Name           string   `json:"name"`
		URI            string   `json:"uri"`
		Tags           []string `json:"tags"`
		UploadTime     string   `json:"uploadTime"`
		UpdateTime     string   `json:"updateTime"`
		BuildTime      string   `json:"buildTime"`
		MediaType      string   `json:"mediaType"`
		ImageManifests []struct {
			OS, Architecture, Variant, Digest, MediaType string
		} `json:"imageManifests"`
	} `json:"dockerImages"`
	NextPageToken string `json:"nextPageToken"`
}

// TestGARAPI_Pages: the dockerImages of every image of the Artifact Registry
// repository (and no other), by name, a page at a time by tokens; a bad token
// is 400, an unknown repository 404.
func TestGARAPI_Pages(t *testing.T) {
	s := registrytest.New(t)
	metaSeed(t, s, "proj/team/web", 3)
	metaSeed(t, s, "proj/team/sub/api", 2)
	metaSeed(t, s, "proj/other/web", 4)
	a := s.GARAPI(t)
	base := a.URL + "/v1/projects/proj/locations/europe/repositories/"
	var names, uris []string
	pages := 0
	for token := ""; ; pages++ {
		var page garTestPage
		if resp := metaGet(t, http.MethodGet, base+"team/dockerImages?pageSize=2&pageToken="+token, "", "", &page); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		for _, d := range page.DockerImages {
			names, uris = append(names, d.Name), append(uris, d.URI)
			if len(d.Tags) != 1 || d.UploadTime == "" || d.UploadTime != d.UpdateTime || d.BuildTime == "" {
				t.Errorf("image %+v", d)
			}
		}
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	if len(names) != 5 || pages != 2 || !slices.IsSorted(names) {
		t.Fatalf("%d images in %d pages, sorted %v: %v", len(names), pages+1, slices.IsSorted(names), names)
	}
	for i, n := range names {
		if !strings.HasPrefix(n, "projects/proj/locations/europe/repositories/team/dockerImages/") ||
			!(strings.HasPrefix(uris[i], "europe-docker.pkg.dev/proj/team/web@sha256:") ||
				strings.HasPrefix(uris[i], "europe-docker.pkg.dev/proj/team/sub/api@sha256:")) {
			t.Errorf("name %s uri %s", n, uris[i])
		}
	}
	if !strings.Contains(strings.Join(names, " "), "dockerImages/sub%2Fapi@sha256:") {
		t.Errorf("an image path's slash is not escaped in its name: %v", names)
	}
	for _, c := range []struct {
		path   string
		status int
	}{
		{"team/dockerImages?pageToken=%21%21", http.StatusBadRequest},
		{"nope/dockerImages", http.StatusNotFound},
		{"team/packages", http.StatusNotFound},
	} {
		if resp := metaGet(t, http.MethodGet, base+c.path, "", "", nil); resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.path, resp.StatusCode, c.status)
		}
	}
	if got := a.Counts(); got[registrytest.APIPage] != 5 || got[registrytest.APIOther] != 1 {
		t.Errorf("counts %v", got)
	}
}

// TestGARAPI_Index: an index's dockerImage lists its children with their
// platforms (variant included) and no build time; each child is listed apart,
// untagged.
func TestGARAPI_Index(t *testing.T) {
	s := registrytest.New(t)
	sc := &registrytest.Scenario{Repositories: map[string]*registrytest.Repository{"proj/team/web": {Tags: []registrytest.TagSpec{
		{Tag: "1.0", Created: "2026-01-01T00:00:00Z", Platforms: []string{"linux/amd64", "linux/arm/v7"}, Attestation: true},
	}}}}
	if err := s.SeedScenario(sc); err != nil {
		t.Fatal(err)
	}
	a := s.GARAPI(t)
	var page garTestPage
	metaGet(t, http.MethodGet, a.URL+"/v1/projects/proj/locations/us/repositories/team/dockerImages", "", "", &page)
	var tagged, untagged int
	for _, d := range page.DockerImages {
		if !strings.HasPrefix(d.URI, "us-docker.pkg.dev/proj/team/web@") {
			t.Errorf("uri %s", d.URI)
		}
		if len(d.Tags) == 0 {
			untagged++
			continue
		}
		tagged++
		var platforms []string
		for _, m := range d.ImageManifests {
			platforms = append(platforms, m.OS+"/"+m.Architecture+"/"+m.Variant)
		}
		slices.Sort(platforms)
		if d.BuildTime != "" || strings.Join(platforms, ",") != "linux/amd64/,linux/arm/v7,unknown/unknown/,unknown/unknown/" {
			t.Errorf("index: build time %q, platforms %v", d.BuildTime, platforms)
		}
	}
	if tagged != 1 || untagged != 4 {
		t.Errorf("%d tagged, %d untagged; want 1 and 4", tagged, untagged)
	}
}

// TestGARAPI_Auth: WithAPIAuth requires the Bearer access token.
func TestGARAPI_Auth(t *testing.T) {
	s := registrytest.New(t)
	metaSeed(t, s, "proj/team/web", 1)
	a := s.GARAPI(t, registrytest.WithAPIAuth("oauth2accesstoken", "ya29.token"))
	u := a.URL + "/v1/projects/proj/locations/europe/repositories/team/dockerImages"
	for _, c := range []struct {
		auth   string
		status int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer other", http.StatusUnauthorized},
		{"Basic b2F1dGgyYWNjZXNzdG9rZW46eWEyOS50b2tlbg==", http.StatusUnauthorized},
		{"Bearer ya29.token", http.StatusOK},
		{"Bearer " + a.IssueToken(), http.StatusOK},
	} {
		if resp := metaGet(t, http.MethodGet, u, c.auth, "", nil); resp.StatusCode != c.status {
			t.Errorf("%q: status %d, want %d", c.auth, resp.StatusCode, c.status)
		}
	}
}
