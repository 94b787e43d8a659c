package metadata_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/metadata"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// TestDockerHub_Records: every tag with the digest, media type, runnable
// platforms and their manifests the OCI protocol gives, and its push time, over
// several pages; no build time.
func TestDockerHub_Records(t *testing.T) {
	s := registrytest.New(t)
	seedContent(t, s)
	want := oci(t, s, "team/web")
	a := s.DockerHubAPI(t)
	s.ResetCounts()
	hub, err := metadata.NewDockerHub(metadata.Options{BaseURL: a.URL, PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := hub.ListTagRecords(context.Background(), repoOf(t, s, "team/web"))
	if err != nil {
		t.Fatal(err)
	}
	got := byTag(t, recs)
	if len(got) != len(want) {
		t.Fatalf("%d tags, want %d", len(got), len(want))
	}
	for tag, w := range want {
		r := got[tag]
		if r.Digest != w.digest || r.MediaType != w.mediaType {
			t.Errorf("%s: %s %s, want %s %s", tag, r.Digest, r.MediaType, w.digest, w.mediaType)
		}
		if !slices.Equal(r.Platforms, w.platforms) || !slices.Equal(r.PlatformManifests, w.platformManifests) {
			t.Errorf("%s: platforms %v %v, want %v %v", tag, r.Platforms, r.PlatformManifests, w.platforms, w.platformManifests)
		}
		if !r.Created.IsZero() {
			t.Errorf("%s: created %s, want zero (Hub gives no build time)", tag, r.Created)
		}
		if p := w.pushed.Truncate(time.Microsecond); !r.Pushed.Equal(p) {
			t.Errorf("%s: pushed %s, want %s", tag, r.Pushed, p)
		}
	}
	if n := a.Count(registrytest.APIPage); n != 4 {
		t.Errorf("%d pages of 2 for 7 tags, want 4", n)
	}
	if n := s.Total(); n != 0 {
		t.Errorf("%d registry requests (pulls), want 0", n)
	}
}

// TestDockerHub_OfficialImage: docker.io/nginx is library/nginx.
func TestDockerHub_OfficialImage(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "library/nginx", 3)
	a := s.DockerHubAPI(t)
	hub, err := metadata.NewDockerHub(metadata.Options{BaseURL: a.URL})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := name.NewRepository("nginx")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := hub.ListTagRecords(context.Background(), repo)
	if err != nil || len(recs) != 3 {
		t.Fatalf("%d tags, %v; want 3", len(recs), err)
	}
	if p := a.Requests()[0].Path; p != "/v2/namespaces/library/repositories/nginx/tags" {
		t.Errorf("path %s", p)
	}
	deep, _ := name.NewRepository("docker.io/a/b/c")
	if _, err := hub.ListTagRecords(context.Background(), deep); err == nil {
		t.Error("a/b/c: no error")
	}
}

// TestDockerHub_Token: the login happens once, its token is reused, and a page
// answering 401 (token revoked) makes one more login.
func TestDockerHub_Token(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "team/many", 5)
	a := s.DockerHubAPI(t, registrytest.WithAPIAuth("ci", secret))
	hub, err := metadata.NewDockerHub(metadata.Options{BaseURL: a.URL, Keychain: vendors[0].keychain(secret), PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, repo := context.Background(), repoOf(t, s, "team/many")
	for range 2 {
		if _, err := hub.ListTagRecords(ctx, repo); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.Counts(); got[registrytest.APILogin] != 1 || got[registrytest.APIPage] != 6 {
		t.Errorf("counts %v, want 1 login and 6 pages", got)
	}
	for _, r := range a.Requests() {
		if r.Kind == registrytest.APILogin && r.Path != "/v2/auth/token" {
			t.Errorf("login at %s, want /v2/auth/token", r.Path)
		}
		if r.Kind == registrytest.APIPage && !r.Authorization {
			t.Errorf("page %s?%s sent without the token", r.Path, r.RawQuery)
		}
	}
	a.RevokeTokens()
	a.ResetCounts()
	if _, err := hub.ListTagRecords(ctx, repo); err != nil {
		t.Fatal(err)
	}
	if got := a.Counts(); got[registrytest.APILogin] != 1 || got[registrytest.APIPage] != 4 {
		t.Errorf("after revocation: counts %v, want 1 login and 4 pages (one refused)", got)
	}
}

// TestDockerHub_TokenOnly: a credential without user name and secret cannot
// log in: an error, no request.
func TestDockerHub_TokenOnly(t *testing.T) {
	s := registrytest.New(t)
	a := s.DockerHubAPI(t)
	hub, err := metadata.NewDockerHub(metadata.Options{BaseURL: a.URL,
		Keychain: staticKeychain{authn.AuthConfig{RegistryToken: secret}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = hub.ListTagRecords(context.Background(), repoOf(t, s, "team/web"))
	if err == nil || a.Total() != 0 {
		t.Fatalf("err %v, %d requests", err, a.Total())
	}
	checkNoSecret(t, err.Error())
}

// TestDockerHubShape: the test server answers as Docker Hub documents it.
func TestDockerHubShape(t *testing.T) {
	s := registrytest.New(t)
	seedContent(t, s)
	a := s.DockerHubAPI(t, registrytest.WithAPIAuth("ci", secret))

	want, err := os.ReadFile("testdata/dockerhub/auth_token.json")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(a.URL+"/v2/auth/token", "application/json",
		strings.NewReader(`{"identifier":"ci","secret":"`+secret+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	compareShape(t, "auth_token.json", want, body.Bytes())
	tok := a.IssueToken()

	hdr := http.Header{"Authorization": {"Bearer " + tok}}
	checkShape(t, "testdata/dockerhub/tags.json", a.URL+"/v2/namespaces/team/repositories/web/tags?page_size=3", hdr, 200)
	checkShape(t, "testdata/dockerhub/error.json", a.URL+"/v2/namespaces/team/repositories/nope/tags", hdr, 404)
	checkShape(t, "testdata/dockerhub/error.json", a.URL+"/v2/namespaces/team/repositories/web/tags", nil, 401)
}
