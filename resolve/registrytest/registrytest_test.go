package registrytest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func repoRef(t *testing.T, s *registrytest.Server, repo string) name.Repository {
	t.Helper()
	r, err := name.NewRepository(s.Ref(repo))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tagRef(t *testing.T, s *registrytest.Server, repo, tag string) name.Tag {
	t.Helper()
	r, err := name.NewTag(s.Ref(repo) + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// noRetry keeps ggcr from retrying (and sleeping) on 5xx/429.
var noRetry = remote.WithRetryStatusCodes()

type errBody struct {
	Errors []struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"errors"`
}

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func errCode(t *testing.T, b []byte) string {
	t.Helper()
	var e errBody
	if err := json.Unmarshal(b, &e); err != nil || len(e.Errors) == 0 {
		t.Fatalf("not a distribution error body: %q (%v)", b, err)
	}
	return e.Errors[0].Code
}

type tagsBody struct {
	Name string   `json:"name"`
	Tags []string `json:"tags"`
}

func seedBulk(t *testing.T, s *registrytest.Server, repo string, n int) {
	t.Helper()
	s.Push(t, repo, "seed", registrytest.Image(t0, "linux/amd64"))
	d := s.Digest(t, repo, "seed")
	s.Untag(t, repo, "seed")
	for i := 0; i < n; i++ {
		s.Tag(t, repo, fmt.Sprintf("t%04d", i), d)
	}
}

func TestPaginationLinkHeaders(t *testing.T) {
	s := registrytest.New(t, registrytest.WithPageSize(100))
	start := time.Now()
	seedBulk(t, s, "bulk", 2500)
	t.Logf("seeded 2,500 tags in %v", time.Since(start))
	if s.Total() != 0 {
		t.Fatalf("seeding counted %d requests", s.Total())
	}

	tags, err := remote.List(repoRef(t, s, "bulk"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tags) != 2500 || tags[0] != "t0000" || tags[2499] != "t2499" {
		t.Fatalf("remote.List: %d tags, first %q", len(tags), tags[0])
	}
	for i := 1; i < len(tags); i++ {
		if tags[i-1] >= tags[i] {
			t.Fatalf("not sorted/unique at %d: %q %q", i, tags[i-1], tags[i])
		}
	}
	if got := s.Count(registrytest.Tags); got != 25 {
		t.Fatalf("tags requests = %d, want 25", got)
	}

	base := s.URL + "/v2/bulk/tags/list"
	cases := []struct {
		query    string
		n        int
		first    string
		wantLink string
	}{
		{"", 100, "t0000", `</v2/bulk/tags/list?last=t0099&n=100>; rel="next"`},
		{"?n=1000", 100, "t0000", `</v2/bulk/tags/list?last=t0099&n=100>; rel="next"`},
		{"?n=10", 10, "t0000", `</v2/bulk/tags/list?last=t0009&n=10>; rel="next"`},
		{"?n=10&last=t0100", 10, "t0101", `</v2/bulk/tags/list?last=t0110&n=10>; rel="next"`},
		{"?last=t2449", 50, "t2450", ""},
		{"?last=t0099x", 100, "t0100", `</v2/bulk/tags/list?last=t0199&n=100>; rel="next"`}, // absent last: exclusive bound
		{"?n=100&last=t2399", 100, "t2400", ""},                                             // exactly the rest: no Link
		{"?last=zzz", 0, "", ""},
		{"?n=0", 0, "", ""},
	}
	for _, c := range cases {
		resp, b := get(t, base+c.query, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d %s", c.query, resp.StatusCode, b)
		}
		var tb tagsBody
		if err := json.Unmarshal(b, &tb); err != nil {
			t.Fatal(err)
		}
		if tb.Name != "bulk" || len(tb.Tags) != c.n || tb.Tags == nil {
			t.Fatalf("%s: name %q, %d tags (nil=%v), want %d", c.query, tb.Name, len(tb.Tags), tb.Tags == nil, c.n)
		}
		if c.n > 0 && tb.Tags[0] != c.first {
			t.Errorf("%s: first tag %q, want %q", c.query, tb.Tags[0], c.first)
		}
		if got := resp.Header.Get("Link"); got != c.wantLink {
			t.Errorf("%s: Link %q, want %q", c.query, got, c.wantLink)
		}
	}
	for _, q := range []string{"?n=-1", "?n=abc"} {
		resp, b := get(t, base+q, nil)
		if resp.StatusCode != 400 || errCode(t, b) != "PAGINATION_NUMBER_INVALID" {
			t.Errorf("%s: %d %s", q, resp.StatusCode, b)
		}
	}
	resp, b := get(t, s.URL+"/v2/nope/tags/list", nil)
	if resp.StatusCode != 404 || errCode(t, b) != "NAME_UNKNOWN" {
		t.Errorf("unknown repo: %d %s", resp.StatusCode, b)
	}
}

func TestNoPageSizeReturnsEverything(t *testing.T) {
	s := registrytest.New(t)
	seedBulk(t, s, "bulk", 300)
	resp, b := get(t, s.URL+"/v2/bulk/tags/list", nil)
	var tb tagsBody
	_ = json.Unmarshal(b, &tb)
	if resp.StatusCode != 200 || len(tb.Tags) != 300 || resp.Header.Get("Link") != "" {
		t.Fatalf("%d, %d tags, Link %q", resp.StatusCode, len(tb.Tags), resp.Header.Get("Link"))
	}
	// A client's n still paginates, as in distribution.
	resp, _ = get(t, s.URL+"/v2/bulk/tags/list?n=250", nil)
	if got := resp.Header.Get("Link"); got != `</v2/bulk/tags/list?last=t0249&n=250>; rel="next"` {
		t.Fatalf("Link %q", got)
	}
}

func TestRejectPageSize(t *testing.T) {
	s := registrytest.New(t, registrytest.WithRejectPageSize(), registrytest.WithPageSize(50))
	seedBulk(t, s, "bulk", 120)

	resp, b := get(t, s.URL+"/v2/bulk/tags/list?n=10", nil)
	if resp.StatusCode != 400 || errCode(t, b) != "PAGINATION_NUMBER_INVALID" {
		t.Fatalf("with n: %d %s", resp.StatusCode, b)
	}
	// ggcr always sends n: the listing fails.
	_, err := remote.List(repoRef(t, s, "bulk"))
	var terr *transport.Error
	if !errors.As(err, &terr) || terr.StatusCode != 400 {
		t.Fatalf("remote.List: %v", err)
	}

	// Without n: server pages, Links carry only last; following them gets everything.
	var all []string
	next := "/v2/bulk/tags/list"
	pages := 0
	for next != "" {
		resp, b := get(t, s.URL+next, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", next, resp.StatusCode, b)
		}
		var tb tagsBody
		_ = json.Unmarshal(b, &tb)
		all = append(all, tb.Tags...)
		pages++
		next = ""
		if l := resp.Header.Get("Link"); l != "" {
			if strings.Contains(l, "n=") {
				t.Fatalf("Link carries n: %q", l)
			}
			next = l[1:strings.Index(l, ">")]
		}
	}
	if len(all) != 120 || pages != 3 {
		t.Fatalf("%d tags in %d pages", len(all), pages)
	}
}

func TestBasicAuth(t *testing.T) {
	s := registrytest.New(t, registrytest.WithBasicAuth("alice", "s3cret"))
	s.Push(t, "app", "1.0.0", registrytest.Image(t0, "linux/amd64"))

	tags, err := remote.List(repoRef(t, s, "app"), remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"}))
	if err != nil || len(tags) != 1 {
		t.Fatalf("good creds: %v %v", tags, err)
	}
	if _, err := remote.Image(tagRef(t, s, "app", "1.0.0"), remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"})); err != nil {
		t.Fatalf("good creds image: %v", err)
	}
	for _, a := range []authn.Authenticator{&authn.Basic{Username: "alice", Password: "wrong"}, authn.Anonymous} {
		_, err := remote.List(repoRef(t, s, "app"), remote.WithAuth(a))
		var terr *transport.Error
		if !errors.As(err, &terr) || terr.StatusCode != 401 {
			t.Fatalf("bad creds: %v", err)
		}
	}
	resp, b := get(t, s.URL+"/v2/", nil)
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != `Basic realm="registrytest"` || errCode(t, b) != "UNAUTHORIZED" {
		t.Fatalf("challenge: %d %q %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), b)
	}
	var sawAuth, sawNoAuth bool
	for _, r := range s.Requests() {
		if r.Authorization {
			sawAuth = true
		} else {
			sawNoAuth = true
		}
	}
	if !sawAuth || !sawNoAuth {
		t.Fatalf("Authorization flags: with %v without %v", sawAuth, sawNoAuth)
	}
}

func TestBearerAuth(t *testing.T) {
	s := registrytest.New(t, registrytest.WithBearerAuth("bob", "pa55"))
	s.Push(t, "team/app", "1.0.0", registrytest.Image(t0, "linux/amd64"))
	good := remote.WithAuth(&authn.Basic{Username: "bob", Password: "pa55"})

	tags, err := remote.List(repoRef(t, s, "team/app"), good)
	if err != nil || len(tags) != 1 {
		t.Fatalf("good creds: %v %v", tags, err)
	}
	if s.Count(registrytest.Token) != 1 || s.Count(registrytest.Tags) != 1 {
		t.Fatalf("counts %v", s.Counts())
	}
	for _, a := range []authn.Authenticator{&authn.Basic{Username: "bob", Password: "nope"}, authn.Anonymous} {
		_, err := remote.List(repoRef(t, s, "team/app"), remote.WithAuth(a))
		var terr *transport.Error
		if !errors.As(err, &terr) || terr.StatusCode != 401 {
			t.Fatalf("bad creds %v: %v", a, err)
		}
	}

	// The protocol by hand.
	resp, _ := get(t, s.URL+"/v2/team/app/tags/list", nil)
	want := fmt.Sprintf(`Bearer realm="%s/token",service="registrytest",scope="repository:team/app:pull"`, s.URL)
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != want {
		t.Fatalf("challenge %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	resp, _ = get(t, s.URL+"/token?service=registrytest&scope=repository:team/app:pull", nil)
	if resp.StatusCode != 401 {
		t.Fatalf("anonymous token: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/token?service=registrytest&scope=repository:team/app:pull", nil)
	req.SetBasicAuth("bob", "pa55")
	tr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
		ExpiresIn   int    `json:"expires_in"`
	}
	if err := json.NewDecoder(tr.Body).Decode(&tok); err != nil || tok.Token == "" || tok.AccessToken != tok.Token || tok.ExpiresIn != 300 {
		t.Fatalf("token %+v %v", tok, err)
	}
	tr.Body.Close()
	bearer := map[string]string{"Authorization": "Bearer " + tok.Token}
	if resp, b := get(t, s.URL+"/v2/team/app/tags/list", bearer); resp.StatusCode != 200 {
		t.Fatalf("with token: %d %s", resp.StatusCode, b)
	}
	basic := map[string]string{"Authorization": "Basic Ym9iOnBhNTU="} // bob:pa55, not a token
	if resp, _ := get(t, s.URL+"/v2/team/app/tags/list", basic); resp.StatusCode != 401 {
		t.Fatalf("basic on registry: %d", resp.StatusCode)
	}
	s.RevokeTokens()
	if resp, _ := get(t, s.URL+"/v2/team/app/tags/list", bearer); resp.StatusCode != 401 {
		t.Fatalf("revoked token: %d", resp.StatusCode)
	}
}

func TestFaults(t *testing.T) {
	s := registrytest.New(t)
	img := registrytest.Image(t0, "linux/amd64")
	s.Push(t, "app", "1.0.0", img)
	d, _ := img.Digest()

	s.Inject(registrytest.Fault{Kind: registrytest.Tags, Status: 429, RetryAfter: "7", Times: 2})
	for i := 0; i < 2; i++ {
		resp, b := get(t, s.URL+"/v2/app/tags/list", nil)
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" || errCode(t, b) != "TOOMANYREQUESTS" {
			t.Fatalf("try %d: %d %q %s", i, resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
	}
	if resp, b := get(t, s.URL+"/v2/app/tags/list", nil); resp.StatusCode != 200 {
		t.Fatalf("after Times: %d %s", resp.StatusCode, b)
	}

	// ggcr sees the 429 as a transport error.
	s.Inject(registrytest.Fault{Kind: registrytest.Tags, Status: 429, Times: 1})
	_, err := remote.List(repoRef(t, s, "app"), noRetry)
	var terr *transport.Error
	if !errors.As(err, &terr) || terr.StatusCode != 429 {
		t.Fatalf("remote.List: %v", err)
	}

	// Forever, by path; other paths unaffected; cleared.
	s.Inject(registrytest.Fault{Kind: registrytest.ManifestGet, PathContains: d.String(), Status: 503})
	for i := 0; i < 3; i++ {
		resp, b := get(t, s.URL+"/v2/app/manifests/"+d.String(), nil)
		if resp.StatusCode != 503 || errCode(t, b) != "UNAVAILABLE" {
			t.Fatalf("503 fault: %d %s", resp.StatusCode, b)
		}
	}
	if resp, _ := get(t, s.URL+"/v2/app/manifests/1.0.0", nil); resp.StatusCode != 200 {
		t.Fatalf("other path: %d", resp.StatusCode)
	}
	s.ClearFaults()
	if resp, _ := get(t, s.URL+"/v2/app/manifests/"+d.String(), nil); resp.StatusCode != 200 {
		t.Fatalf("cleared: %d", resp.StatusCode)
	}
	faulted := 0
	for _, r := range s.Requests() {
		if r.Fault {
			faulted++
		}
	}
	if faulted != 6 {
		t.Fatalf("faulted requests = %d, want 6", faulted)
	}
}

func TestCountersByKind(t *testing.T) {
	s := registrytest.New(t)
	s.Push(t, "app", "1.0.0", registrytest.Image(t0, "linux/amd64"))
	s.PushIndex(t, "app", "2.0.0", registrytest.Index(t0, []string{"linux/amd64", "linux/arm64"}))
	if s.Total() != 0 {
		t.Fatalf("seeding counted: %v", s.Counts())
	}

	p, err := remote.NewPuller()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.List(ctx, repoRef(t, s, "app")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Head(ctx, tagRef(t, s, "app", "1.0.0")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Head(ctx, tagRef(t, s, "app", "2.0.0")); err != nil {
		t.Fatal(err)
	}
	desc, err := p.Get(ctx, tagRef(t, s, "app", "1.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := desc.Image()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := img.ConfigFile(); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, s.URL+"/v2/_catalog", nil); resp.StatusCode != 200 {
		t.Fatal("catalog")
	}

	want := map[registrytest.Kind]int{
		registrytest.Ping: 1, registrytest.Tags: 1, registrytest.ManifestHead: 2,
		registrytest.ManifestGet: 1, registrytest.BlobGet: 1, registrytest.Other: 1,
	}
	got := s.Counts()
	for _, k := range registrytest.Kinds {
		if got[k] != want[k] {
			t.Errorf("%s: %d, want %d (all: %v)", k, got[k], want[k], got)
		}
	}
	if s.Total() != 7 || len(s.Requests()) != 7 {
		t.Errorf("total %d, requests %d", s.Total(), len(s.Requests()))
	}
	for _, r := range s.Requests() {
		if r.Status != 200 || r.At.IsZero() || r.Method == "" {
			t.Errorf("request %+v", r)
		}
		if r.Kind == registrytest.ManifestHead && r.Repo != "app" {
			t.Errorf("repo %q", r.Repo)
		}
	}

	s.ResetCounts()
	s.Push(t, "app", "3.0.0", registrytest.Image(t0, "linux/amd64"))
	s.Tag(t, "app", "3", "3.0.0")
	if s.Total() != 0 || len(s.Requests()) != 0 || len(s.Counts()) != 0 {
		t.Fatalf("after reset + seeding: %v", s.Counts())
	}
}

func TestContent(t *testing.T) {
	created := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	idx := registrytest.Index(created, []string{"linux/amd64", "linux/arm/v7"},
		registrytest.WithAttestation(), registrytest.WithCreatedAnnotation(), registrytest.WithSeed("x"))
	s := registrytest.New(t)
	s.PushIndex(t, "app", "1", idx)

	got, err := remote.Index(tagRef(t, s, "app", "1"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := got.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex || im.Annotations[registrytest.AnnotationCreated] != "2026-03-02T10:00:00Z" {
		t.Fatalf("index %s %v", im.MediaType, im.Annotations)
	}
	if len(im.Manifests) != 4 {
		t.Fatalf("%d manifests", len(im.Manifests))
	}
	var plats []string
	for i, m := range im.Manifests {
		plats = append(plats, m.Platform.String())
		if i >= 2 {
			if m.Annotations[registrytest.AnnotationReferenceType] != registrytest.AttestationManifest ||
				m.Annotations[registrytest.AnnotationReferenceDig] != im.Manifests[i-2].Digest.String() {
				t.Errorf("attestation %d: %v", i, m.Annotations)
			}
			continue
		}
		img, err := got.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Platform().String() != m.Platform.String() || !cf.Created.Time.Equal(created) {
			t.Errorf("config %s created %v", cf.Platform(), cf.Created)
		}
	}
	if strings.Join(plats, " ") != "linux/amd64 linux/arm/v7 unknown/unknown unknown/unknown" {
		t.Fatalf("platforms %v", plats)
	}

	// Seeds make content deterministic; no seed makes it random.
	d1, _ := registrytest.Image(t0, "linux/amd64", registrytest.WithSeed("a")).Digest()
	d2, _ := registrytest.Image(t0, "linux/amd64", registrytest.WithSeed("a")).Digest()
	d3, _ := registrytest.Image(t0, "linux/amd64").Digest()
	d4, _ := registrytest.Image(t0, "linux/amd64").Digest()
	if d1 != d2 || d3 == d4 {
		t.Fatalf("determinism: %s %s %s %s", d1, d2, d3, d4)
	}
	if _, err := registrytest.NewImage(t0, "linux"); err == nil {
		t.Fatal("bad platform accepted")
	}
	dimg := registrytest.Image(t0, "linux/arm64", registrytest.WithDockerMediaTypes(), registrytest.WithCreatedAnnotation())
	if mt, _ := dimg.MediaType(); mt != types.DockerManifestSchema2 {
		t.Fatalf("docker media type %s", mt)
	}
	if m, _ := dimg.Manifest(); m.Annotations[registrytest.AnnotationCreated] != "2026-01-01T00:00:00Z" {
		t.Fatalf("image annotation %v", m.Annotations)
	}
}

// getWithin GETs url with a deadline: the error, nil when answered.
func getWithin(url string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	return err
}

// The latency delays every answer, and SetLatency changes it from the next
// request on. A delay is shown by a lower bound (a request can be slower than its
// latency on a loaded machine, never faster) and by a deadline it makes a request
// miss; no latency by a request answered within a deadline that an hour's
// latency, set just before, could not have been.
func TestLatency(t *testing.T) {
	s := registrytest.New(t, registrytest.WithLatency(80*time.Millisecond))
	start := time.Now()
	get(t, s.URL+"/v2/", nil)
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Fatalf("latency %v", d)
	}
	s.SetLatency(time.Hour)
	if err := getWithin(s.URL+"/v2/", 100*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with an hour's latency: %v, want the client's deadline", err)
	}
	s.SetLatency(0)
	if err := getWithin(s.URL+"/v2/", 30*time.Second); err != nil {
		t.Fatalf("after SetLatency(0): %v", err)
	}
	if n := s.Total(); n != 3 {
		t.Errorf("%d requests counted, want 3", n)
	}
}

// OnRequest is told of each request, counted, before it is answered: a test holds
// a request there, and stops being told once it sets nil.
func TestOnRequest(t *testing.T) {
	s := registrytest.New(t)
	type seen struct {
		r     registrytest.Request
		total int
	}
	got := make(chan seen, 4)
	release := make(chan struct{})
	s.OnRequest(func(r registrytest.Request, total int) {
		got <- seen{r, total}
		if r.Kind == registrytest.Tags {
			<-release
		}
	})
	get(t, s.URL+"/v2/", nil)
	if g := <-got; g.r.Kind != registrytest.Ping || g.total != 1 {
		t.Errorf("told %+v, want the ping as request 1", g)
	}
	answered := make(chan error, 1)
	go func() { answered <- getWithin(s.URL+"/v2/app/tags/list", 30*time.Second) }()
	if g := <-got; g.r.Kind != registrytest.Tags || g.r.Repo != "app" || g.total != 2 || g.r.Status != 0 {
		t.Errorf("told %+v, want the tag list of app as request 2, not yet answered", g)
	}
	select {
	case err := <-answered:
		t.Fatalf("answered (%v) while OnRequest held it", err)
	default:
	}
	close(release)
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	s.OnRequest(nil)
	get(t, s.URL+"/v2/", nil)
	if len(got) != 0 || s.Total() != 3 {
		t.Errorf("told of %d requests after OnRequest(nil); %d counted", len(got), s.Total())
	}
}

func TestTLS(t *testing.T) {
	s := registrytest.New(t, registrytest.WithTLS())
	if !strings.HasPrefix(s.URL, "https://127.0.0.1:") || len(s.CACertPEM) == 0 {
		t.Fatalf("URL %s, CA %d bytes", s.URL, len(s.CACertPEM))
	}
	resp, err := s.Client().Get(s.URL + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || s.Count(registrytest.Ping) != 1 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if _, err := http.Get(s.URL + "/v2/"); err == nil {
		t.Fatal("untrusted client connected")
	}
}

func demoPath() string { return filepath.Join("..", "..", "testdata", "registry", "demo.yaml") }

func TestScenarioDemo(t *testing.T) {
	sc, err := registrytest.LoadScenario(demoPath())
	if err != nil {
		t.Fatal(err)
	}
	a := registrytest.New(t)
	if err := a.SeedScenario(sc); err != nil {
		t.Fatal(err)
	}
	if a.Total() != 0 {
		t.Fatalf("SeedScenario counted %v", a.Counts())
	}

	// Over HTTP, through bearer auth, with ggcr: same digests.
	b := registrytest.New(t, registrytest.WithBearerAuth("u", "p"))
	if err := registrytest.SeedRemote(context.Background(), b.URL, sc, remote.WithAuth(&authn.Basic{Username: "u", Password: "p"})); err != nil {
		t.Fatal(err)
	}
	if b.Count(registrytest.Token) == 0 {
		t.Fatal("SeedRemote did not go over HTTP")
	}
	want := map[string][]string{
		"demo/web":    {"1.0.0", "1.1.0", "1.2.0", "1.3.0-rc.1", "latest"},
		"demo/worker": {"2026.01.12", "2026.02.16", "2026.03.03", "2026.03.10"},
		"demo/batch":  {"1", "10", "11", "12", "2", "3", "4", "5", "6", "7", "8", "9"},
	}
	for repo, tags := range want {
		got, err := remote.List(repoRef(t, a, repo))
		if err != nil || strings.Join(got, ",") != strings.Join(tags, ",") {
			t.Fatalf("%s: %v %v", repo, got, err)
		}
		for _, tag := range tags {
			if da, db := a.Digest(t, repo, tag), b.Digest(t, repo, tag); da != db {
				t.Errorf("%s:%s: %s vs %s", repo, tag, da, db)
			}
		}
	}
	if a.Digest(t, "demo/web", "latest") != a.Digest(t, "demo/web", "1.2.0") {
		t.Error("latest is not 1.2.0")
	}
	if a.Digest(t, "demo/batch", "1") == a.Digest(t, "demo/batch", "2") {
		t.Error("generated tags share a digest")
	}

	// 1.2.0: arm64 only, plus an attestation.
	idx, err := remote.Index(tagRef(t, a, "demo/web", "1.2.0"))
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	if len(im.Manifests) != 2 || im.Manifests[0].Platform.String() != "linux/arm64" || im.Manifests[1].Platform.String() != "unknown/unknown" {
		t.Fatalf("1.2.0 manifests %+v", im.Manifests)
	}
	// batch: single-platform images, one a day.
	desc, err := remote.Get(tagRef(t, a, "demo/batch", "12"))
	if err != nil {
		t.Fatal(err)
	}
	if !desc.MediaType.IsImage() {
		t.Fatalf("batch media type %s", desc.MediaType)
	}
	img, _ := desc.Image()
	cf, _ := img.ConfigFile()
	if want := time.Date(2026, 1, 12, 0, 0, 0, 0, time.UTC); !cf.Created.Time.Equal(want) || cf.Platform().String() != "linux/amd64" {
		t.Fatalf("batch 12: %v %s", cf.Created, cf.Platform())
	}
}

func TestScenarioErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"repositories:\n  a/b:\n    tags:\n      - {tag: x, created: \"2026-01-01T00:00:00Z\", platforms: [linux/amd64], colour: red}\n", "colour"},
		{"repositories:\n  a/b:\n    tagz: []\n", "tagz"},
		{"repos: {}\n", "repos"},
		{"", "empty scenario"},
		{"repositories: {}\n", "at least one repository"},
		{"repositories:\n  a/b:\n    tags:\n      - {tag: x, platforms: [linux/amd64]}\n", "created: required"},
		{"repositories:\n  a/b:\n    tags:\n      - {tag: x, created: yesterday, platforms: [linux/amd64]}\n", `created "yesterday"`},
		{"repositories:\n  a/b:\n    tags:\n      - {tag: x, created: \"2026-01-01T00:00:00Z\", platforms: [linux]}\n", `platform "linux"`},
		{"repositories:\n  a/b:\n    tags:\n      - {tag: x, created: \"2026-01-01T00:00:00Z\"}\n", "platforms: at least one"},
		{"repositories:\n  a/b:\n    tags:\n      - {tag: latest, sameAs: nope}\n", `sameAs "nope": no such tag`},
		{"repositories:\n  a/b:\n    tags:\n      - {tag: a, sameAs: b}\n      - {tag: b, sameAs: a}\n", "sameAs loop"},
		{"repositories:\n  a/b:\n    tags:\n      - {tag: latest, sameAs: x, platforms: [linux/amd64]}\n", "cannot be combined"},
		{"repositories:\n  a/b:\n    tags:\n      - {tag: \"bad tag\", created: \"2026-01-01T00:00:00Z\", platforms: [linux/amd64]}\n", "not a valid tag"},
		{"repositories:\n  a/b:\n    generate: {count: 2, format: \"1.0.%d\", created: \"2026-01-01T00:00:00Z\", platforms: [linux/amd64]}\n    tags:\n      - {tag: \"1.0.1\", created: \"2026-01-01T00:00:00Z\", platforms: [linux/amd64]}\n", `"1.0.1" defined twice`},
		{"repositories:\n  a/b:\n    generate: {count: 2, format: \"1.0\", created: \"2026-01-01T00:00:00Z\", platforms: [linux/amd64]}\n", "exactly one %d"},
		{"repositories:\n  a/b:\n    generate: {count: 2, format: \"%d\", created: \"2026-01-01T00:00:00Z\", interval: soon, platforms: [linux/amd64]}\n", `interval "soon"`},
		{"repositories:\n  A/B:\n    tags:\n      - {tag: x, created: \"2026-01-01T00:00:00Z\", platforms: [linux/amd64]}\n", "bad repository name"},
	}
	dir := t.TempDir()
	for i, c := range cases {
		p := filepath.Join(dir, fmt.Sprintf("s%d.yaml", i))
		if err := os.WriteFile(p, []byte(c.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := registrytest.LoadScenario(p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("case %d: error %v, want it to mention %q", i, err, c.want)
		}
	}
	if _, err := registrytest.LoadScenario(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestScenarioGenerateBulk(t *testing.T) {
	sc, err := registrytest.ParseScenario([]byte(`
repositories:
  big/app:
    generate: {count: 1000, format: "1.0.%d", created: "2026-01-01T00:00:00Z", interval: 1h, platforms: [linux/amd64, linux/arm64]}
    tags:
      - {tag: latest, sameAs: "1.0.999"}
      - {tag: stable, sameAs: latest}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := registrytest.New(t, registrytest.WithPageSize(100))
	start := time.Now()
	if err := s.SeedScenario(sc); err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded 1,000 generated index tags in %v", time.Since(start))
	tags, err := remote.List(repoRef(t, s, "big/app"))
	if err != nil || len(tags) != 1002 {
		t.Fatalf("%d tags, %v", len(tags), err)
	}
	if s.Digest(t, "big/app", "stable") != s.Digest(t, "big/app", "1.0.999") {
		t.Fatal("stable != 1.0.999")
	}
	idx, err := remote.Index(tagRef(t, s, "big/app", "1.0.999"))
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	img, _ := idx.Image(im.Manifests[1].Digest)
	cf, _ := img.ConfigFile()
	if want := t0.Add(999 * time.Hour); !cf.Created.Time.Equal(want) || cf.Config.Labels[registrytest.LabelVersion] != "1.0.999" {
		t.Fatalf("created %v labels %v", cf.Created, cf.Config.Labels)
	}
	var _ v1.Image = img
}

func TestSeedSharedRepositories(t *testing.T) {
	s := registrytest.New(t)
	repos := s.SeedSharedRepositories(t)
	if len(repos) != 20 || repos[0] != "org/svc-00" || repos[19] != "org/svc-19" {
		t.Fatalf("repositories %v", repos)
	}
	tags, err := remote.List(repoRef(t, s, "org/svc-07"))
	if err != nil || len(tags) != 100 {
		t.Fatalf("%d tags, %v", len(tags), err)
	}
	idx, err := remote.Index(tagRef(t, s, "org/svc-07", "1.0.99"))
	if err != nil {
		t.Fatal(err)
	}
	if im, err := idx.IndexManifest(); err != nil || len(im.Manifests) != 2 {
		t.Fatalf("index of 1.0.99: %v, %v; want linux/amd64 and linux/arm64", im, err)
	}
}

func TestHostileFaults(t *testing.T) {
	s := registrytest.New(t)
	s.Push(t, "app", "1.0.0", registrytest.Image(t0, "linux/amd64"))

	t.Run("PassThrough replaces headers of the real answer", func(t *testing.T) {
		lie := "sha256:" + strings.Repeat("a", 64)
		s.Inject(registrytest.Fault{Kind: registrytest.ManifestHead, PassThrough: true, Times: 1,
			Header: http.Header{"Docker-Content-Digest": {lie}}})
		req, _ := http.NewRequest(http.MethodHead, s.URL+"/v2/app/manifests/1.0.0", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Docker-Content-Digest") != lie {
			t.Fatalf("HEAD: %d, digest %q", resp.StatusCode, resp.Header.Get("Docker-Content-Digest"))
		}
	})

	t.Run("Body with TagsBody, counted in BytesWritten", func(t *testing.T) {
		body := registrytest.TagsBody("app", "ok", "../../x", "a\nb")
		s.Inject(registrytest.Fault{Kind: registrytest.Tags, Body: body, Times: 1})
		s.ResetCounts()
		resp, b := get(t, s.URL+"/v2/app/tags/list", nil)
		var l struct{ Tags []string }
		if err := json.Unmarshal(b, &l); err != nil || resp.StatusCode != 200 || len(l.Tags) != 3 || l.Tags[2] != "a\nb" {
			t.Fatalf("tags: %d %s %v", resp.StatusCode, b, err)
		}
		if r := s.Requests(); len(r) != 1 || !r[0].Fault || r[0].BytesWritten != int64(len(body)) {
			t.Fatalf("requests = %+v, want one faulted with %d bytes written", r, len(body))
		}
	})

	t.Run("GzipBomb expands to a valid tag list", func(t *testing.T) {
		bomb := registrytest.GzipBomb("app", 8<<20)
		s.Inject(registrytest.Fault{Kind: registrytest.Tags, Body: bomb, Times: 1,
			Header: http.Header{"Content-Encoding": {"gzip"}}})
		resp, b := get(t, s.URL+"/v2/app/tags/list", nil) // net/http decompresses
		var l struct{ Tags []string }
		if err := json.Unmarshal(b, &l); err != nil || len(b) < 8<<20 || len(l.Tags) != 1 || len(bomb) > 16<<10 {
			t.Fatalf("bomb: %d, %d bytes compressed, %d expanded, %v", resp.StatusCode, len(bomb), len(b), err)
		}
	})

	t.Run("Hang and HangBody hold until the client goes away", func(t *testing.T) {
		for _, f := range []registrytest.Fault{
			{Kind: registrytest.Tags, Hang: true, Times: 1},
			{Kind: registrytest.Tags, Body: registrytest.TagsBody("app"), HangBody: true, Times: 1},
			{Kind: registrytest.ManifestGet, PassThrough: true, HangBody: true, Times: 1},
		} {
			s.Inject(f)
			path := "/v2/app/tags/list"
			if f.Kind == registrytest.ManifestGet {
				path = "/v2/app/manifests/1.0.0"
			}
			s.ResetCounts()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
			resp, err := http.DefaultClient.Do(req)
			gotHeader := err == nil
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			cancel()
			// Held, not answered: the client's own deadline ended the request...
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%+v: %v, want the client's deadline", f, err)
			}
			if gotHeader != (f.HangBody) {
				t.Errorf("%+v: header received = %v", f, gotHeader)
			}
			// ...and the server's log shows what it had answered: nothing (Hang),
			// or the header and no byte of the body (HangBody; a PassThrough one
			// writes the real body into the closed connection once released, so
			// its bytes are not counted here). The handler's release when the
			// client went away is checked by Close at the end of the test, which
			// waits for every handler.
			wantStatus := 0
			if f.HangBody {
				wantStatus = http.StatusOK
			}
			if r := s.Requests(); len(r) != 1 || !r[0].Fault || r[0].Status != wantStatus || (!f.PassThrough && r[0].BytesWritten != 0) {
				t.Errorf("%+v: request log %+v, want one faulted request, status %d, no body byte", f, r, wantStatus)
			}
		}
	})
}
