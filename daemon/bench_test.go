package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// ---- daemon memory ----

const (
	helperEnv = "CACHE_BENCH_DAEMON_CONFIG"
	// helperWorkersEnv makes the helper daemon render in worker processes.
	helperWorkersEnv = "CACHE_BENCH_DAEMON_WORKERS"
	// helperGOGCEnv sets GOGC for the helper daemon alone (the registry serving
	// it keeps its own): to weigh a GC target's peak against its CPU.
	helperGOGCEnv = "CACHE_BENCH_DAEMON_GOGC"
)

// TestDaemonHelperProcess is the daemon of BenchmarkDaemonMemory, run as a process
// of its own (this test binary, re-executed) so that its RSS is the daemon's alone.
func TestDaemonHelperProcess(t *testing.T) {
	raw := os.Getenv(helperEnv)
	if raw == "" {
		return // only BenchmarkDaemonMemory runs it, as a process of its own
	}
	var cfg config.Config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	if os.Getenv(heapProfileEnv) != "" {
		runtime.MemProfileRate = 4096 // a profile precise enough to count small entries
	}
	TuneGC() // as serve and sidecar do
	opts := []Option{WithLogger(slog.New(slog.DiscardHandler)),
		WithRemoteOptions(resolve.WithKeychain(authn.NewMultiKeychain()))}
	if os.Getenv(helperWorkersEnv) == "1" {
		opts = append(opts, WithRenderWorkers(workerCommand))
	}
	d, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Listen(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("metrics=%s\n", d.MetricsAddr())
	ctx, stop := signalContext()
	defer stop()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// heapProfileEnv names a file the helper daemon writes its heap profile to when
// asked for its live heap (go tool pprof -sample_index=inuse_space): to see what
// holds the daemon's memory.
const heapProfileEnv = "CACHE_BENCH_HEAP_PROFILE"

// signalContext ends when the parent closes our stdin. A "gc" line on stdin
// answers with the CPU the garbage collector took so far, then collects garbage
// and answers with the live heap, after returning what is free to the OS (and
// writes a heap profile when heapProfileEnv names a file).
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "gc" {
				gcCPU := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
				metrics.Read(gcCPU)
				fmt.Printf("gccpu=%f\n", gcCPU[0].Value.Float64())
				debug.FreeOSMemory()
				if path := os.Getenv(heapProfileEnv); path != "" {
					if f, err := os.Create(path); err == nil {
						_ = pprof.Lookup("heap").WriteTo(f, 0)
						f.Close()
					}
				}
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				fmt.Printf("live=%d\n", ms.HeapAlloc)
			}
		}
		cancel()
	}()
	return ctx, cancel
}

// seedView seeds repos repositories with digests distinct single-platform images
// each, every image under tagsPerDigest tags.
func seedView(b *testing.B, s *rt.Server, repos, digests, tagsPerDigest int) []string {
	b.Helper()
	sc := &rt.Scenario{Repositories: map[string]*rt.Repository{}}
	var names []string
	for r := range repos {
		name := fmt.Sprintf("platform-team-%d/service-%03d", r%10, r)
		names = append(names, name)
		sc.Repositories[name] = &rt.Repository{Generate: &rt.Generate{Count: digests, Format: "1.%d.0",
			Created: "2026-01-01T00:00:00Z", Interval: "1h", Platforms: []string{"linux/amd64"}}}
	}
	if err := s.SeedScenario(sc); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for i := range digests {
				for k := 1; k < tagsPerDigest; k++ {
					if err := s.TagE(name, fmt.Sprintf("1.%d.0-build.%d", i, k), fmt.Sprintf("1.%d.0", i)); err != nil {
						b.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return names
}

// procCPU is the CPU time (user and system) process pid used so far, from
// /proc/<pid>/stat (in clock ticks of 10 ms); 0 if it cannot be read.
func procCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command (field 2) is in parentheses and may hold spaces: count after it.
	i := strings.LastIndexByte(string(raw), ')')
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func procStatusMiB(pid int, field string) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return -1
}

// BenchmarkDaemonMemory loads a 100,000-tag view over 500 repositories and 20,000
// digests into a daemon process (every tag's list entry and digest, every
// image's facts from its manifest and config: newest-build over every
// repository) and reports the daemon's RSS, peak RSS and Go heap, and what the
// load cost the registry.
func BenchmarkDaemonMemory(b *testing.B) {
	const repos, digests, tagsPerDigest = 500, 40, 5
	s := rt.New(b)
	start := time.Now()
	names := seedView(b, s, repos, digests, tagsPerDigest)
	b.Logf("seeded %d repositories, %d tags, %d digests in %v", repos, repos*digests*tagsPerDigest, repos*digests, time.Since(start).Round(time.Millisecond))

	for _, shared := range []bool{false, true} {
		b.Run(fmt.Sprintf("redis=%v", shared), func(b *testing.B) { daemonMemory(b, s, names, shared) })
	}
}

// daemonMemory is one run of BenchmarkDaemonMemory, with or without the Redis tier.
func daemonMemory(b *testing.B, s *rt.Server, names []string, shared bool) {
	const repos, digests, tagsPerDigest = 500, 40, 5
	var redisAddr string
	if shared {
		redisAddr = redistest.Start(b).Addr
	}
	for b.Loop() {
		cfg := config.DefaultConfig()
		cfg.Socket = socketPath(b)
		cfg.MetricsAddr = "127.0.0.1:0"
		cfg.RateLimits = nil
		cfg.Redis.Address = redisAddr
		raw, _ := json.Marshal(cfg)
		cmd := exec.Command(os.Args[0], "-test.run=^TestDaemonHelperProcess$")
		cmd.Env = append(os.Environ(), helperEnv+"="+string(raw))
		if v := os.Getenv(helperGOGCEnv); v != "" {
			cmd.Env = append(cmd.Env, "GOGC="+v)
		}
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		out := bufio.NewReader(stdout)
		line, err := out.ReadString('\n')
		metricsAddr, ok := strings.CutPrefix(strings.TrimSpace(line), "metrics=")
		if err != nil || !ok {
			b.Fatalf("daemon said %q: %v", line, err)
		}
		baseRSS := procStatusMiB(cmd.Process.Pid, "VmRSS")

		s.ResetCounts()
		client := NewClient(cfg.Socket)
		// VmHWM counts the binary's pages too (file-backed, shared, reclaimable; this
		// kernel maps much of the text as huge pages): sample the anonymous part,
		// the daemon's own memory, beside it.
		var anonPeak float64
		sampled := make(chan struct{})
		stopSampling := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				anonPeak = max(anonPeak, procStatusMiB(cmd.Process.Pid, "RssAnon"))
				select {
				case <-stopSampling:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
		start, cpu0 := time.Now(), procCPU(cmd.Process.Pid)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for _, name := range names {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				ans, err := client.ResolveBatch(context.Background(), name, []resolve.Request{
					{Image: s.Ref(name), Policy: resolve.PolicySpec{Strategy: "newest-build", Platforms: []string{"linux/amd64"}}}})
				if err != nil || ans[0].Error != "" {
					b.Errorf("%s: %v %+v", name, err, ans)
				}
			})
		}
		wg.Wait()
		load, cpu := time.Since(start), procCPU(cmd.Process.Pid)-cpu0
		close(stopSampling)
		<-sampled

		fams := scrape(b, metricsAddr)
		entries := sumBy(fams[cache.Namespace+"_cache_entries"], "layer", nil)
		bytes := sumBy(fams[cache.Namespace+"_cache_bytes"], "layer", nil)
		heap := sumBy(fams["go_memstats_heap_inuse_bytes"], "", nil)[""]
		rss, peak := procStatusMiB(cmd.Process.Pid, "VmRSS"), procStatusMiB(cmd.Process.Pid, "VmHWM")
		fmt.Fprintln(stdin, "gc")
		line, _ = out.ReadString('\n')
		gcCPU, _ := strconv.ParseFloat(strings.TrimPrefix(strings.TrimSpace(line), "gccpu="), 64)
		line, _ = out.ReadString('\n')
		liveBytes, _ := strconv.ParseFloat(strings.TrimPrefix(strings.TrimSpace(line), "live="), 64)
		live, rssAfterGC := liveBytes/(1<<20), procStatusMiB(cmd.Process.Pid, "VmRSS")
		go io.Copy(io.Discard, out) //nolint:errcheck
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("daemon: %v", err)
		}
		b.Logf("daemon: anonymous RSS peak %.1f MiB (sampled)", anonPeak)
		b.Logf("daemon: idle RSS %.1f MiB; after load RSS %.1f MiB, peak %.1f MiB, heap in use %.1f MiB; after GC live heap %.1f MiB, RSS %.1f MiB; entries %v; LRU bytes %v; load %v (daemon CPU %v, GC %.2fs), %d registry requests %v",
			baseRSS, rss, peak, heap/(1<<20), live, rssAfterGC, entries, bytes, load.Round(time.Millisecond), cpu, gcCPU, s.Total(), s.Counts())
		if entries[cache.LayerTags] != repos || entries[cache.LayerHead] != repos*digests*tagsPerDigest || entries[cache.LayerFacts] != repos*digests {
			b.Errorf("the view is not all in: %v", entries)
		}
		if peak >= 200 {
			b.Errorf("peak RSS %.1f MiB, want < 200 MiB", peak)
		}
		b.ReportMetric(rss, "RSS-MiB")
		b.ReportMetric(peak, "peak-RSS-MiB")
		b.ReportMetric(anonPeak, "peak-anon-RSS-MiB")
		b.ReportMetric(heap/(1<<20), "heap-MiB")
		b.ReportMetric(live, "live-heap-MiB")
		b.ReportMetric(cpu.Seconds(), "daemon-cpu-s/load")
		b.ReportMetric(gcCPU, "gc-cpu-s/load")
		b.ReportMetric(float64(s.Total()), "requests/load")
	}
}

// ---- shared repositories ----

var appPolicies = []resolve.PolicySpec{
	{Constraint: "^1", Platforms: []string{"linux/arm64"}},
	{Strategy: "newest-build", Platforms: []string{"linux/amd64"}},
	{Constraint: "~1.0"},
	{Strategy: "digest", Constraint: "1.0.5"},
}

// appBatch is app i's render: three images over the shared repositories.
func appBatch(s *rt.Server, repos []string, i int) []resolve.Request {
	var reqs []resolve.Request
	for k, off := range []int{0, 7, 13} {
		reqs = append(reqs, resolve.Request{Image: s.Ref(repos[(i+off)%len(repos)]), Policy: appPolicies[(i+k)%len(appPolicies)]})
	}
	return reqs
}

// ---- one render: warm vs cold ----

// BenchmarkRender times one app's render (3 images) as generate sees it: without
// the daemon (a cold client), through a cold daemon over its socket, and through a
// warm one, with 0 and 20 ms of registry latency.
func BenchmarkRender(b *testing.B) {
	s := rt.New(b)
	repos := s.SeedSharedRepositories(b)
	reqs := appBatch(s, repos, 1) // newest-build, semver ~1.0, digest
	for _, latency := range []time.Duration{0, 20 * time.Millisecond} {
		s.SetLatency(latency)
		run := func(name string, batch func(b *testing.B) resolve.Batch) {
			b.Run(fmt.Sprintf("%s/latency=%s", name, latency), func(b *testing.B) {
				s.ResetCounts()
				for b.Loop() {
					ans, err := batch(b).ResolveBatch(context.Background(), "app", reqs)
					if err != nil {
						b.Fatal(err)
					}
					for _, a := range ans {
						if a.Error != "" {
							b.Fatal(a.Error)
						}
					}
				}
				b.ReportMetric(float64(s.Total())/float64(b.N), "requests/op")
			})
		}
		run("no-daemon", func(b *testing.B) resolve.Batch {
			remote, err := resolve.NewRemote(resolve.WithKeychain(authn.NewMultiKeychain()))
			if err != nil {
				b.Fatal(err)
			}
			return resolve.NewResolver(remote)
		})
		run("daemon-cold", func(b *testing.B) resolve.Batch {
			cfg := testConfig()
			cfg.Socket = "/unused.sock" // built, never listening: its resolver alone
			d, err := New(cfg, WithLogger(slog.New(slog.DiscardHandler)),
				WithRemoteOptions(resolve.WithKeychain(authn.NewMultiKeychain())))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(d.Registry.Close)
			return d.Resolver
		})
		_, client := startDaemon(b, testConfig())
		if _, err := client.ResolveBatch(context.Background(), "warm-up", reqs); err != nil {
			b.Fatal(err)
		}
		run("daemon-warm", func(*testing.B) resolve.Batch { return client })
	}
	s.SetLatency(0)
}

// ---- refresh loop ----

// BenchmarkTrackerMemory measures the live heap the refresh loop's memory takes per
// tracked app: 10,000 apps of two images each (a semver and a newest-build policy
// with a platform, as a typical app), remembered as renders are (decoded from JSON,
// so every string is the app's own). Reported as bytes/app.
func BenchmarkTrackerMemory(b *testing.B) {
	const apps = 10000
	renders := make([]Render, apps)
	for i := range renders {
		renders[i] = Render{App: fmt.Sprintf("team-%d_app-%d", i%50, i), RepoURL: "https://git.example.com/org/apps.git",
			Path: fmt.Sprintf("apps/app-%d/overlays/prod", i), Revision: "0123456789abcdef0123456789abcdef01234567",
			Images: []RenderedImage{
				{Request: resolve.Request{Image: "ghcr.io/org/web", Policy: resolve.PolicySpec{Strategy: "semver", Constraint: "~1.2", Platforms: []string{"linux/amd64"}}}, Ref: "ghcr.io/org/web:1.2.7"},
				{Request: resolve.Request{Image: fmt.Sprintf("ghcr.io/org/worker-%d", i%100), Policy: resolve.PolicySpec{Strategy: "newest-build", AllowTags: "regexp:^main-", Platforms: []string{"linux/amd64"}}}, Ref: fmt.Sprintf("ghcr.io/org/worker-%d:main-4f2a9c1", i%100)},
			}}
	}
	// As JSON, decoded while measuring: each render's strings are its own, as
	// they are when they come from a request.
	raw := make([][]byte, apps)
	for i, r := range renders {
		raw[i], _ = json.Marshal(r)
	}
	renders = nil
	var perApp float64
	for b.Loop() {
		tr := NewTracker(apps, time.Hour, "argocd", nil)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for _, js := range raw {
			var r Render
			if err := json.Unmarshal(js, &r); err != nil {
				b.Fatal(err)
			}
			if err := tr.Remember(r); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perApp = float64(after.HeapAlloc-before.HeapAlloc) / apps
		runtime.KeepAlive(tr)
	}
	b.ReportMetric(perApp, "bytes/app")
}
