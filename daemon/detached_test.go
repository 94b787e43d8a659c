package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// A cold render that cannot finish within its deadline fails saying the registry
// view is still being filled and Argo CD will retry; the resolution goes on in the
// daemon (it is not cancelled with the render), so the retry is served from cache
// with 0 new metadata requests.
func TestColdResolutionGoesOnAfterTheRenderDeadline(t *testing.T) {
	s := rt.New(t, rt.WithPageSize(100))
	sc := &rt.Scenario{Repositories: map[string]*rt.Repository{"team/builds": {Generate: &rt.Generate{
		Count: 120, Format: "build-%d", Created: "2026-01-01T00:00:00Z", Interval: "1h",
		Index: true, Platforms: []string{"linux/amd64", "linux/arm64"}}}}}
	if err := s.SeedScenario(sc); err != nil {
		t.Fatal(err)
	}
	// 2 pages, then 120 x (index, amd64 manifest, config): 362 requests, 4 at a
	// time, 20 ms each: about 1.8 s cold, past the 1 s render deadline.
	s.SetLatency(20 * time.Millisecond)
	cfg := testConfig()
	cfg.RegistryConcurrency = 4
	cfg.RenderTimeout = time.Second
	resolved := make(chan struct{}, 1)
	d, _ := startDaemon(t, cfg, withResolvedHook(func(string, resolve.Request) {
		select {
		case resolved <- struct{}{}:
		default:
		}
	}))
	image := s.Ref("team/builds")
	dir := appDir(t, image+":build-0")
	env := argoEnviron(t, "builds", "0123abc", map[string]string{"image-list": "app=" + image,
		"app.update-strategy": "newest-build", "app.platforms": "linux/amd64"})

	first, err := api.Call(context.Background(), d.cfg.Socket, api.GenerateRequest{Dir: dir, Environ: env})
	if err != nil {
		t.Fatal(err)
	}
	if first.ExitCode != 1 || !strings.Contains(first.Stderr, "the registry view is still being filled") ||
		!strings.Contains(first.Stderr, "Argo CD retries the render") || !strings.Contains(first.Stderr, "renderTimeout") {
		t.Fatalf("cold render past its deadline: exit %d, stderr %q", first.ExitCode, first.Stderr)
	}
	// The daemon goes on until every tag is read: a ping, then 362 requests; the
	// resolution's end (its last step comes after its last request) is told.
	const all = 1 + 2 + 3*120
	select {
	case <-resolved:
	case <-time.After(time.Minute):
		t.Fatalf("the cold resolution had not ended after a minute: %d of %d requests (%v)", s.Total(), all, s.Counts())
	}
	if n := s.Total(); n != all {
		t.Fatalf("%d registry requests for the cold resolution (%v), want exactly %d", n, s.Counts(), all)
	}
	s.ResetCounts()
	out := delegatedRender(t, d.cfg.Socket, dir, env)
	if !strings.Contains(out, image+":build-119") {
		t.Fatalf("retry rendered %s, want build-119", out)
	}
	if c := s.Counts(); c[rt.ManifestGet]+c[rt.ManifestHead]+c[rt.BlobGet] != 0 {
		t.Errorf("the retry made metadata requests %v, want none", c)
	}
}
