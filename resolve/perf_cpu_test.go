package resolve_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// perfRegistryEnv makes TestPerfRegistryHelperProcess serve the registry of
// BenchmarkColdNewestBuildCPU in a process of its own.
const perfRegistryEnv = "RESOLVE_PERF_REGISTRY_HELPER"

// perfTags is how many tags the repository of BenchmarkColdNewestBuildCPU has.
const perfTags = 1000

// seedPerfRegistry starts the registry of BenchmarkColdNewestBuildCPU: perfTags
// tags build-000..build-999, each a two-platform index built an hour after the
// one before (so build-999 is the newest build), 100 tags per page.
// It is closed when closer's test ends.
func seedPerfRegistry(t, closer testing.TB) *rt.Server {
	s, err := rt.NewServer(rt.WithPageSize(100))
	if err != nil {
		t.Fatal(err)
	}
	closer.Cleanup(s.Close)
	for i := range perfTags {
		tag := fmt.Sprintf("build-%03d", i)
		created := t0.Add(time.Duration(i) * time.Hour)
		s.PushIndex(t, "app", tag, rt.Index(created, []string{"linux/amd64", "linux/arm64"}, rt.WithSeed(tag)))
	}
	return s
}

// processCPU is the CPU time (user and system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestPerfRegistryHelperProcess is the registry of BenchmarkColdNewestBuildCPU's
// child-process case: this test binary, re-executed, so that the registry's CPU
// is not counted in the client's. It prints "host=HOST", then answers the lines
// of its stdin: "count" with the requests served since the last "count", "cpu"
// with its CPU seconds so far. It ends when stdin is closed.
func TestPerfRegistryHelperProcess(t *testing.T) {
	if os.Getenv(perfRegistryEnv) == "" {
		return // only BenchmarkColdNewestBuildCPU runs it, as a process of its own
	}
	s := seedPerfRegistry(t, t)
	fmt.Printf("host=%s\n", s.Host)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "count":
			fmt.Printf("%d\n", s.Total())
			s.ResetCounts()
		case "cpu":
			fmt.Printf("%f\n", processCPU().Seconds())
		}
	}
}

// perfChild is the registry served by TestPerfRegistryHelperProcess.
type perfChild struct {
	host  string
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startPerfChild starts the registry process; it ends when closer's test does.
func startPerfChild(b *testing.B, closer testing.TB) *perfChild {
	cmd := exec.Command(os.Args[0], "-test.run=^TestPerfRegistryHelperProcess$")
	cmd.Env = append(os.Environ(), perfRegistryEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	closer.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	c := &perfChild{stdin: stdin, out: bufio.NewReader(stdout)}
	line, err := c.out.ReadString('\n')
	host, ok := strings.CutPrefix(strings.TrimSpace(line), "host=")
	if err != nil || !ok {
		b.Fatalf("registry process said %q: %v", line, err)
	}
	c.host = host
	return c
}

// ask sends a command to the registry process and parses its one-line answer.
func (c *perfChild) ask(b *testing.B, cmd string) float64 {
	if _, err := fmt.Fprintln(c.stdin, cmd); err != nil {
		b.Fatal(err)
	}
	line, err := c.out.ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(line), 64)
	if err != nil {
		b.Fatalf("registry process answered %q to %s", line, cmd)
	}
	return v
}

// BenchmarkColdNewestBuildCPU resolves newest-build for linux/arm64 over 1,000
// two-platform tags, cold (a new client per resolution, as a `generate` process
// has), at no added latency: the work is CPU-bound. Each resolution reads 10 tag
// pages, then an index, the linux/arm64 manifest and its config per tag.
//
// It reports the CPU time of the process per resolution (cpu-s/op; getrusage,
// user and system, over the whole loop). With the registry in the same process
// (registry=in-process) that counts the registry's CPU too; registry=child-process
// serves it from another process (this binary re-executed), so that cpu-s/op is
// the client's alone, the registry's being server-cpu-s/op. The client is the
// Remote alone, or (client=commands) with the Limiter in front as the commands
// and the daemon build it: the per-registry governor of requests in flight, the
// rate limits, the request metrics.
func BenchmarkColdNewestBuildCPU(b *testing.B) {
	spec := resolve.PolicySpec{Strategy: "newest-build", Platforms: []string{"linux/arm64"}}
	p, err := spec.Compile()
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, host string, limited bool, requests func() float64, serverCPU func() float64) {
		repo, err := name.NewRepository(host + "/app")
		if err != nil {
			b.Fatal(err)
		}
		requests() // reset
		b.ReportAllocs()
		var server0 float64
		if serverCPU != nil {
			server0 = serverCPU()
		}
		cpu0 := processCPU()
		for b.Loop() {
			// The wrapper changes nothing (it returns the transport it is given):
			// it lets the loop close the client's connections once it is done, as
			// the end of a `generate` process does. Left open, every resolution's
			// connections (and their two goroutines each) would pile up and the
			// later resolutions would run beside thousands of them.
			var conns http.RoundTripper
			keep := func(next http.RoundTripper) http.RoundTripper { conns = next; return next }
			if limited {
				// As the commands build it (internal/compose.NewRemote): the
				// limiter, with its concurrency governor and metrics, in front.
				l := resolve.NewLimiter(nil, 64, nil)
				keep = func(next http.RoundTripper) http.RoundTripper { conns = next; return l.Wrap(next) }
			}
			reg, err := resolve.NewRemote(resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain()),
				resolve.WithTransportWrapper(keep))
			if err != nil {
				b.Fatal(err)
			}
			r := resolve.NewResolver(reg, resolve.WithConcurrency(64))
			res, err := r.Resolve(context.Background(), repo, repo.String(), p)
			if err != nil {
				b.Fatal(err)
			}
			if res.Tag != "build-999" {
				b.Fatalf("resolved %q, want build-999", res.Tag)
			}
			if c, ok := conns.(interface{ CloseIdleConnections() }); ok {
				c.CloseIdleConnections()
			}
		}
		cpu := processCPU() - cpu0
		n := float64(b.N)
		b.ReportMetric(cpu.Seconds()/n, "cpu-s/op")
		if serverCPU != nil {
			b.ReportMetric((serverCPU()-server0)/n, "server-cpu-s/op")
		}
		b.ReportMetric(requests()/n, "requests/op")
	}
	// The registries are started once (seeding takes a while), by the first
	// sub-benchmark that needs them: b.Run calls its function once per b.N tried.
	outer := b
	var inProc *rt.Server
	b.Run("registry=in-process", func(b *testing.B) {
		if inProc == nil {
			inProc = seedPerfRegistry(b, outer)
		}
		s := inProc
		run(b, s.Host, false, func() float64 {
			n := s.Total()
			s.ResetCounts()
			return float64(n)
		}, nil)
	})
	var child *perfChild
	b.Run("registry=child-process", func(b *testing.B) {
		if child == nil {
			child = startPerfChild(b, outer)
		}
		c := child
		run(b, c.host, false, func() float64 { return c.ask(b, "count") }, func() float64 { return c.ask(b, "cpu") })
	})
	b.Run("registry=child-process,client=commands", func(b *testing.B) {
		if child == nil {
			child = startPerfChild(b, outer)
		}
		c := child
		run(b, c.host, true, func() float64 { return c.ask(b, "count") }, func() float64 { return c.ask(b, "cpu") })
	})
}
