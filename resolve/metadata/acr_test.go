package metadata_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/metadata"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// acrUser is the user name of an ACR refresh token.
const acrUser = "00000000-0000-0000-0000-000000000000"

// TestACR_Records: one record per tag, newest update first through Link
// pages, with the digest and media type of the OCI protocol, the platforms
// where ACR's (variant-less) ones are exact, the last update of the digest
// and no build time.
func TestACR_Records(t *testing.T) {
	s := registrytest.New(t)
	seedCloud(t, s, "team/web")
	want := oci(t, s, "team/web")
	_, last := pushedBounds(t, s, "team/web")
	a := s.ACRAPI(t, registrytest.WithAPIAuth(acrUser, secret))
	s.ResetCounts()
	c := must[*metadata.ACR](t)(metadata.NewACR(metadata.Options{BaseURL: a.URL, Registry: a.Host, PageSize: 3,
		Keychain: staticKeychain{authn.AuthConfig{Username: acrUser, Password: secret}}}))
	recs, err := c.ListTagRecords(context.Background(), repoOf(t, s, "team/web"))
	if err != nil {
		t.Fatal(err)
	}
	// No platforms: an arm platform (1.1, 1.2) or two amd64 variants (1.5).
	inexact := []string{"1.1", "latest", "1.2", "1.5"}
	checkRecords(t, recs, want, 100*time.Nanosecond,
		func(tag string, w truth) ([]resolve.Platform, []v1.Hash) {
			if slices.Contains(inexact, tag) {
				return nil, nil
			}
			return w.platforms, w.platformManifests
		},
		func(w truth) time.Time { return last[w.digest.String()] })
	pages := 0
	for _, r := range a.Requests() {
		if r.Kind != registrytest.APIPage {
			continue
		}
		pages++
		q, _ := url.ParseQuery(r.RawQuery)
		if q.Get("orderby") != "timedesc" || q.Get("n") != "3" || r.Path != "/acr/v1/team/web/_manifests" {
			t.Errorf("page request %s?%s", r.Path, r.RawQuery)
		}
	}
	if want := (manifestCount(t, s, "team/web") + 2) / 3; pages != want {
		t.Errorf("%d pages, want %d", pages, want)
	}
	if n := a.Count(registrytest.APILogin); n != 1 {
		t.Errorf("%d token exchanges, want 1", n)
	}
	if n := s.Total(); n != 0 {
		t.Errorf("%d registry requests, want 0", n)
	}
}

// TestACR_Token: each kind of credential is exchanged as ACR documents it
// (a refresh token with POST, a user and password with GET and Basic); a
// registry token is sent as it is; the access token is cached across listings
// and fetched once more when a page answers 401.
func TestACR_Token(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "team/web", 3)
	for _, c := range []struct {
		name       string
		user       string
		cred       authn.AuthConfig
		method     string // of the token request; "" for none
		listings   int
		revoke     bool // revoke the tokens before the second listing
		wantLogins int
		wantPages  int
	}{
		{name: "refresh token", user: acrUser, cred: authn.AuthConfig{Username: acrUser, Password: secret},
			method: http.MethodPost, listings: 2, wantLogins: 1, wantPages: 2},
		{name: "identity token", user: acrUser, cred: authn.AuthConfig{Username: "<token>", IdentityToken: secret},
			method: http.MethodPost, listings: 1, wantLogins: 1, wantPages: 1},
		{name: "admin user", user: "myregistry", cred: authn.AuthConfig{Username: "myregistry", Password: secret},
			method: http.MethodGet, listings: 1, wantLogins: 1, wantPages: 1},
		{name: "revoked token", user: acrUser, cred: authn.AuthConfig{Username: acrUser, Password: secret},
			method: http.MethodPost, listings: 2, revoke: true, wantLogins: 2, wantPages: 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := s.ACRAPI(t, registrytest.WithAPIAuth(c.user, secret))
			cl := must[*metadata.ACR](t)(metadata.NewACR(metadata.Options{BaseURL: a.URL, Registry: a.Host, Keychain: staticKeychain{c.cred}}))
			for i := 0; i < c.listings; i++ {
				if i > 0 && c.revoke {
					a.RevokeTokens()
				}
				if recs, err := cl.ListTagRecords(context.Background(), repoOf(t, s, "team/web")); err != nil || len(recs) != 3 {
					t.Fatalf("listing %d: %d tags, %v", i, len(recs), err)
				}
			}
			if n := a.Count(registrytest.APILogin); n != c.wantLogins {
				t.Errorf("%d token requests, want %d", n, c.wantLogins)
			}
			if n := a.Count(registrytest.APIPage); n != c.wantPages {
				t.Errorf("%d page requests, want %d", n, c.wantPages)
			}
			for _, r := range a.Requests() {
				if r.Kind == registrytest.APILogin && (r.Method != c.method || strings.Contains(r.RawQuery, secret)) {
					t.Errorf("token request %s %s?%s", r.Method, r.Path, r.RawQuery)
				}
			}
		})
	}
}

// TestACR_RegistryToken: a registry token is sent as the Bearer token, with no
// exchange.
func TestACR_RegistryToken(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "team/web", 3)
	a := s.ACRAPI(t)
	cl := must[*metadata.ACR](t)(metadata.NewACR(metadata.Options{BaseURL: a.URL, Registry: a.Host,
		Keychain: staticKeychain{authn.AuthConfig{RegistryToken: secret}}}))
	if recs, err := cl.ListTagRecords(context.Background(), repoOf(t, s, "team/web")); err != nil || len(recs) != 3 {
		t.Fatalf("%d tags, %v", len(recs), err)
	}
	if got := a.Counts(); !mapsEqual(got, map[registrytest.APIKind]int{registrytest.APIPage: 1}) {
		t.Errorf("requests %v, want one page", got)
	}
}

// TestACR_Defaults: the base URL is https://<registry>, which is also the
// token exchange's service; neither is an error.
func TestACR_Defaults(t *testing.T) {
	if _, err := metadata.NewACR(metadata.Options{}); err == nil {
		t.Error("no registry nor base URL: no error")
	}
	c, err := metadata.NewACR(metadata.Options{Registry: "myregistry.azurecr.io"})
	if err != nil || c.Name() != resolve.MetadataACR {
		t.Fatalf("%v %v", c, err)
	}
}

// TestACRShape: the test server answers as ACR's REST specification
// describes it.
func TestACRShape(t *testing.T) {
	s := registrytest.New(t)
	seedCloud(t, s, "team/web")
	a := s.ACRAPI(t)
	checkShape(t, "testdata/acr/manifests.json", a.URL+"/acr/v1/team/web/_manifests?n=1000&orderby=timedesc", nil, 200)
	checkShape(t, "testdata/acr/manifests.json", a.URL+"/acr/v1/team/web/_manifests?n=2", nil, 200)
	checkShape(t, "testdata/acr/tags.json", a.URL+"/acr/v1/team/web/_tags?orderby=timedesc", nil, 200)
	q := url.Values{"service": {a.Host}, "scope": {"repository:team/web:metadata_read"}}
	checkShape(t, "testdata/acr/token.json", a.URL+"/oauth2/token?"+q.Encode(), nil, 200)
	// An error's detail varies with the error.
	checkShape(t, "testdata/acr/error.json", a.URL+"/acr/v1/team/nope/_manifests", nil, http.StatusNotFound, "errors[].detail")
}
