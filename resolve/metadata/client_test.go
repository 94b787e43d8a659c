package metadata_test

import (
	"bytes"
	"context"
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
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/metadata"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// secret is the password of every test credential: no error may show it.
const secret = "s3cr3t-Pa55word-7f1c"

// staticKeychain gives one credential for every resource.
type staticKeychain struct{ cfg authn.AuthConfig }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return authn.FromConfig(k.cfg), nil
}

// vendor is one metadata API: its test server, client and credential.
type vendor struct {
	name   string
	server func(s *registrytest.Server, t testing.TB, opts ...registrytest.APIOption) *registrytest.APIServer
	client func(o metadata.Options) (resolve.MetadataAPI, error)
	user   string        // the user name of its credential
	pushed time.Duration // the precision of its push times
	// links: whether it follows next-page URLs (Quay numbers its pages).
	links bool
}

var vendors = []vendor{
	{name: resolve.MetadataDockerHub, server: (*registrytest.Server).DockerHubAPI, user: "ci", pushed: time.Microsecond, links: true,
		client: func(o metadata.Options) (resolve.MetadataAPI, error) { return metadata.NewDockerHub(o) }},
	{name: resolve.MetadataHarbor, server: (*registrytest.Server).HarborAPI, user: "robot$ci", pushed: time.Millisecond, links: true,
		client: func(o metadata.Options) (resolve.MetadataAPI, error) { return metadata.NewHarbor(o) }},
	{name: resolve.MetadataQuay, server: (*registrytest.Server).QuayAPI, user: "$oauthtoken", pushed: time.Second,
		client: func(o metadata.Options) (resolve.MetadataAPI, error) { return metadata.NewQuay(o) }},
}

// newClient returns v's client of a (o's BaseURL and Registry set).
func (v vendor) newClient(t *testing.T, a *registrytest.APIServer, o metadata.Options) resolve.MetadataAPI {
	t.Helper()
	o.BaseURL, o.Registry = a.URL, a.Registry.Host
	c, err := v.client(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// keychain is v's credential with password pass.
func (v vendor) keychain(pass string) authn.Keychain {
	return staticKeychain{authn.AuthConfig{Username: v.user, Password: pass}}
}

func repoOf(t *testing.T, s *registrytest.Server, repo string) name.Repository {
	t.Helper()
	r, err := name.NewRepository(s.Ref(repo))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ---- content ----

var (
	t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// annotated is the created annotation of tag "annotated", later than its
	// config's created.
	annotated = t0.Add(100 * time.Hour)
)

// seedContent seeds team/web with a tag of each kind: a single image, an index
// with attestations, a 32-bit arm image, an index with a created annotation, an
// alias, Docker media types, and an image whose created annotation differs from
// its config's.
func seedContent(t *testing.T, s *registrytest.Server) {
	t.Helper()
	sc := &registrytest.Scenario{Repositories: map[string]*registrytest.Repository{"team/web": {Tags: []registrytest.TagSpec{
		{Tag: "1.0", Created: "2026-01-01T01:00:00Z", Platforms: []string{"linux/amd64"}},
		{Tag: "1.1", Created: "2026-01-01T02:00:00Z", Platforms: []string{"linux/amd64", "linux/arm64/v8", "linux/arm/v7"}, Attestation: true},
		{Tag: "1.2", Created: "2026-01-01T03:00:00Z", Platforms: []string{"linux/arm/v7"}},
		{Tag: "1.3", Created: "2026-01-01T04:00:00Z", Platforms: []string{"linux/arm64", "linux/amd64"}, CreatedAnnotation: true},
		{Tag: "1.4", Created: "2026-01-01T05:00:00Z", Platforms: []string{"linux/amd64"}, Docker: true, Index: true},
		{Tag: "latest", SameAs: "1.1"},
	}}}}
	if err := s.SeedScenario(sc); err != nil {
		t.Fatal(err)
	}
	img := registrytest.Image(t0.Add(6*time.Hour), "linux/arm64", registrytest.WithSeed("annotated"))
	img = mutate.Annotations(img, map[string]string{"org.opencontainers.image.created": annotated.Format(time.RFC3339)}).(v1.Image)
	s.Push(t, "team/web", "annotated", img)
	for i, tag := range []string{"1.0", "1.1", "1.2", "1.3", "1.4", "latest", "annotated"} {
		s.SetPushed("team/web", tag, t0.Add(time.Duration(24+i)*time.Hour+123456789*time.Nanosecond))
	}
}

// seedMany seeds repo with n single-image tags 1.0.0 ... 1.0.<n-1>.
func seedMany(t testing.TB, s *registrytest.Server, repo string, n int) {
	t.Helper()
	sc := &registrytest.Scenario{Repositories: map[string]*registrytest.Repository{repo: {
		Generate: &registrytest.Generate{Count: n, Format: "1.0.%d", Created: "2026-01-01T00:00:00Z", Interval: "1m",
			Platforms: []string{"linux/amd64"}}}}}
	if err := s.SeedScenario(sc); err != nil {
		t.Fatal(err)
	}
}

// truth is what the OCI protocol says of a tag, as resolve's inspect computes
// it, and the registry's push time.
type truth struct {
	digest            v1.Hash
	mediaType         types.MediaType
	platforms         []resolve.Platform
	platformManifests []v1.Hash
	// created is the index's created annotation, or the image's build time
	// (annotation, else config).
	created time.Time
	pushed  time.Time
	// arm is a single image of 32-bit arm.
	arm bool
}

// oci reads every tag of repo through the OCI protocol (not through s's
// counters' ManifestGet of the test: call it before ResetCounts).
func oci(t *testing.T, s *registrytest.Server, repo string) map[string]truth {
	t.Helper()
	ctx := context.Background()
	r, err := resolve.NewRemote(resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	descs, err := s.Describe(repo)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]truth{}
	for _, d := range descs {
		m, err := r.Manifest(ctx, repoOf(t, s, repo), d.Tag)
		if err != nil {
			t.Fatal(err)
		}
		tr := truth{digest: m.Digest, mediaType: m.MediaType, pushed: d.Pushed}
		if m.IsIndex() {
			idx, err := v1.ParseIndexManifest(bytes.NewReader(m.Raw))
			if err != nil {
				t.Fatal(err)
			}
			tr.created = created(idx.Annotations)
			type pd struct {
				p resolve.Platform
				d v1.Hash
			}
			var pds []pd
			for _, c := range idx.Manifests {
				if p := resolve.PlatformOf(c.Platform); c.Platform != nil && !p.IsUnknown() && c.MediaType.IsImage() {
					pds = append(pds, pd{p, c.Digest})
				}
			}
			slices.SortFunc(pds, func(a, b pd) int { return strings.Compare(a.p.String(), b.p.String()) })
			for _, x := range pds {
				tr.platforms, tr.platformManifests = append(tr.platforms, x.p), append(tr.platformManifests, x.d)
			}
		} else {
			man, err := v1.ParseManifest(bytes.NewReader(m.Raw))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := r.Blob(ctx, repoOf(t, s, repo), man.Config.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := v1.ParseConfigFile(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			p := resolve.PlatformOf(&v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant})
			tr.platforms, tr.platformManifests, tr.arm = []resolve.Platform{p}, []v1.Hash{m.Digest}, cfg.Architecture == "arm"
			if tr.created = created(man.Annotations); tr.created.IsZero() {
				tr.created = cfg.Created.UTC()
			}
		}
		out[d.Tag] = tr
	}
	return out
}

func created(annotations map[string]string) time.Time {
	t, err := time.Parse(time.RFC3339, annotations["org.opencontainers.image.created"])
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// byTag indexes records by tag, failing on a tag listed twice.
func byTag(t *testing.T, recs []resolve.TagRecord) map[string]resolve.TagRecord {
	t.Helper()
	m := map[string]resolve.TagRecord{}
	for _, r := range recs {
		if _, dup := m[r.Tag]; dup {
			t.Errorf("tag %s listed twice", r.Tag)
		}
		m[r.Tag] = r
	}
	return m
}

// ---- the shared behaviours of every API ----

// TestMetadataAPIs_Faults: every API answers an unusable answer with an error
// naming the API and the URL, and never a credential.
func TestMetadataAPIs_Faults(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "team/many", 250)
	foreign := "http://other.example.invalid/next?page=2"
	cases := []struct {
		name      string
		repo      string
		fault     *registrytest.APIFault
		badDigest bool // a page whose tag has a digest that does not parse
		badTag    bool // a page whose tag breaks the tag grammar
		opts      metadata.Options
		links     bool // only for APIs that follow links
		status    int  // want an *APIError with this status
		limit     string
		retry     time.Duration
		contains  []string
		maxServed int // page requests at most (0: no check)
	}{
		{name: "429", repo: "team/many", fault: &registrytest.APIFault{Kind: registrytest.APIPage, Status: 429, RetryAfter: "7"},
			status: 429, retry: 7 * time.Second, maxServed: 1},
		{name: "500 on page 2", repo: "team/many", fault: &registrytest.APIFault{Kind: registrytest.APIPage, Status: 500, Skip: 1},
			status: 500, maxServed: 2},
		{name: "unknown repository", repo: "team/nope", status: 404},
		{name: "malformed", repo: "team/many", fault: &registrytest.APIFault{Kind: registrytest.APIPage, Body: []byte(`{"results": [{"name": `)},
			status: 200, contains: []string{"malformed answer"}},
		{name: "malformed digest", repo: "team/many", badDigest: true, status: 200, contains: []string{"malformed answer", "md5:xyz"}},
		{name: "malformed tag", repo: "team/many", badTag: true, status: 200, contains: []string{"malformed answer", "not a valid tag"}},
		{name: "next on another host", repo: "team/many", links: true, fault: &registrytest.APIFault{Kind: registrytest.APIPage, NextURL: foreign},
			limit: "foreign link", contains: []string{"other.example.invalid"}, maxServed: 1},
		{name: "next loops", repo: "team/many", fault: &registrytest.APIFault{Kind: registrytest.APIPage, NextLoop: true}, limit: "link loop", maxServed: 2},
		{name: "max pages", repo: "team/many", opts: metadata.Options{MaxPages: 2}, limit: "pages", maxServed: 2},
		{name: "max tags", repo: "team/many", opts: metadata.Options{MaxTags: 150}, limit: "tags", maxServed: 2},
		{name: "max page bytes", repo: "team/many", opts: metadata.Options{MaxPageBytes: 2000}, limit: "bytes per page", maxServed: 1},
	}
	for _, v := range vendors {
		for _, c := range cases {
			if c.links && !v.links {
				continue
			}
			t.Run(v.name+"/"+c.name, func(t *testing.T) {
				a := v.server(s, t)
				if c.fault != nil {
					a.Inject(*c.fault)
				}
				if c.badDigest {
					a.Inject(registrytest.APIFault{Kind: registrytest.APIPage, Body: []byte(fmt.Sprintf(badPages[v.name], "a", "md5:xyz"))})
				}
				if c.badTag {
					a.Inject(registrytest.APIFault{Kind: registrytest.APIPage, Body: []byte(fmt.Sprintf(badPages[v.name], "-bad tag\\n", digestA))})
				}
				o := c.opts
				o.Keychain = v.keychain(secret)
				_, err := v.newClient(t, a, o).ListTagRecords(context.Background(), repoOf(t, s, c.repo))
				if err == nil {
					t.Fatal("no error")
				}
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
				checkErr(t, err, c.status, c.limit, c.retry, v.name == resolve.MetadataQuay)
				if c.status != 0 && !strings.Contains(msg, a.URL) {
					t.Errorf("error does not name the URL %s: %s", a.URL, msg)
				}
				if n := a.Count(registrytest.APIPage); c.maxServed > 0 && n > c.maxServed {
					t.Errorf("%d page requests, want at most %d", n, c.maxServed)
				}
				if n := s.Count(registrytest.ManifestGet); n != 0 {
					t.Errorf("%d manifest GETs (pulls) on the registry, want 0", n)
				}
			})
		}
	}
}

// badPages are one-tag pages of each API, with the tag's name and digest to
// fill in.
var badPages = map[string]string{
	resolve.MetadataDockerHub: `{"count":1,"next":null,"results":[{"name":"%s","digest":"%s","images":[]}]}`,
	resolve.MetadataHarbor:    `[{"digest":"%[2]s","manifest_media_type":"application/vnd.oci.image.manifest.v1+json","tags":[{"name":"%[1]s"}]}]`,
	resolve.MetadataQuay:      `{"tags":[{"name":"%s","manifest_digest":"%s","start_ts":1700000000}],"page":1,"has_additional":false}`,
}

const digestA = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

// checkErr checks err is an *APIError of status (with retry) or a *LimitError
// of limit. Quay numbers its pages: a loop shows as a repeated tag.
func checkErr(t *testing.T, err error, status int, limit string, retry time.Duration, quay bool) {
	t.Helper()
	var ae *metadata.APIError
	var le *metadata.LimitError
	switch {
	case status != 0:
		if !errors.As(err, &ae) || ae.Status != status {
			t.Fatalf("want an *APIError of status %d, got %T: %v", status, err, err)
		}
		if ae.RetryAfter != retry {
			t.Errorf("RetryAfter %s, want %s", ae.RetryAfter, retry)
		}
	case limit != "":
		if quay && limit == "link loop" {
			limit = "repeated tag"
		}
		if !errors.As(err, &le) || le.Limit != limit {
			t.Fatalf("want a *LimitError of %q, got %T: %v", limit, err, err)
		}
		if le.Repository == "" {
			t.Errorf("LimitError names no repository: %v", err)
		}
	}
}

func checkNoSecret(t *testing.T, msg string) {
	t.Helper()
	if strings.Contains(msg, secret) {
		t.Errorf("the error shows the credential: %s", msg)
	}
}

// TestMetadataAPIs_Auth: a refused credential, or none where one is needed, is
// an error that shows no credential; an answer quoting the credential is
// redacted.
func TestMetadataAPIs_Auth(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "team/many", 3)
	for _, v := range vendors {
		cases := []struct {
			name     string
			keychain authn.Keychain
			fault    *registrytest.APIFault
			status   int
		}{
			{name: "wrong password", keychain: v.keychain("wrong-" + secret), status: 401},
			{name: "anonymous", keychain: nil, status: 401},
			{name: "answer quotes the credential", keychain: v.keychain(secret), status: 500,
				fault: &registrytest.APIFault{Kind: registrytest.APIPage, Status: 500,
					Body: []byte(`{"message":"bad credential ` + secret + `"}`)}},
		}
		for _, c := range cases {
			t.Run(v.name+"/"+c.name, func(t *testing.T) {
				a := v.server(s, t, registrytest.WithAPIAuth(v.user, secret))
				if c.fault != nil {
					a.Inject(*c.fault)
				}
				_, err := v.newClient(t, a, metadata.Options{Keychain: c.keychain}).ListTagRecords(context.Background(), repoOf(t, s, "team/many"))
				var ae *metadata.APIError
				if !errors.As(err, &ae) || ae.Status != c.status {
					t.Fatalf("want an *APIError of status %d, got %T: %v", c.status, err, err)
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

// TestMetadataAPIs_Counts: 1,000 tags at 100 a page cost exactly 10 page
// requests (and one login for Hub), and no registry request.
func TestMetadataAPIs_Counts(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "big/thousand", 1000)
	descs, err := s.Describe("big/thousand")
	if err != nil {
		t.Fatal(err)
	}
	// The API servers answer from the registry without a request to it: the
	// subtests run in parallel, each checking no registry request was made.
	s.ResetCounts()
	for _, v := range vendors {
		for _, auth := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/auth=%v", v.name, auth), func(t *testing.T) {
				t.Parallel()
				var opts []registrytest.APIOption
				o := metadata.Options{}
				if auth {
					opts = append(opts, registrytest.WithAPIAuth(v.user, secret))
					o.Keychain = v.keychain(secret)
				}
				a := v.server(s, t, opts...)
				recs, err := v.newClient(t, a, o).ListTagRecords(context.Background(), repoOf(t, s, "big/thousand"))
				if err != nil {
					t.Fatal(err)
				}
				got := byTag(t, recs)
				if len(got) != len(descs) {
					t.Fatalf("%d tags, want %d", len(got), len(descs))
				}
				for _, d := range descs {
					r := got[d.Tag]
					if r.Digest.String() != d.Digest {
						t.Errorf("%s: digest %s, want %s", d.Tag, r.Digest, d.Digest)
					}
					if want := d.Pushed.Truncate(v.pushed); !r.Pushed.Equal(want) {
						t.Errorf("%s: pushed %s, want %s", d.Tag, r.Pushed, want)
					}
				}
				want := map[registrytest.APIKind]int{registrytest.APIPage: 10}
				if auth && v.name == resolve.MetadataDockerHub {
					want[registrytest.APILogin] = 1
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

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestMetadataAPIs_PageSize: the page size asked for is Options.PageSize, at
// most the API's maximum.
func TestMetadataAPIs_PageSize(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "team/many", 25)
	for _, v := range vendors {
		for _, c := range []struct{ size, pages int }{{10, 3}, {500, 1}, {0, 1}} {
			t.Run(fmt.Sprintf("%s/%d", v.name, c.size), func(t *testing.T) {
				a := v.server(s, t)
				recs, err := v.newClient(t, a, metadata.Options{PageSize: c.size}).ListTagRecords(context.Background(), repoOf(t, s, "team/many"))
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) != 25 {
					t.Errorf("%d tags, want 25", len(recs))
				}
				if n := a.Count(registrytest.APIPage); n != c.pages {
					t.Errorf("%d pages, want %d", n, c.pages)
				}
			})
		}
	}
}

// TestRedactURL: user information and secret-looking query values are
// removed.
func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://hub.docker.com/v2/x?page=2", "https://hub.docker.com/v2/x?page=2"},
		{"https://user:" + secret + "@harbor.example/api", "https://harbor.example/api"},
		{"https://x.example/a?access_token=" + secret + "&page_size=5", "https://x.example/a?access_token=%5BREDACTED%5D&page_size=5"},
		{"https://x.example/a?pageToken=abc", "https://x.example/a?pageToken=abc"},
	} {
		if got := metadata.RedactURL(c.in); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestNewClients_BaseURL: the defaults and a bad base URL.
func TestNewClients_BaseURL(t *testing.T) {
	if _, err := metadata.NewHarbor(metadata.Options{}); err == nil {
		t.Error("NewHarbor without a registry or base URL: no error")
	}
	for _, v := range vendors {
		if _, err := v.client(metadata.Options{BaseURL: "ftp://x", Registry: "r.example"}); err == nil {
			t.Errorf("%s: base URL ftp://x: no error", v.name)
		}
		_, err := v.client(metadata.Options{BaseURL: "https://u:" + secret + "@r.example"})
		if err == nil {
			t.Errorf("%s: base URL with credentials: no error", v.name)
		} else {
			checkNoSecret(t, err.Error())
		}
		c, err := v.client(metadata.Options{Registry: "r.example"})
		if err != nil || c.Name() != v.name {
			t.Errorf("%s: %v, name %q", v.name, err, c.Name())
		}
	}
}

// ---- shapes ----

// checkShape compares the shape of the answer to GET u with a sample.
func checkShape(t *testing.T, sample, u string, hdr http.Header, wantStatus int, free ...string) {
	t.Helper()
	want, err := os.ReadFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != wantStatus {
		t.Fatalf("GET %s: status %d, want %d: %s", u, resp.StatusCode, wantStatus, got)
	}
	compareShape(t, sample, want, got, free...)
}

func compareShape(t *testing.T, sample string, want, got []byte, free ...string) {
	t.Helper()
	diffs, err := registrytest.ShapeDiff(want, got, free...)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Errorf("%s: %s", sample, d)
	}
	if len(diffs) > 0 {
		t.Logf("answer: %s", got)
	}
}
