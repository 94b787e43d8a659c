package daemon

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// seedTags gives repo n tags: 1.0.0, then build-NNNNNN- and random lowercase
// letters and digits, 120 bytes each.
func seedTags(t *testing.T, s *rt.Server, repo string, n int) {
	t.Helper()
	s.Push(t, repo, "1.0.0", rt.Image(t0, "linux/amd64"))
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 120-len("build-000000-"))
	for i := range n - 1 {
		for j := range b {
			b[j] = alphabet[r.IntN(len(alphabet))]
		}
		s.Tag(t, repo, fmt.Sprintf("build-%06d-%s", i, b), "1.0.0")
	}
}

// A render whose deadline passes is told "still being filled" only while the
// daemon reads the registry for it; the daemon reads on, but matches no filter for
// a render that ended: a pathological allow-tags over 100,000 tags (tens of
// seconds of a core, let through by a raised tagFilterMaxCost) stops with the
// render, the render says so, and the daemon is idle after the render returns.
func TestWorkStopsWhenTheRenderEnds(t *testing.T) {
	const tags, pages = 100_000, 100
	s := rt.New(t, rt.WithPageSize(1000)) // Link pagination, 100 pages
	seedTags(t, s, "many", tags)
	s.SetLatency(30 * time.Millisecond) // 100 pages: over 3 s, past the render deadline
	cfg := testConfig()
	cfg.RenderTimeout = time.Second
	cfg.TagFilterMaxCost = 1 << 50
	resolved := make(chan struct{}, 4)
	d, _ := startDaemon(t, cfg, withResolvedHook(func(string, resolve.Request) { resolved <- struct{}{} }))
	image := s.Ref("many")
	dir := appDir(t, image+":1.0.0")
	env := argoEnviron(t, "many", "0123abc", map[string]string{"image-list": "app=" + image,
		"app.allow-tags": `regexp:(([a-z0-9]*)*[a-z]){30}$`})
	render := func() (*api.GenerateResponse, time.Duration) {
		start := time.Now()
		resp, err := api.Call(context.Background(), d.cfg.Socket, api.GenerateRequest{Dir: dir, Environ: env})
		if err != nil {
			t.Fatal(err)
		}
		return resp, time.Since(start)
	}

	// Cold: the deadline passes while the tag list is read.
	first, took := render()
	t.Logf("cold render: %s, exit %d: %s", took.Round(time.Millisecond), first.ExitCode, first.Stderr)
	if first.ExitCode == 0 || !strings.Contains(first.Stderr, "the registry view is still being filled") {
		t.Fatalf("cold render past its deadline while listing: exit %d, stderr %q", first.ExitCode, first.Stderr)
	}
	// The daemon reads every page, then its resolution stops: nobody waits.
	cpu, ended := cpuTime(t), time.Now()
	select {
	case <-resolved:
		t.Logf("the cold resolution ended %s after the render returned, %s of CPU meanwhile", time.Since(ended).Round(time.Millisecond), cpuTime(t)-cpu)
	case <-time.After(30 * time.Second):
		t.Errorf("the resolution had not ended 30 s after the render (%d of %d pages read, %s of CPU meanwhile)",
			s.Count(rt.Tags), pages, cpuTime(t)-cpu)
	}
	if n := s.Count(rt.Tags); n != pages {
		t.Errorf("%d tag list pages read, want every one of %d", n, pages)
	}
	s.SetLatency(0)

	// Warm list: the deadline passes while the filter runs; the daemon reads
	// nothing, says what was stopped, and is idle after.
	second, took := render()
	t.Logf("warm render: %s, exit %d: %s", took.Round(time.Millisecond), second.ExitCode, second.Stderr)
	for _, part := range []string{"stopped matching allow-tags", "of 100000 tags", "renderTimeout"} {
		if !strings.Contains(second.Stderr, part) {
			t.Errorf("render past its deadline in the filter: stderr %q does not say %q", second.Stderr, part)
		}
	}
	if strings.Contains(second.Stderr, "still being filled") {
		t.Errorf("render past its deadline in the filter says the registry view is still being filled: %q", second.Stderr)
	}
	if took > cfg.RenderTimeout+waitGrace+time.Second {
		t.Errorf("render answered after %s, want within renderTimeout %s and %s", took, cfg.RenderTimeout, waitGrace)
	}
	const window = 3 * time.Second
	cpu = cpuTime(t)
	time.Sleep(window)
	used := cpuTime(t) - cpu
	t.Logf("CPU used in the %s after the render returned: %s", window, used)
	if used > window/10 {
		t.Errorf("the process used %s of CPU in the %s after the render returned, want under %s (idle)", used, window, window/10)
	}
}
