package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// growthEnv makes TestGrowthHelperProcess resolve: its value is the repository
// (host/path) to resolve newest-build over, then a space, then the tag wanted.
const growthEnv = "DAEMON_BENCH_GROWTH_REPO"

// growthMidProfileEnv, a duration, makes TestGrowthHelperProcess also write its
// heap profile (heapProfileEnv, suffixed .mid) that long into the resolution:
// what the walk holds before it ranks the tags, the peak's live part, which the
// profile at the end (the cache alone) does not show.
const growthMidProfileEnv = "DAEMON_BENCH_GROWTH_MID"

// growthReport is what TestGrowthHelperProcess prints, as one JSON line.
type growthReport struct {
	Tag       string  `json:"tag"`
	PeakMiB   float64 `json:"peakMiB"`   // VmHWM: the process's peak RSS, the binary's pages included
	IdleMiB   float64 `json:"idleMiB"`   // VmRSS before the resolution
	AnonMiB   float64 `json:"anonMiB"`   // RssAnon's peak, sampled every 10 ms
	FileMiB   float64 `json:"fileMiB"`   // RssFile at the end
	LiveMiB   float64 `json:"liveMiB"`   // the heap after a collection, the cache still held
	CPUSecs   float64 `json:"cpuSecs"`   // user and system CPU of the resolution
	GCCPUSecs float64 `json:"gcCPUSecs"` // the garbage collector's part of it (runtime/metrics)
	NumGC     uint32  `json:"numGC"`     // collections during the resolution
	Candidate int     `json:"candidate"` // candidates of the resolution
}

// selfStatusMiB is one field of /proc/self/status, in MiB.
func selfStatusMiB(field string) float64 { return procStatusMiB(os.Getpid(), field) }

// TestGrowthHelperProcess is the process of BenchmarkNewestBuildMemoryGrowth: this
// test binary, re-executed, so that each size starts clean and VmHWM is the
// resolution's alone. It builds the daemon's stack (cache.NewRegistry over
// resolve.NewRemote without a memo, resolve.NewResolver at the registry
// concurrency the daemon uses; the GC target serve sets), resolves newest-build
// once, cold, and prints a growthReport.
func TestGrowthHelperProcess(t *testing.T) {
	spec := os.Getenv(growthEnv)
	if spec == "" {
		return // only BenchmarkNewestBuildMemoryGrowth runs it, as a process of its own
	}
	ref, want, _ := strings.Cut(spec, " ")
	profile := os.Getenv(heapProfileEnv)
	if profile != "" {
		runtime.MemProfileRate = 4096 // a profile precise enough to count small entries
	}
	TuneGC() // as serve and sidecar do
	repo, err := name.NewRepository(ref)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := resolve.NewRemote(resolve.WithKeychain(authn.NewMultiKeychain()), resolve.WithoutMemo(),
		resolve.WithJobs(resolve.DefaultRegistryConcurrency))
	if err != nil {
		t.Fatal(err)
	}
	reg := cache.NewRegistry(remote)
	defer reg.Close()
	r := resolve.NewResolver(reg, resolve.WithConcurrency(resolve.DefaultRegistryConcurrency))
	p, err := resolve.PolicySpec{Strategy: "newest-build", Platforms: []string{"linux/amd64"}}.Compile()
	if err != nil {
		t.Fatal(err)
	}

	var rep growthReport
	var anonPeak atomic.Int64 // KiB
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if v := int64(selfStatusMiB("RssAnon") * 1024); v > anonPeak.Load() { // only this goroutine stores
				anonPeak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	rep.IdleMiB = selfStatusMiB("VmRSS")
	cpu0, gc0 := processCPU(), gcCPUSeconds()
	if d, err := time.ParseDuration(os.Getenv(growthMidProfileEnv)); err == nil && profile != "" {
		time.AfterFunc(d, func() { writeHeapProfile(t, profile+".mid."+want) })
	}
	res, err := r.Resolve(context.Background(), repo, ref, p)
	rep.CPUSecs, rep.GCCPUSecs = (processCPU() - cpu0).Seconds(), gcCPUSeconds()-gc0
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	if res.Tag != want {
		t.Fatalf("resolved %q, want %q", res.Tag, want)
	}
	rep.Tag, rep.Candidate = res.Tag, res.Candidates
	rep.PeakMiB, rep.FileMiB = selfStatusMiB("VmHWM"), selfStatusMiB("RssFile")
	rep.AnonMiB = float64(anonPeak.Load()) / 1024
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	rep.LiveMiB = float64(after.HeapAlloc) / (1 << 20)
	rep.NumGC = after.NumGC - before.NumGC - 1 // not the one just above
	if profile != "" {
		writeHeapProfile(t, profile+"."+want)
	}
	runtime.KeepAlive(reg)
	out, _ := json.Marshal(rep)
	fmt.Printf("growth=%s\n", out)
}

// writeHeapProfile writes the heap profile to path (go tool pprof
// -sample_index=inuse_space for what the cache holds, alloc_space for what the
// resolution allocated).
func writeHeapProfile(t *testing.T, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkNewestBuildMemoryGrowth measures how a cold newest-build's memory grows
// with the tags it ranks: for linux/amd64 over 1,000 and over 10,000 build-N
// two-platform indexes built an hour apart (the cold newest-build case of
// docs/benchmarks.md, 100 tags a page), resolved through the daemon's stack (cache,
// Remote, Resolver) in a process of its own per size, so that each starts clean
// and its peak RSS (VmHWM) is that resolution's. It reports both peaks, the
// anonymous part of each (VmHWM counts the binary's pages too), the ratio of
// the 10,000-tag peak to the 1,000-tag one, and what each tag beyond the first
// 1,000 added to the peak (KiB): the ratio alone flatters a large binary, whose
// pages (RssFile, about 95 MiB here) weigh on both peaks alike.
func BenchmarkNewestBuildMemoryGrowth(b *testing.B) {
	sizes := []int{1000, 10000}
	s := rt.New(b, rt.WithPageSize(100))
	sc := &rt.Scenario{Repositories: map[string]*rt.Repository{}}
	for _, n := range sizes {
		sc.Repositories[fmt.Sprintf("growth/builds-%d", n)] = &rt.Repository{Generate: &rt.Generate{Count: n, Format: "build-%d",
			Created: "2026-01-01T00:00:00Z", Interval: "1h", Index: true, Platforms: []string{"linux/amd64", "linux/arm64"}}}
	}
	start := time.Now()
	if err := s.SeedScenario(sc); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %v builds in %v", sizes, time.Since(start).Round(time.Millisecond))

	for b.Loop() {
		reps := map[int]growthReport{}
		for _, n := range sizes {
			s.ResetCounts()
			rep := growthChild(b, fmt.Sprintf("%s/growth/builds-%d build-%d", s.Host, n, n-1))
			reps[n] = rep
			b.Logf("%5d tags: peak RSS %.1f MiB (idle %.1f; anonymous peak %.1f, file %.1f), live heap %.1f MiB, %d GCs, CPU %.2fs (GC %.2fs), %d requests",
				n, rep.PeakMiB, rep.IdleMiB, rep.AnonMiB, rep.FileMiB, rep.LiveMiB, rep.NumGC, rep.CPUSecs, rep.GCCPUSecs, s.Total())
		}
		small, large := reps[sizes[0]], reps[sizes[1]]
		b.ReportMetric(small.PeakMiB, "peak-1k-MiB")
		b.ReportMetric(large.PeakMiB, "peak-10k-MiB")
		b.ReportMetric(small.AnonMiB, "anon-1k-MiB")
		b.ReportMetric(large.AnonMiB, "anon-10k-MiB")
		b.ReportMetric(large.PeakMiB/small.PeakMiB, "peak-ratio")
		b.ReportMetric(large.AnonMiB/small.AnonMiB, "anon-ratio")
		// The ratio depends on the fixed floor (the binary's pages, RssFile, most of
		// the 1,000-tag peak); what each tag adds does not.
		b.ReportMetric((large.PeakMiB-small.PeakMiB)*1024/float64(sizes[1]-sizes[0]), "peak-KiB/tag")
		b.ReportMetric(large.FileMiB, "file-10k-MiB")
	}
}

// growthChild runs TestGrowthHelperProcess over spec (growthEnv) and returns its
// report.
func growthChild(b *testing.B, spec string) growthReport {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGrowthHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), growthEnv+"="+spec)
	if v := os.Getenv(helperGOGCEnv); v != "" {
		cmd.Env = append(cmd.Env, "GOGC="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("helper: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if js, ok := strings.CutPrefix(sc.Text(), "growth="); ok {
			var rep growthReport
			if err := json.Unmarshal([]byte(js), &rep); err != nil {
				b.Fatal(err)
			}
			return rep
		}
	}
	b.Fatalf("helper printed no report:\n%s", out)
	return growthReport{}
}

// gcCPUSeconds is the CPU the garbage collector used so far, as the runtime
// estimates it.
func gcCPUSeconds() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64()
}
