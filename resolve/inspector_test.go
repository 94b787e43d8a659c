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
	in := NewResolver(remote).newInspector(context.Background(), repo, p)
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
