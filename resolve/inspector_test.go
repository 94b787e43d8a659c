package resolve

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/types"

	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// The tags of a newest-build resolution share one platform slice per distinct
// set, so that 10,000 tags of one image do not hold 10,000 copies until they are
// ranked; a shared slice is capped, so that a caller appending to a tag's
// platforms copies it rather than writing into the others'.
func TestInspectorSharesPlatformSets(t *testing.T) {
	s := rt.New(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var tags []string
	for i := range 6 {
		platforms := []string{"linux/amd64", "linux/arm64"}
		if i%3 == 2 {
			platforms = []string{"linux/arm64"}
		}
		tag := fmt.Sprintf("build-%d", i)
		s.PushIndex(t, "app", tag, rt.Index(t0.Add(time.Duration(i)*time.Hour), platforms))
		tags = append(tags, tag)
	}
	_, in := newestBuildInspector(t, s, 8)
	defer in.stop()
	infos, err := in.meta(context.Background(), tags)
	if err != nil {
		t.Fatal(err)
	}
	both, arm := infos["build-0"].Platforms, infos["build-2"].Platforms
	if want := []Platform{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}}; !slices.Equal(both, want) {
		t.Fatalf("build-0's platforms %v; want %v", both, want)
	}
	for _, tag := range tags {
		got := infos[tag].Platforms
		want := both
		if tag == "build-2" || tag == "build-5" {
			want = arm
		}
		if unsafe.SliceData(got) != unsafe.SliceData(want) {
			t.Errorf("%s's platforms %v are a slice of their own; want the set shared with the tags like it", tag, got)
		}
		if cap(got) != len(got) {
			t.Errorf("%s's platforms have room for %d more; want none (an append must copy)", tag, cap(got)-len(got))
		}
	}
	if got := infos["build-0"].MediaType; unsafe.StringData(string(got)) != unsafe.StringData(string(types.OCIImageIndex)) {
		t.Errorf("build-0's media type %q is the response's string; want the package constant", got)
	}
}

// A registry on the same machine answers a tag page in well under a millisecond:
// the inspections of a resolution over it are narrowed from the bound as the
// pages come (width.go), those over a registry 20 ms away are not.
func TestInspectorNarrowsForANearbyRegistry(t *testing.T) {
	for _, c := range []struct {
		name    string
		latency time.Duration
		narrow  bool
	}{{"loopback", 0, true}, {"20 ms away", 20 * time.Millisecond, false}} {
		t.Run(c.name, func(t *testing.T) {
			s := rt.New(t, rt.WithPageSize(10))
			img := rt.Image(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), "linux/amd64")
			for i := range 100 {
				s.Push(t, "app", fmt.Sprintf("build-%02d", i), img)
			}
			s.SetLatency(c.latency)
			remote, in := newestBuildInspector(t, s, 64)
			defer in.stop()
			var pages int
			tags, err := remote.ListTags(withTagPages(context.Background(), func(tags []string) { pages++; in.width.page() }), in.repo)
			if err != nil || len(tags) != 100 || pages != 10 {
				t.Fatalf("listed %d tags in %d pages, %v; want 100 in 10", len(tags), pages, err)
			}
			in.width.mu.Lock()
			width, turn := in.width.width, in.width.turn
			in.width.mu.Unlock()
			if c.narrow && width > 2*minWidth {
				t.Errorf("width %d after 10 pages from loopback (shortest trip %v); want at most %d", width, turn, 2*minWidth)
			}
			if !c.narrow && width != 64 {
				t.Errorf("width %d after 10 pages 20 ms away (shortest trip %v); want the bound, 64", width, turn)
			}
		})
	}
}

// newestBuildInspector is the inspector of a newest-build resolution over
// repository "app" of s, by a Remote of its own with a bound of concurrency.
func newestBuildInspector(t *testing.T, s *rt.Server, concurrency int) (*Remote, *inspector) {
	t.Helper()
	remote, err := NewRemote(WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := name.NewRepository(s.Ref("app"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := PolicySpec{Strategy: "newest-build"}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return remote, NewResolver(remote, WithConcurrency(concurrency)).newInspector(context.Background(), repo, p)
}
