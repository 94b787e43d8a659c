package daemon

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// generateHash renders dir through the daemon on socket and returns the sha256
// of its stdout and its size.
func generateHash(socket, dir string, environ []string) ([32]byte, int64, error) {
	resp, err := api.Call(context.Background(), socket, api.GenerateRequest{Dir: dir, Environ: environ})
	if err != nil {
		return [32]byte{}, 0, err
	}
	if resp.ExitCode != 0 {
		return [32]byte{}, 0, fmt.Errorf("exit %d: %s", resp.ExitCode, resp.Stderr)
	}
	return sha256.Sum256(resp.Stdout), int64(len(resp.Stdout)), nil
}

// BenchmarkGenerate50MB renders an app of 50 MB of manifests through a daemon
// process with render workers, 3 renders at once, and reports the daemon's own
// memory (anonymous RSS, sampled) above its idle baseline, per render.
func BenchmarkGenerate50MB(b *testing.B) {
	const renders = 3
	s := rt.New(b)
	pushTags(b, s, "web", "linux/amd64", "1.0.0", "1.1.0")
	dir := b.TempDir()
	size := writeBigApp(b, dir, s.Ref("web"), 5000, 50<<20)
	cfg := testConfig()
	cfg.Socket = socketPath(b)
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.RenderWorkers = renders
	cfg.RenderTimeout = 5 * time.Minute // this machine's 2 cores are shared: the figure here is memory
	d := startDaemonProcess(b, cfg)
	started := d.anonMiB()
	// a first render warms the registry cache and starts a worker
	if _, _, err := generateHash(d.socket, dir, bigAppEnviron("warm", s.Ref("web"))); err != nil {
		b.Fatal(err)
	}
	warm := d.anonMiB()
	b.Logf("daemon anonymous RSS: %.1f MiB started, %.1f MiB after one render", started, warm)
	var above float64
	for b.Loop() {
		base := d.anonMiB()
		start := time.Now()
		stop := make(chan struct{})
		peak := d.sampleAnonPeak(stop)
		var wg sync.WaitGroup
		for i := range renders {
			wg.Go(func() {
				if _, n, err := generateHash(d.socket, dir, bigAppEnviron(fmt.Sprintf("app-%d", i), s.Ref("web"))); err != nil || n < size {
					b.Errorf("render %d: %d bytes, %v", i, n, err)
				}
			})
		}
		wg.Wait()
		close(stop)
		p := <-peak
		b.Logf("daemon anonymous RSS: idle %.1f MiB, peak %.1f MiB over %d renders of %.1f MB at once (%v)", base, p, renders, float64(size)/1e6, time.Since(start).Round(time.Millisecond))
		above = max(above, p-started)
	}
	b.ReportMetric(above, "daemon-MiB-above-idle")
	b.ReportMetric(above/renders, "daemon-MiB/render")
}
