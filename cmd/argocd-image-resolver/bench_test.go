package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkGenerateVsTool renders each sample app against a loopback registry the two
// ways plugin.yaml can: argocd-image-resolver-generate handing the render to a warm
// daemon (the sidecar's normal case), and a whole `argocd-image-resolver generate`
// process without a daemon (cold) — next to what Argo CD would otherwise run for the
// same app: `helm template` or `kustomize build` (the command-line tools, built by
// `make bench-tools` into .cache/bin). It reports each time per render and the ratios
// to the tool.
func BenchmarkGenerateVsTool(b *testing.B) {
	bin, err := filepath.Abs("../../.cache/bin")
	if err != nil {
		b.Fatal(err)
	}
	_, cfg := demoRegistry(b)
	socket, _ := startDaemon(b, cfg)
	apps := []struct {
		name, dir string
		tool      []string
	}{
		{"helm-web", "helm-web", []string{filepath.Join(bin, "helm"), "template", "shop", ".", "--namespace", "shop", "--include-crds"}},
		{"kustomize-overlay", "kustomize-overlay/overlay", []string{filepath.Join(bin, "kustomize"), "build", "."}},
		{"plain-cron", "plain-cron", nil},
		{"arm64-pinned", "arm64-pinned", nil},
	}
	for _, app := range apps {
		b.Run(app.name, func(b *testing.B) {
			dir := filepath.Join("../../testdata/apps", app.dir)
			if app.tool != nil {
				if _, err := os.Stat(app.tool[0]); err != nil {
					b.Fatalf("%s is missing: run `make bench-tools`", app.tool[0])
				}
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				b.Fatal(err)
			}
			thin := func() {
				cmd := exec.Command(thinBinary)
				cmd.Dir = abs
				cmd.Env = append(os.Environ(), "ARGOCD_APP_NAME=shop", "ARGOCD_APP_NAMESPACE=shop", "IMAGE_RESOLVER_SOCKET="+socket)
				if out, err := cmd.Output(); err != nil {
					b.Fatalf("argocd-image-resolver-generate: %v\n%s", err, out)
				}
			}
			thin() // warms the daemon
			var gen, tool, delegated time.Duration
			for b.Loop() {
				start := time.Now()
				thin()
				delegated += time.Since(start)
				start = time.Now()
				cmd := exec.Command(binary, "generate")
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "IMAGE_RESOLVER_REGISTRIES_CONFIG="+cfg, "ARGOCD_APP_NAME=shop",
					"ARGOCD_APP_NAMESPACE=shop", "IMAGE_RESOLVER_SOCKET="+filepath.Join(os.TempDir(), "no-daemon.sock"))
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("generate: %v\n%s", err, out)
				}
				gen += time.Since(start)
				if app.tool == nil {
					continue
				}
				start = time.Now()
				tc := exec.Command(app.tool[0], app.tool[1:]...)
				tc.Dir = dir
				if out, err := tc.CombinedOutput(); err != nil {
					b.Fatalf("%s: %v\n%s", app.tool[0], err, out)
				}
				tool += time.Since(start)
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
			b.ReportMetric(ms(delegated), "delegated-ms/op")
			b.ReportMetric(ms(gen), "cold-generate-ms/op")
			if app.tool != nil {
				b.ReportMetric(ms(tool), "tool-ms/op")
				b.ReportMetric(float64(delegated)/float64(tool), "delegated/tool")
				b.ReportMetric(float64(gen)/float64(tool), "cold/tool")
			}
		})
	}
}

// BenchmarkGenerateDaemon is a whole `generate` process for the plain-cron sample app
// (3 image fields, 2 repositories) with a warm daemon against the same without one
// (cold: every render lists and inspects), with 0 and 20 ms added to every registry
// request. It reports registry requests per render.
func BenchmarkGenerateDaemon(b *testing.B) {
	s, cfg := demoRegistry(b)
	socket, _ := startDaemon(b, cfg)
	dir := "../../testdata/apps/plain-cron"
	for _, latency := range []time.Duration{0, 20 * time.Millisecond} {
		for _, mode := range []string{"no-daemon", "warm-daemon"} {
			b.Run(mode+"/latency="+latency.String(), func(b *testing.B) {
				sock := filepath.Join(b.TempDir(), "none.sock")
				if mode == "warm-daemon" {
					sock = socket
				}
				env := append(os.Environ(), "IMAGE_RESOLVER_REGISTRIES_CONFIG="+cfg, "ARGOCD_APP_NAME=shop",
					"ARGOCD_APP_NAMESPACE=shop", "IMAGE_RESOLVER_SOCKET="+sock)
				render := func() {
					cmd := exec.Command(binary, "generate")
					cmd.Dir, cmd.Env = dir, env
					if out, err := cmd.CombinedOutput(); err != nil {
						b.Fatalf("generate: %v\n%s", err, out)
					}
				}
				render() // warms the daemon's view (and is not measured)
				s.SetLatency(latency)
				defer s.SetLatency(0)
				s.ResetCounts()
				for b.Loop() {
					render()
				}
				b.ReportMetric(float64(s.Total())/float64(b.N), "requests/op")
			})
		}
	}
}
