package metadata_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/metadata"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// TestQuay_Records: every active tag with its digest and push time (Unix
// seconds); no media type, platforms or build time (Quay does not give them).
func TestQuay_Records(t *testing.T) {
	s := registrytest.New(t)
	seedContent(t, s)
	want := oci(t, s, "team/web")
	a := s.QuayAPI(t)
	s.ResetCounts()
	q, err := metadata.NewQuay(metadata.Options{BaseURL: a.URL, PageSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := q.ListTagRecords(context.Background(), repoOf(t, s, "team/web"))
	if err != nil {
		t.Fatal(err)
	}
	got := byTag(t, recs)
	if len(got) != len(want) {
		t.Fatalf("%d tags, want %d", len(got), len(want))
	}
	for tag, w := range want {
		r := got[tag]
		if r.Digest != w.digest {
			t.Errorf("%s: digest %s, want %s", tag, r.Digest, w.digest)
		}
		if r.MediaType != "" || r.Platforms != nil || r.PlatformManifests != nil || !r.Created.IsZero() {
			t.Errorf("%s: %q %v %v %s: want them zero", tag, r.MediaType, r.Platforms, r.PlatformManifests, r.Created)
		}
		if p := w.pushed.Truncate(time.Second); !r.Pushed.Equal(p) {
			t.Errorf("%s: pushed %s, want %s", tag, r.Pushed, p)
		}
	}
	if n := a.Count(registrytest.APIPage); n != 3 {
		t.Errorf("%d pages of 3 for 7 tags, want 3", n)
	}
	if n := s.Total(); n != 0 {
		t.Errorf("%d registry requests, want 0", n)
	}
}

// TestQuay_Credentials: a token is sent as Bearer; a robot account's user name
// and password are not (Quay's API does not take them): anonymous.
func TestQuay_Credentials(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "team/many", 2)
	for _, c := range []struct {
		name   string
		cfg    authn.AuthConfig
		bearer bool
	}{
		{"oauth token", authn.AuthConfig{Username: "$oauthtoken", Password: secret}, true},
		{"registry token", authn.AuthConfig{RegistryToken: secret}, true},
		{"robot account", authn.AuthConfig{Username: "org+robot", Password: secret}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := s.QuayAPI(t)
			q, err := metadata.NewQuay(metadata.Options{BaseURL: a.URL, Keychain: staticKeychain{c.cfg}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := q.ListTagRecords(context.Background(), repoOf(t, s, "team/many")); err != nil {
				t.Fatal(err)
			}
			if r := a.Requests()[0]; r.Authorization != c.bearer {
				t.Errorf("Authorization sent: %v, want %v", r.Authorization, c.bearer)
			}
		})
	}
}

// TestQuay_Defaults: quay.io's API for quay.io, the registry host for Red Hat
// Quay.
func TestQuay_Defaults(t *testing.T) {
	for _, c := range []struct{ registry, want string }{
		{"quay.io", "https://quay.io/api/"}, {"", "https://quay.io/api/"}, {"quay.example.com", "https://quay.example.com/api/"},
	} {
		q, err := metadata.NewQuay(metadata.Options{Registry: c.registry, Transport: unavailable{}})
		if err != nil {
			t.Fatal(err)
		}
		repo, err := name.NewRepository("quay.io/team/web")
		if err != nil {
			t.Fatal(err)
		}
		_, err = q.ListTagRecords(context.Background(), repo)
		var ae *metadata.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.HasPrefix(ae.URL, c.want) {
			t.Errorf("registry %q: %v, want a 503 from %s", c.registry, err, c.want)
		}
	}
}

// unavailable answers every request 503 without sending it.
type unavailable struct{}

func (unavailable) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusServiceUnavailable, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

// TestQuayShape: the test server answers as Quay's API does.
func TestQuayShape(t *testing.T) {
	s := registrytest.New(t)
	seedContent(t, s)
	a := s.QuayAPI(t, registrytest.WithAPIAuth("$oauthtoken", secret))
	hdr := http.Header{"Authorization": {"Bearer " + secret}}
	checkShape(t, "testdata/quay/tags.json", a.URL+"/api/v1/repository/team/web/tag/?limit=2&onlyActiveTags=true", hdr, 200)
	checkShape(t, "testdata/quay/error.json", a.URL+"/api/v1/repository/team/nope/tag/", hdr, 404)
	checkShape(t, "testdata/quay/error.json", a.URL+"/api/v1/repository/team/web/tag/", nil, 401)
}
