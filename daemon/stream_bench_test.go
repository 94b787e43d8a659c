package daemon

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/compose"
	"github.com/argocd-image-resolver/argocd-image-resolver/pipeline"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// generateHash renders dir through the daemon on socket, streaming its manifests
// into a hash, and returns the hash and their size.
func generateHash(socket, dir string, environ []string) ([32]byte, int64, error) {
	h := &sizedHash{Hash: sha256.New()}
	resp, err := api.CallTo(context.Background(), socket, api.GenerateRequest{Dir: dir, Environ: environ}, h)
	if err != nil {
		return [32]byte{}, 0, err
	}
	if resp.ExitCode != 0 {
		return [32]byte{}, 0, fmt.Errorf("exit %d: %s", resp.ExitCode, resp.Stderr)
	}
	return [32]byte(h.Sum(nil)), h.n, nil
}

type sizedHash struct {
	hash.Hash
	n int64
}

func (h *sizedHash) Write(p []byte) (int, error) {
	h.n += int64(len(p))
	return h.Hash.Write(p)
}

// bigRenders is one measure of several renders at once of an app of 50 MB of
// manifests, through a daemon process with render workers.
type bigRenders struct {
	size             int64     // bytes of manifests in the app
	idle, peak, warm float64   // the daemon's anonymous RSS, MiB: started, peak, after
	workers          []float64 // each render worker's peak RSS, MiB
	took             time.Duration
	hashes           [][32]byte
	errs             []error
}

// renderBigAtOnce writes the app, starts a daemon process with renders render
// workers and renders the app renders times at once through its socket, while
// sampling the daemon's anonymous RSS (its own memory: the workers are processes
// of their own). It returns the registry and app for a comparison.
func renderBigAtOnce(tb testing.TB, renders int) (*bigRenders, *rt.Server, string) {
	tb.Helper()
	s := rt.New(tb)
	pushTags(tb, s, "web", "linux/amd64", "1.0.0", "1.1.0")
	dir := tb.TempDir()
	m := &bigRenders{size: writeBigApp(tb, dir, s.Ref("web"), 5000, 50<<20)}
	cfg := testConfig()
	cfg.Socket = socketPath(tb)
	cfg.RenderWorkers = renders
	// The daemon's memory is measured here, with workers large enough for the
	// app (their own peak is reported), whatever this machine's limits.
	cfg.RenderWorkerMemory = 1 << 30
	cfg.MemoryBudget = cfg.DaemonMemory + int64(renders)*cfg.RenderWorkerMemory
	// This machine's cores are shared: the bound here is memory, the time is reported.
	cfg.RenderTimeout = 5 * time.Minute
	d := startDaemonProcess(tb, cfg)
	m.idle = d.anonMiB()
	stop := make(chan struct{})
	peak := d.sampleAnonPeak(stop)
	start := time.Now()
	m.hashes, m.errs = make([][32]byte, renders), make([]error, renders)
	var wg sync.WaitGroup
	for i := range renders {
		wg.Go(func() {
			var n int64
			m.hashes[i], n, m.errs[i] = generateHash(d.socket, dir, bigAppEnviron(fmt.Sprintf("app-%d", i), s.Ref("web")))
			if m.errs[i] == nil && n < m.size {
				m.errs[i] = fmt.Errorf("%d bytes of manifests, fewer than the app's %d", n, m.size)
			}
		})
	}
	wg.Wait()
	m.took = time.Since(start)
	close(stop)
	m.peak = <-peak
	m.warm = d.anonMiB()
	m.workers = d.workersPeakMiB()
	return m, s, dir
}

// inProcessHash renders dir in this process (render.InProcess), as generate does
// without the daemon, and returns the hash of its manifests.
func inProcessHash(tb testing.TB, dir string, environ []string) [32]byte {
	tb.Helper()
	cfg := testConfig()
	cfg.RenderTimeout = 5 * time.Minute
	direct, err := compose.NewDirectResolver(cfg, nil, resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		tb.Fatal(err)
	}
	env, err := plugin.EnvFromEnviron(environ)
	if err != nil {
		tb.Fatal(err)
	}
	out, _, err := pipeline.New(direct, compose.PipelineSettings(cfg)).Render(context.Background(), dir, env)
	if err != nil {
		tb.Fatal(err)
	}
	return sha256.Sum256(out)
}

// BenchmarkGenerate50MB renders an app of 50 MB of manifests through a daemon
// process with render workers, 3 renders at once, and reports the daemon's own
// memory (anonymous RSS, sampled) at its peak above its idle start, per render.
func BenchmarkGenerate50MB(b *testing.B) {
	const renders = 3
	var above float64
	for b.Loop() {
		m, _, _ := renderBigAtOnce(b, renders)
		for i, err := range m.errs {
			if err != nil {
				b.Errorf("render %d: %v", i, err)
			}
		}
		b.Logf("daemon anonymous RSS: %.1f MiB idle, peak %.1f MiB, %.1f MiB after %d renders of %.1f MB at once (%v); workers' peak RSS %.0f MiB",
			m.idle, m.peak, m.warm, renders, float64(m.size)/1e6, m.took.Round(time.Millisecond), m.workers)
		above = max(above, m.peak-m.idle)
	}
	b.ReportMetric(above, "daemon-MiB-above-idle")
	b.ReportMetric(above/renders, "daemon-MiB/render")
}
