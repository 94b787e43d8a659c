package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkColdRender is the cold render of the cold newest-build case, whole: the
// plain-YAML app of buildsRegistry (a Deployment whose image is newest-build for
// linux/amd64 over 1,000 build-N indexes, every registry request 20 ms late, or
// $BENCH_LATENCY), rendered
//
//   - daemon: by argocd-image-resolver-generate against an `argocd-image-resolver
//     serve` just started (with render workers, as the sidecar runs it), sent as
//     soon as the socket answers: the daemon's start is not timed;
//   - base: the same against the `serve` of the binary $BENCH_COLD_BASE (another
//     version, main's for one), when set;
//   - cli: by `argocd-image-resolver generate` without a daemon, a process of its
//     own, cold.
//
// They alternate within each iteration, so that the load of the machine falls on
// all alike. It reports the median milliseconds of each (the machine is shared: a
// median, not a mean), the ratio of the daemon's median to the CLI's, and the
// registry requests of each; it fails if a render does not pick build-999 or the
// daemon prints other manifests than generate.
func BenchmarkColdRender(b *testing.B) {
	s, cfg, app := buildsRegistry(b)
	appEnv := []string{"ARGOCD_APP_NAME=builds", "ARGOCD_APP_NAMESPACE=builds",
		"ARGOCD_APP_PARAMETERS=" + params("image-list", "app=builds.bench.local/team/builds", "app.update-strategy", "newest-build",
			"app.platforms", "linux/amd64")}
	noDaemon := filepath.Join(b.TempDir(), "none.sock")
	base := os.Getenv("BENCH_COLD_BASE")
	var daemon, baseDaemon, cli []time.Duration
	var daemonReqs, cliReqs int
	viaServe := func(serve string) (time.Duration, string, int) {
		socket, stop := startDaemonBinary(b, serve, cfg)
		defer stop()
		s.ResetCounts()
		took, out := coldRender(b, app, append(appEnv, "IMAGE_RESOLVER_SOCKET="+socket), thinBinary)
		return took, out, s.Total()
	}
	for b.Loop() {
		b.StopTimer()
		took, viaDaemon, n := viaServe(binary)
		daemon, daemonReqs = append(daemon, took), daemonReqs+n
		if base != "" {
			took, _, _ = viaServe(base)
			baseDaemon = append(baseDaemon, took)
		}
		s.ResetCounts()
		took, inProcess := coldRender(b, app, append(appEnv, "IMAGE_RESOLVER_SOCKET="+noDaemon, "IMAGE_RESOLVER_REGISTRIES_CONFIG="+cfg), binary, "generate")
		cli, cliReqs = append(cli, took), cliReqs+s.Total()
		if viaDaemon != inProcess {
			b.Fatalf("the daemon's render differs from generate's:\n%s\n---\n%s", viaDaemon, inProcess)
		}
		b.StartTimer()
	}
	dm, cm := median(daemon), median(cli)
	b.ReportMetric(float64(dm.Microseconds())/1000, "daemon-ms")
	b.ReportMetric(float64(cm.Microseconds())/1000, "cli-ms")
	b.ReportMetric(float64(dm)/float64(cm), "daemon/cli")
	if base != "" {
		b.ReportMetric(float64(median(baseDaemon).Microseconds())/1000, "base-ms")
		b.ReportMetric(float64(median(baseDaemon))/float64(cm), "base/cli")
	}
	b.ReportMetric(float64(daemonReqs)/float64(len(daemon)), "daemon-requests/op")
	b.ReportMetric(float64(cliReqs)/float64(len(cli)), "cli-requests/op")
	b.Logf("daemon %v; base %v; cli %v", daemon, baseDaemon, cli)
}

// coldRender runs a render command in app with env added to this process's, and
// returns how long it took and its manifests; it fails b unless the render
// succeeded, in process or through the daemon as asked, and picked build-999.
func coldRender(b *testing.B, app string, env []string, name string, args ...string) (time.Duration, string) {
	b.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = app
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	took := time.Since(start)
	// "unreachable": the thin client found no daemon and rendered in process.
	if err != nil || !strings.Contains(string(out), "builds.bench.local/team/builds:build-999") || strings.Contains(stderr.String(), "unreachable") {
		b.Fatalf("%s: %v\n%s\n%s", filepath.Base(name), err, out, stderr.String())
	}
	return took, string(out)
}

// median is the median of ds (the mean of the middle two for an even count).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
