package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
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

// buildsRegistry is the cold newest-build case of a large CI registry: a repository of 1,000 build-N tags, each an
// index of linux/amd64 and linux/arm64 images created an hour apart, listed 100 tags a
// page, every request 20 ms late. newest-build for linux/amd64 reads it with 3,011
// requests at the least: 10 list pages, 1,000 indexes, 1,000 amd64 manifests and
// 1,000 configs. It returns the registry, a registries config naming it
// builds.bench.local, and an app directory whose Deployment uses it with that policy.
func buildsRegistry(b *testing.B) (*rt.Server, string, string) {
	b.Helper()
	s := rt.New(b, rt.WithPageSize(100))
	sc := &rt.Scenario{Repositories: map[string]*rt.Repository{"team/builds": {Generate: &rt.Generate{
		Count: 1000, Format: "build-%d", Created: "2026-01-01T00:00:00Z", Interval: "1h",
		Index: true, Platforms: []string{"linux/amd64", "linux/arm64"}}}}}
	if err := s.SeedScenario(sc); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cfg := filepath.Join(dir, "registries.yaml")
	body := fmt.Sprintf("registries:\n- prefix: builds.bench.local\n  api: %q\n  insecure: true\n", s.Host)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		b.Fatal(err)
	}
	app := filepath.Join(dir, "app")
	deploy := `apiVersion: apps/v1
kind: Deployment
metadata: {name: builds}
spec:
  template:
    spec:
      containers:
      - {name: app, image: builds.bench.local/team/builds:build-0}
`
	if err := os.MkdirAll(app, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(app, "deploy.yaml"), []byte(deploy), 0o644); err != nil {
		b.Fatal(err)
	}
	lat := 20 * time.Millisecond
	if v := os.Getenv("BENCH_LATENCY"); v != "" {
		lat, _ = time.ParseDuration(v)
	}
	s.SetLatency(lat)
	return s, cfg, app
}

// BenchmarkCold1000Builds measures the cold newest-build case: newest-build for linux/amd64
// over buildsRegistry, cold, by `resolve` (a process of its own) and by a render
// through a daemon that has just started (argocd-image-resolver-generate asking a
// fresh `serve`; the daemon's start is not timed), with no faults and with 2% of
// requests answered 503. It reports milliseconds and registry requests per
// resolution, and fails if any pick is not build-999.
func BenchmarkCold1000Builds(b *testing.B) {
	s, cfg, app := buildsRegistry(b)
	env := []string{"IMAGE_RESOLVER_REGISTRIES_CONFIG=" + cfg}
	for _, faults := range []string{"none", "503-2pct"} {
		inject := func() {
			s.ClearFaults()
			if faults == "503-2pct" {
				s.Inject(rt.Fault{Status: 503, Every: 50})
			}
		}
		b.Run("resolve/faults="+faults, func(b *testing.B) {
			inject()
			defer s.ClearFaults()
			s.ResetCounts()
			var took time.Duration
			for b.Loop() {
				start := time.Now()
				r := resolveCmd(b, env, "builds.bench.local/team/builds", "--strategy", "newest-build", "--platforms", "linux/amd64", "-o", "json")
				took += time.Since(start)
				if r.code != 0 || !strings.Contains(r.stdout, `"tag": "build-999"`) {
					b.Fatalf("resolve: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
				}
			}
			b.ReportMetric(float64(took.Milliseconds())/float64(b.N), "ms/resolution")
			b.ReportMetric(float64(s.Total())/float64(b.N), "requests/op")
		})
		b.Run("daemon-cold/faults="+faults, func(b *testing.B) {
			s.ClearFaults()
			defer s.ClearFaults()
			var took time.Duration
			var requests int
			for b.Loop() {
				b.StopTimer()
				socket, stop := startDaemon(b, cfg)
				inject()
				s.ResetCounts()
				b.StartTimer()
				start := time.Now()
				cmd := exec.Command(thinBinary)
				cmd.Dir = app
				cmd.Env = append(os.Environ(), "ARGOCD_APP_NAME=builds", "ARGOCD_APP_NAMESPACE=builds", "IMAGE_RESOLVER_SOCKET="+socket,
					"ARGOCD_APP_PARAMETERS="+params("image-list", "app=builds.bench.local/team/builds", "app.update-strategy", "newest-build",
						"app.platforms", "linux/amd64"))
				out, err := cmd.CombinedOutput()
				took += time.Since(start)
				b.StopTimer()
				requests += s.Total()
				stop()
				s.ClearFaults()
				if err != nil || !strings.Contains(string(out), "builds.bench.local/team/builds:build-999") || strings.Contains(string(out), "unreachable") {
					b.Fatalf("render: %v\n%s", err, out)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(took.Milliseconds())/float64(b.N), "ms/resolution")
			b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
		})
	}
}
