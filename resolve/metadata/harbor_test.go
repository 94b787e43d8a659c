package metadata_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/metadata"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// The clients are metadata APIs; Harbor also gives build times.
var (
	_ resolve.MetadataAPI = (*metadata.DockerHub)(nil)
	_ resolve.MetadataAPI = (*metadata.Quay)(nil)
	_ resolve.BuildTimer  = (*metadata.Harbor)(nil)
)

// TestHarbor_Records: one record per tag, with the digest, manifest media
// type, platforms and push time of the OCI protocol; the build time exactly as
// the OCI protocol reads it (an image's annotation, else its config's; an
// index's annotation, else none); no platforms for a 32-bit arm image (Harbor
// does not record the variant).
func TestHarbor_Records(t *testing.T) {
	s := registrytest.New(t)
	seedContent(t, s)
	want := oci(t, s, "team/web")
	a := s.HarborAPI(t, registrytest.WithAPIAuth("robot$ci", secret))
	s.ResetCounts()
	h, err := metadata.NewHarbor(metadata.Options{BaseURL: a.URL, Keychain: vendors[1].keychain(secret), PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := h.ListTagRecords(context.Background(), repoOf(t, s, "team/web"))
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
		wp, wm := w.platforms, w.platformManifests
		if w.arm {
			wp, wm = nil, nil
		}
		if !slices.Equal(r.Platforms, wp) || !slices.Equal(r.PlatformManifests, wm) {
			t.Errorf("%s: platforms %v %v, want %v %v", tag, r.Platforms, r.PlatformManifests, wp, wm)
		}
		if !r.Created.Equal(w.created) {
			t.Errorf("%s: created %s, want %s", tag, r.Created, w.created)
		}
		if p := w.pushed.Truncate(time.Millisecond); !r.Pushed.Equal(p) {
			t.Errorf("%s: pushed %s, want %s", tag, r.Pushed, p)
		}
	}
	if !got["annotated"].Created.Equal(annotated) {
		t.Errorf("annotated: created %s, want the annotation's %s", got["annotated"].Created, annotated)
	}
	// 6 artifacts (latest and 1.1 are one) at 2 a page.
	if n := a.Count(registrytest.APIPage); n != 3 {
		t.Errorf("%d pages, want 3", n)
	}
	for _, r := range a.Requests() {
		if !r.Authorization {
			t.Errorf("%s sent without credentials", r.Path)
		}
	}
	if n := s.Total(); n != 0 {
		t.Errorf("%d registry requests, want 0", n)
	}
}

// TestHarbor_NestedRepository: a repository with a slash is encoded twice.
func TestHarbor_NestedRepository(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "proj/team/web", 3)
	a := s.HarborAPI(t)
	h, err := metadata.NewHarbor(metadata.Options{BaseURL: a.URL})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := h.ListTagRecords(context.Background(), repoOf(t, s, "proj/team/web"))
	if err != nil || len(recs) != 3 {
		t.Fatalf("%d tags, %v; want 3", len(recs), err)
	}
	// The server sees the path decoded once.
	if p := a.Requests()[0].Path; p != "/api/v2.0/projects/proj/repositories/team%2Fweb/artifacts" {
		t.Errorf("path %s", p)
	}
}

// TestHarbor_NoLink: without a Link header, X-Total-Count says whether a page
// follows.
func TestHarbor_NoLink(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "team/many", 5)
	a := s.HarborAPI(t)
	a.Inject(registrytest.APIFault{Kind: registrytest.APIPage, Header: http.Header{"Link": {""}}})
	h, err := metadata.NewHarbor(metadata.Options{BaseURL: a.URL, PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := h.ListTagRecords(context.Background(), repoOf(t, s, "team/many"))
	if err != nil || len(recs) != 5 {
		t.Fatalf("%d tags, %v; want 5", len(recs), err)
	}
	if n := a.Count(registrytest.APIPage); n != 3 {
		t.Errorf("%d pages, want 3", n)
	}
}

// TestHarbor_BuildTime: an index's build time from the artifacts of the
// manifests inspect may pick for the required platforms, one request each,
// known only when they agree; an image's from the listing; an API failure is
// not known (no error).
func TestHarbor_BuildTime(t *testing.T) {
	s := registrytest.New(t)
	seedContent(t, s)
	amd := registrytest.Image(t0.Add(10*time.Hour), "linux/amd64", registrytest.WithSeed("split-amd64"))
	arm := registrytest.Image(t0.Add(11*time.Hour), "linux/arm64", registrytest.WithSeed("split-arm64"))
	split := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	s.PushIndex(t, "team/web", "split", split)
	a := s.HarborAPI(t, registrytest.WithAPIAuth("robot$ci", secret))
	h, err := metadata.NewHarbor(metadata.Options{BaseURL: a.URL, Keychain: vendors[1].keychain(secret)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, repo := context.Background(), repoOf(t, s, "team/web")
	recs, err := h.ListTagRecords(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	got := byTag(t, recs)
	plat := func(ps ...string) []resolve.Platform {
		out, err := resolve.ParsePlatforms(ps...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, c := range []struct {
		tag      string
		prefer   []resolve.Platform
		want     time.Time // zero: not known
		requests int
	}{
		{tag: "1.1", prefer: nil, want: t0.Add(2 * time.Hour), requests: 3},
		{tag: "1.1", prefer: plat("linux/arm/v7"), want: t0.Add(2 * time.Hour), requests: 1},
		{tag: "1.3", prefer: plat("linux/arm64"), want: t0.Add(4 * time.Hour)}, // the index's annotation
		{tag: "annotated", want: annotated},                                    // an image: from the listing
		{tag: "split", prefer: plat("linux/amd64"), want: t0.Add(10 * time.Hour), requests: 1},
		{tag: "split", prefer: plat("linux/arm64"), want: t0.Add(11 * time.Hour), requests: 1},
		{tag: "split", prefer: plat("linux/s390x"), requests: 2}, // inspect takes the first: not told apart
		{tag: "split", prefer: nil, requests: 2},
	} {
		a.ResetCounts()
		created, ok, err := h.BuildTime(ctx, repo, got[c.tag], c.prefer)
		if err != nil {
			t.Fatal(err)
		}
		if ok != !c.want.IsZero() || !created.Equal(c.want) {
			t.Errorf("%s for %v: %s %v, want %s", c.tag, c.prefer, created, ok, c.want)
		}
		if n := a.Count(registrytest.APIArtifact); n != c.requests || a.Total() != n {
			t.Errorf("%s for %v: %d artifact requests (%v), want %d", c.tag, c.prefer, n, a.Counts(), c.requests)
		}
	}
	a.Inject(registrytest.APIFault{Kind: registrytest.APIArtifact, Status: http.StatusTooManyRequests})
	if _, ok, err := h.BuildTime(ctx, repo, got["1.1"], nil); ok || err != nil {
		t.Errorf("rate limited: ok %v, err %v; want not known, no error", ok, err)
	}
}

// TestHarborShape: the test server answers as Harbor's swagger describes it.
func TestHarborShape(t *testing.T) {
	s := registrytest.New(t)
	seedContent(t, s)
	a := s.HarborAPI(t)
	free := []string{"[].annotations", "[].references[].annotations", "[].extra_attrs.config", "[].extra_attrs.config.Labels", "[].addition_links"}
	checkShape(t, "testdata/harbor/artifacts.json", a.URL+"/api/v2.0/projects/team/repositories/web/artifacts?with_tag=true", nil, 200, free...)
	descs, err := s.Describe("team/web")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range descs {
		if d.Tag == "1.1" {
			checkShape(t, "testdata/harbor/artifact.json", a.URL+"/api/v2.0/projects/team/repositories/web/artifacts/"+d.Manifests[0].Digest,
				nil, 200, "annotations", "extra_attrs.config", "extra_attrs.config.Labels", "addition_links")
		}
	}
	checkShape(t, "testdata/harbor/error.json", a.URL+"/api/v2.0/projects/team/repositories/nope/artifacts", nil, http.StatusNotFound)
}
