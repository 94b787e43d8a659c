package metadata_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/metadata"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// ---- the cloud registries (GAR, ACR, ECR): shared test harness ----

// garHost is the Artifact Registry host the GAR tests name images with.
const garHost = "europe-docker.pkg.dev"

// ecrRegistry is the ECR registry host the ECR tests name.
const ecrRegistry = "123456789012.dkr.ecr.eu-west-1.amazonaws.com"

// cloudVendor is one cloud registry's metadata API in the tests.
type cloudVendor struct {
	name   string
	server func(s *registrytest.Server, t testing.TB, opts ...registrytest.APIOption) *registrytest.APIServer
	// path is Registry's repository of an image written img ("team/web"): GAR
	// images are {project}/{repository}/{image}, proj/team/web.
	path func(img string) string
	// newClient returns the client of a with credential cred (nil: none).
	newClient func(t *testing.T, a *registrytest.APIServer, o metadata.Options, cred *authn.AuthConfig) resolve.MetadataAPI
	// ref is the repository an image is asked for as.
	ref func(t *testing.T, s *registrytest.Server, img string) name.Repository
	// user is the user name of its credential, for WithAPIAuth and cred.
	user   string
	pushed time.Duration // the precision of its push times
	// unknown is the status of an unknown repository.
	unknown int
	// links: whether it pages by links (else by tokens).
	links bool
	// logins is how many token exchanges a listing costs.
	logins int
}

var cloudVendors = []cloudVendor{
	{name: resolve.MetadataGAR, server: (*registrytest.Server).GARAPI, user: "oauth2accesstoken", pushed: time.Nanosecond,
		unknown: http.StatusNotFound, path: func(img string) string { return "proj/" + img },
		ref: func(t *testing.T, s *registrytest.Server, img string) name.Repository {
			return mustRepo(t, garHost+"/proj/"+img)
		},
		newClient: func(t *testing.T, a *registrytest.APIServer, o metadata.Options, cred *authn.AuthConfig) resolve.MetadataAPI {
			o.BaseURL, o.Registry, o.Keychain = a.URL, garHost, keychainOf(cred)
			return must[*metadata.GAR](t)(metadata.NewGAR(o))
		}},
	{name: resolve.MetadataACR, server: (*registrytest.Server).ACRAPI, user: "00000000-0000-0000-0000-000000000000",
		pushed: 100 * time.Nanosecond, unknown: http.StatusNotFound, links: true, logins: 1,
		path: func(img string) string { return img },
		ref:  func(t *testing.T, s *registrytest.Server, img string) name.Repository { return repoOf(t, s, img) },
		newClient: func(t *testing.T, a *registrytest.APIServer, o metadata.Options, cred *authn.AuthConfig) resolve.MetadataAPI {
			o.BaseURL, o.Registry, o.Keychain = a.URL, a.Host, keychainOf(cred)
			return must[*metadata.ACR](t)(metadata.NewACR(o))
		}},
	{name: resolve.MetadataECR, server: (*registrytest.Server).ECRAPI, user: "AKIDREGISTRYTEST", pushed: time.Millisecond,
		unknown: http.StatusBadRequest, path: func(img string) string { return img },
		ref: func(t *testing.T, s *registrytest.Server, img string) name.Repository { return repoOf(t, s, img) },
		newClient: func(t *testing.T, a *registrytest.APIServer, o metadata.Options, cred *authn.AuthConfig) resolve.MetadataAPI {
			awsEnv(t, cred)
			o.BaseURL, o.Registry = a.URL, ecrRegistry
			return must[*metadata.ECR](t)(metadata.NewECR(o))
		}},
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func mustRepo(t *testing.T, ref string) name.Repository {
	t.Helper()
	r, err := name.NewRepository(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func keychainOf(cred *authn.AuthConfig) authn.Keychain {
	if cred == nil {
		return nil
	}
	return staticKeychain{*cred}
}

// cred is v's credential with password pass.
func (v cloudVendor) cred(pass string) *authn.AuthConfig {
	return &authn.AuthConfig{Username: v.user, Password: pass}
}

// seedCloud seeds path with a tag of each kind: a single image, an index with
// attestations and an arm/v7 child, a 32-bit arm image, an index with a created
// annotation, a Docker index, an index of two amd64 variants and an alias of
// 1.1 pushed later; each tag's push time is set.
func seedCloud(t *testing.T, s *registrytest.Server, path string) {
	t.Helper()
	sc := &registrytest.Scenario{Repositories: map[string]*registrytest.Repository{path: {Tags: []registrytest.TagSpec{
		{Tag: "1.0", Created: "2026-01-01T01:00:00Z", Platforms: []string{"linux/amd64"}},
		{Tag: "1.1", Created: "2026-01-01T02:00:00Z", Platforms: []string{"linux/amd64", "linux/arm64/v8", "linux/arm/v7"}, Attestation: true},
		{Tag: "1.2", Created: "2026-01-01T03:00:00Z", Platforms: []string{"linux/arm/v7"}},
		{Tag: "1.3", Created: "2026-01-01T04:00:00Z", Platforms: []string{"linux/arm64", "linux/amd64"}, CreatedAnnotation: true},
		{Tag: "1.4", Created: "2026-01-01T05:00:00Z", Platforms: []string{"linux/amd64"}, Docker: true, Index: true},
		{Tag: "1.5", Created: "2026-01-01T06:00:00Z", Platforms: []string{"linux/amd64", "linux/amd64/v3"}},
		{Tag: "latest", SameAs: "1.1"},
	}}}}
	if err := s.SeedScenario(sc); err != nil {
		t.Fatal(err)
	}
	for i, tag := range []string{"1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "latest"} {
		s.SetPushed(path, tag, t0.Add(time.Duration(24+i)*time.Hour+123456789*time.Nanosecond))
	}
}

// seedOnce is seedMany, once per repository of s.
func seedOnce(t *testing.T, s *registrytest.Server, repo string, n int) {
	t.Helper()
	if _, err := s.Describe(repo); err == nil {
		return
	}
	seedMany(t, s, repo, n)
}

// pushedBounds are, per digest, the first and the last push of its tags.
func pushedBounds(t *testing.T, s *registrytest.Server, path string) (first, last map[string]time.Time) {
	t.Helper()
	descs, err := s.Describe(path)
	if err != nil {
		t.Fatal(err)
	}
	first, last = map[string]time.Time{}, map[string]time.Time{}
	for _, d := range descs {
		if f, ok := first[d.Digest]; !ok || d.Pushed.Before(f) {
			first[d.Digest] = d.Pushed
		}
		if d.Pushed.After(last[d.Digest]) {
			last[d.Digest] = d.Pushed
		}
	}
	return first, last
}

// checkRecords compares records with the OCI protocol's truth: digest and
// media type always; platforms as wantPlatforms says; Created zero; Pushed
// (within the API's precision) as wantPushed says.
func checkRecords(t *testing.T, recs []resolve.TagRecord, want map[string]truth, precision time.Duration,
	wantPlatforms func(tag string, w truth) ([]resolve.Platform, []v1.Hash), wantPushed func(w truth) time.Time) {
	t.Helper()
	got := byTag(t, recs)
	if len(got) != len(want) {
		t.Fatalf("%d tags, want %d", len(got), len(want))
	}
	for tag, w := range want {
		r := got[tag]
		if r.Digest != w.digest || r.MediaType != w.mediaType {
			t.Errorf("%s: %s %s, want %s %s", tag, r.Digest, r.MediaType, w.digest, w.mediaType)
		}
		wp, wm := wantPlatforms(tag, w)
		if !slices.Equal(r.Platforms, wp) || !slices.Equal(r.PlatformManifests, wm) {
			t.Errorf("%s: platforms %v %v, want %v %v", tag, r.Platforms, r.PlatformManifests, wp, wm)
		}
		if !r.Created.IsZero() {
			t.Errorf("%s: created %s, want zero (the API cannot say it as the OCI protocol reads it)", tag, r.Created)
		}
		p := wantPushed(w).Truncate(precision)
		if d := r.Pushed.Sub(p); d < 0 || d > precision {
			t.Errorf("%s: pushed %s, want %s", tag, r.Pushed, p)
		}
	}
}

// cloudFaultCase is one unusable answer every cloud API must refuse.
type cloudFaultCase struct {
	name      string
	img       string
	fault     *registrytest.APIFault
	opts      metadata.Options
	links     bool // only for APIs that page by links
	tokens    bool // only for APIs that page by tokens
	status    int  // want an *APIError with this status (-1: the vendor's unknown)
	limit     string
	retry     time.Duration
	contains  []string
	maxServed int // page requests at most (0: no check)
}

var cloudFaultCases = []cloudFaultCase{
	{name: "429", img: "team/many", fault: &registrytest.APIFault{Kind: registrytest.APIPage, Status: 429, RetryAfter: "7"},
		status: 429, retry: 7 * time.Second, maxServed: 1},
	{name: "500 on page 2", img: "team/many", fault: &registrytest.APIFault{Kind: registrytest.APIPage, Status: 500, Skip: 1},
		opts: metadata.Options{PageSize: 100}, status: 500, maxServed: 2},
	{name: "unknown repository", img: "nope/app", status: -1},
	{name: "malformed", img: "team/many", fault: &registrytest.APIFault{Kind: registrytest.APIPage, Body: []byte(`{"manifests": [{"digest": `)},
		status: 200, contains: []string{"malformed answer"}},
	{name: "next on another host", img: "team/many", links: true,
		fault: &registrytest.APIFault{Kind: registrytest.APIPage, NextURL: "http://other.example.invalid/acr/v1/team/many/_manifests?last=x"},
		limit: "foreign link", contains: []string{"other.example.invalid"}, maxServed: 1},
	// Page 2 names itself as the next page.
	{name: "next loops", img: "team/many", fault: &registrytest.APIFault{Kind: registrytest.APIPage, NextLoop: true, Skip: 1},
		opts: metadata.Options{PageSize: 100}, limit: "link loop", maxServed: 2},
	// Page 1 names, by a token, a page that lists it again.
	{name: "next repeats", img: "team/many", tokens: true, fault: &registrytest.APIFault{Kind: registrytest.APIPage, NextLoop: true, Times: 1},
		opts: metadata.Options{PageSize: 100}, limit: "repeated tag", maxServed: 2},
	{name: "max pages", img: "team/many", opts: metadata.Options{MaxPages: 2, PageSize: 100}, limit: "pages", maxServed: 2},
	{name: "max tags", img: "team/many", opts: metadata.Options{MaxTags: 150, PageSize: 100}, limit: "tags", maxServed: 2},
	{name: "max page bytes", img: "team/many", opts: metadata.Options{MaxPageBytes: 2000}, limit: "bytes per page", maxServed: 1},
}

// TestCloudAPIs_Faults: every cloud API answers an unusable answer with an
// error naming the API (and the URL), never a credential, and stops reading.
func TestCloudAPIs_Faults(t *testing.T) {
	s := registrytest.New(t)
	for _, v := range cloudVendors {
		seedOnce(t, s, v.path("team/many"), 250)
		for _, c := range cloudFaultCases {
			if (c.links && !v.links) || (c.tokens && v.links) {
				continue
			}
			t.Run(v.name+"/"+c.name, func(t *testing.T) {
				a := v.server(s, t, registrytest.WithAPIAuth(v.user, secret))
				if c.fault != nil {
					a.Inject(*c.fault)
				}
				_, err := v.newClient(t, a, c.opts, v.cred(secret)).ListTagRecords(context.Background(), v.ref(t, s, c.img))
				if err == nil {
					t.Fatal("no error")
				}
				checkCloudErr(t, v, a, c, err)
				if n := a.Count(registrytest.APIPage); c.maxServed > 0 && n > c.maxServed {
					t.Errorf("%d page requests, want at most %d", n, c.maxServed)
				}
				if n := s.Total(); n != 0 {
					t.Errorf("%d registry requests, want 0", n)
				}
			})
		}
	}
}

func checkCloudErr(t *testing.T, v cloudVendor, a *registrytest.APIServer, c cloudFaultCase, err error) {
	t.Helper()
	msg := err.Error()
	checkNoSecret(t, msg)
	if !strings.Contains(msg, v.name+" API") {
		t.Errorf("error does not name the API: %s", msg)
	}
	for _, want := range c.contains {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not say %q: %s", want, msg)
		}
	}
	status := c.status
	if status == -1 {
		status = v.unknown
	}
	checkErr(t, err, status, c.limit, c.retry, false)
	if status != 0 && !strings.Contains(msg, a.URL) {
		t.Errorf("error does not name the URL %s: %s", a.URL, msg)
	}
}

// TestCloudAPIs_BadEntries: a digest or a tag that breaks the grammar is a
// malformed answer naming it.
func TestCloudAPIs_BadEntries(t *testing.T) {
	s := registrytest.New(t)
	pages := map[string]string{
		resolve.MetadataGAR: `{"dockerImages":[{"name":"x","uri":"` + garHost + `/proj/team/many@%[2]s","tags":["%[1]s"],"mediaType":"application/vnd.oci.image.manifest.v1+json"}]}`,
		resolve.MetadataACR: `{"manifests":[{"digest":"%[2]s","tags":["%[1]s"],"lastUpdateTime":"2026-01-01T00:00:00Z"}]}`,
		resolve.MetadataECR: `{"imageDetails":[{"imageDigest":"%[2]s","imageTags":["%[1]s"],"imagePushedAt":1700000000}]}`,
	}
	for _, v := range cloudVendors {
		seedOnce(t, s, v.path("team/many"), 3)
		for _, c := range []struct{ name, tag, digest, want string }{
			{"digest", "a", "md5:xyz", "md5:xyz"},
			{"tag", "-bad tag", digestA, "not a valid tag"},
		} {
			t.Run(v.name+"/"+c.name, func(t *testing.T) {
				a := v.server(s, t)
				a.Inject(registrytest.APIFault{Kind: registrytest.APIPage, Body: []byte(fmt.Sprintf(pages[v.name], c.tag, c.digest))})
				_, err := v.newClient(t, a, metadata.Options{}, v.cred(secret)).ListTagRecords(context.Background(), v.ref(t, s, "team/many"))
				var ae *metadata.APIError
				if !errors.As(err, &ae) || !strings.Contains(err.Error(), "malformed answer") || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("want a malformed answer naming %q, got %T: %v", c.want, err, err)
				}
				if !strings.Contains(err.Error(), a.URL) {
					t.Errorf("error does not name the URL: %v", err)
				}
			})
		}
	}
}

// TestCloudAPIs_Auth: a refused credential, or none, is an error that shows no
// credential; an answer quoting the credential is redacted.
func TestCloudAPIs_Auth(t *testing.T) {
	s := registrytest.New(t)
	for _, v := range cloudVendors {
		seedOnce(t, s, v.path("team/many"), 3)
		cases := []struct {
			name   string
			cred   *authn.AuthConfig
			fault  *registrytest.APIFault
			status int // 0: any error
		}{
			{name: "wrong password", cred: v.cred("wrong-" + secret), status: map[string]int{
				resolve.MetadataGAR: 401, resolve.MetadataACR: 401, resolve.MetadataECR: 403}[v.name]},
			// ECR without AWS credentials fails before any request.
			{name: "anonymous", cred: nil, status: map[string]int{resolve.MetadataGAR: 401, resolve.MetadataACR: 401}[v.name]},
			{name: "answer quotes the credential", cred: v.cred(secret), status: 500,
				fault: &registrytest.APIFault{Kind: registrytest.APIPage, Status: 500,
					Body: []byte(`{"message":"bad credential ` + secret + `","error":{"message":"` + secret + `"}}`)}},
		}
		for _, c := range cases {
			t.Run(v.name+"/"+c.name, func(t *testing.T) {
				a := v.server(s, t, registrytest.WithAPIAuth(v.user, secret))
				if c.fault != nil {
					a.Inject(*c.fault)
				}
				_, err := v.newClient(t, a, metadata.Options{}, c.cred).ListTagRecords(context.Background(), v.ref(t, s, "team/many"))
				if err == nil {
					t.Fatal("no error")
				}
				var ae *metadata.APIError
				if c.status != 0 && (!errors.As(err, &ae) || ae.Status != c.status) {
					t.Fatalf("want an *APIError of status %d, got %T: %v", c.status, err, err)
				}
				if !strings.Contains(err.Error(), v.name+" API") {
					t.Errorf("error does not name the API: %v", err)
				}
				checkNoSecret(t, err.Error())
				for _, r := range a.Requests() {
					if strings.Contains(r.RawQuery, secret) || strings.Contains(r.Path, secret) {
						t.Errorf("the credential is in a URL: %s?%s", r.Path, r.RawQuery)
					}
				}
			})
		}
	}
}

// TestCloudAPIs_Counts: 1,000 tags cost one page at the APIs' largest page
// size (GAR pageSize 1000, ACR n=1000, ECR maxResults 1000), plus ACR's token
// exchange, and no registry request.
func TestCloudAPIs_Counts(t *testing.T) {
	s := registrytest.New(t)
	for _, v := range cloudVendors {
		seedOnce(t, s, v.path("big/thousand"), 1000)
		descs, err := s.Describe(v.path("big/thousand"))
		if err != nil {
			t.Fatal(err)
		}
		for _, auth := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/auth=%v", v.name, auth), func(t *testing.T) {
				var opts []registrytest.APIOption
				cred := v.cred("any")
				if auth {
					opts, cred = append(opts, registrytest.WithAPIAuth(v.user, secret)), v.cred(secret)
				}
				a := v.server(s, t, opts...)
				s.ResetCounts()
				recs, err := v.newClient(t, a, metadata.Options{}, cred).ListTagRecords(context.Background(), v.ref(t, s, "big/thousand"))
				if err != nil {
					t.Fatal(err)
				}
				got := byTag(t, recs)
				if len(got) != len(descs) {
					t.Fatalf("%d tags, want %d", len(got), len(descs))
				}
				for _, d := range descs {
					if r := got[d.Tag]; r.Digest.String() != d.Digest || r.Pushed.Sub(d.Pushed.Truncate(v.pushed)).Abs() > v.pushed {
						t.Errorf("%s: %s %s, want %s %s", d.Tag, r.Digest, r.Pushed, d.Digest, d.Pushed)
					}
				}
				want := map[registrytest.APIKind]int{registrytest.APIPage: 1}
				if v.logins > 0 {
					want[registrytest.APILogin] = v.logins
				}
				if got := a.Counts(); !mapsEqual(got, want) {
					t.Errorf("API requests %v, want %v", got, want)
				}
				if n := s.Total(); n != 0 {
					t.Errorf("%d registry requests, want 0: %v", n, s.Counts())
				}
			})
		}
	}
}

// TestCloudAPIs_PageSize: the page size asked for is Options.PageSize, at most
// the API's maximum (1000).
func TestCloudAPIs_PageSize(t *testing.T) {
	s := registrytest.New(t)
	for _, v := range cloudVendors {
		seedOnce(t, s, v.path("team/many"), 25)
		for _, c := range []struct{ size, pages int }{{10, 3}, {5000, 1}, {0, 1}} {
			t.Run(fmt.Sprintf("%s/%d", v.name, c.size), func(t *testing.T) {
				a := v.server(s, t, registrytest.WithAPIMaxPageSize(10000))
				recs, err := v.newClient(t, a, metadata.Options{PageSize: c.size}, v.cred("x")).ListTagRecords(context.Background(), v.ref(t, s, "team/many"))
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) != 25 {
					t.Errorf("%d tags, want 25", len(recs))
				}
				if n := a.Count(registrytest.APIPage); n != c.pages {
					t.Errorf("%d pages, want %d", n, c.pages)
				}
				for _, r := range a.Requests() {
					if r.Kind == registrytest.APIPage && c.size >= 1000 && strings.Contains(r.RawQuery, "5000") {
						t.Errorf("page size over the API's maximum asked for: %s", r.RawQuery)
					}
				}
			})
		}
	}
}

// ---- Artifact Registry ----

// TestGAR_Records: one record per tag of the image asked for (the other image
// of its Artifact Registry repository left out), with the digest and media
// type of the OCI protocol, an index's platforms (none for a single image),
// the first push of the digest and no build time (GAR's buildTime is not what
// the OCI protocol reads when the manifest is annotated).
func TestGAR_Records(t *testing.T) {
	s := registrytest.New(t)
	seedCloud(t, s, "proj/team/web")
	seedMany(t, s, "proj/team/other", 3)
	want := oci(t, s, "proj/team/web")
	first, _ := pushedBounds(t, s, "proj/team/web")
	a := s.GARAPI(t, registrytest.WithAPIAuth("oauth2accesstoken", secret))
	s.ResetCounts()
	g := must[*metadata.GAR](t)(metadata.NewGAR(metadata.Options{BaseURL: a.URL, Keychain: keychainOf(cloudVendors[0].cred(secret)), PageSize: 3}))
	recs, err := g.ListTagRecords(context.Background(), mustRepo(t, garHost+"/proj/team/web"))
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, recs, want, time.Nanosecond,
		func(tag string, w truth) ([]resolve.Platform, []v1.Hash) {
			if !w.mediaType.IsIndex() {
				return nil, nil
			}
			return w.platforms, w.platformManifests
		},
		func(w truth) time.Time { return first[w.digest.String()] })
	// Every manifest of web (tagged or an index's child) and other's 3, 3 a
	// page.
	if n, want := a.Count(registrytest.APIPage), (manifestCount(t, s, "proj/team/web")+3+2)/3; n != want {
		t.Errorf("%d pages, want %d", n, want)
	}
	for _, r := range a.Requests() {
		if !r.Authorization || r.Path != "/v1/projects/proj/locations/europe/repositories/team/dockerImages" {
			t.Errorf("request %s (authorization %v)", r.Path, r.Authorization)
		}
	}
	if n := s.Total(); n != 0 {
		t.Errorf("%d registry requests, want 0", n)
	}
}

// manifestCount is how many manifests repo holds: its tags' and their
// indexes' children.
func manifestCount(t *testing.T, s *registrytest.Server, repo string) int {
	t.Helper()
	descs, err := s.Describe(repo)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, d := range descs {
		seen[d.Digest] = true
		for _, m := range d.Manifests {
			seen[m.Digest] = true
		}
	}
	return len(seen)
}

// TestGAR_Credentials: a registry token is sent as it is; a credential that is
// not an OAuth2 access token is refused before any request, naming its user
// and not its password.
func TestGAR_Credentials(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "proj/team/web", 2)
	a := s.GARAPI(t, registrytest.WithAPIAuth("oauth2accesstoken", secret))
	for _, c := range []struct {
		name string
		cred authn.AuthConfig
		ok   bool
	}{
		{"access token", authn.AuthConfig{Username: "oauth2accesstoken", Password: secret}, true},
		{"docker-credential-gcr", authn.AuthConfig{Username: "_dcgcloud_token", Password: secret}, true},
		{"registry token", authn.AuthConfig{RegistryToken: secret}, true},
		{"json key", authn.AuthConfig{Username: "_json_key", Password: `{"private_key":"` + secret + `"}`}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a.ResetCounts()
			g := must[*metadata.GAR](t)(metadata.NewGAR(metadata.Options{BaseURL: a.URL, Registry: garHost, Keychain: staticKeychain{c.cred}}))
			recs, err := g.ListTagRecords(context.Background(), mustRepo(t, garHost+"/proj/team/web"))
			if c.ok {
				if err != nil || len(recs) != 2 {
					t.Fatalf("%d tags, %v", len(recs), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "_json_key") || a.Total() != 0 {
				t.Fatalf("want an error naming the user before any request, got %v (%d requests)", err, a.Total())
			}
			checkNoSecret(t, err.Error())
		})
	}
}

// TestGAR_Names: the location comes from the registry host (else
// Options.Registry); an image path must be {project}/{repository}/{image}; an
// image absent from its repository is an error.
func TestGAR_Names(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "proj/team/web", 2)
	a := s.GARAPI(t)
	for _, c := range []struct {
		ref, registry, want string
	}{
		{ref: "us-docker.pkg.dev/proj/team/web"},
		{ref: "mirror.example/proj/team/web", registry: "us-docker.pkg.dev"},
		{ref: "mirror.example/proj/team/web", want: "not on an Artifact Registry host"},
		{ref: "us-docker.pkg.dev/proj/web", want: "{project}/{repository}/{image}"},
		{ref: "us-docker.pkg.dev/proj/team/nope", want: "no image proj/team/nope"},
	} {
		t.Run(c.ref+c.registry, func(t *testing.T) {
			g := must[*metadata.GAR](t)(metadata.NewGAR(metadata.Options{BaseURL: a.URL, Registry: c.registry}))
			recs, err := g.ListTagRecords(context.Background(), mustRepo(t, c.ref))
			if c.want == "" {
				if err != nil || len(recs) != 2 {
					t.Fatalf("%d tags, %v", len(recs), err)
				}
				if p := a.Requests()[len(a.Requests())-1].Path; !strings.Contains(p, "/locations/us/") {
					t.Errorf("location not us: %s", p)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "gar API") {
				t.Fatalf("want an error saying %q, got %v", c.want, err)
			}
		})
	}
}

// TestGARShape: the test server answers as Artifact Registry's REST reference
// describes it.
func TestGARShape(t *testing.T) {
	s := registrytest.New(t)
	seedCloud(t, s, "proj/team/web")
	a := s.GARAPI(t)
	base := a.URL + "/v1/projects/proj/locations/europe/repositories/"
	// Every page but the last (which has no nextPageToken), 4 images a page.
	for u, pages := base+"team/dockerImages?pageSize=4", 0; ; pages++ {
		var page struct {
			NextPageToken string `json:"nextPageToken"`
		}
		body := getJSON(t, u, &page)
		if page.NextPageToken == "" {
			if pages < 3 {
				t.Errorf("%d pages, want more", pages+1)
			}
			break
		}
		compareShape(t, "testdata/gar/dockerImages.json", mustRead(t, "testdata/gar/dockerImages.json"), body)
		u = base + "team/dockerImages?pageSize=4&pageToken=" + page.NextPageToken
	}
	checkShape(t, "testdata/gar/error.json", base+"nope/dockerImages", nil, http.StatusNotFound)
}

// getJSON GETs u (status 200) and decodes its answer into v; it returns the
// answer.
func getJSON(t *testing.T, u string, v any) []byte {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v: %s", u, resp.StatusCode, err, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatal(err)
	}
	return body
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
