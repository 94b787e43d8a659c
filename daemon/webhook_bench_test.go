package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/webhook"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// BenchmarkRenderDuringWebhookFlood: the render latency of an app through the
// daemon (a new revision each time, its images from the cache), quiet and while
// 1,000 authenticated webhook events per second arrive for repositories no app
// uses: with the shipped rate limit (200/s, the rest answered 429) and with the
// limit lifted (every event parsed and handed to the daemon). Reported: p50 and
// p99 render latency, the events by outcome, and the heap in use after the run
// against before it (memory flat: no event is kept).
func BenchmarkRenderDuringWebhookFlood(b *testing.B) {
	for _, c := range []struct {
		name      string
		flood     bool
		unlimited bool
	}{
		{"quiet", false, false},
		{"flood-1000-per-s-shipped-limit", true, false},
		{"flood-1000-per-s-no-limit", true, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := rt.New(b)
			pushTags(b, s, "web", "linux/amd64", "1.0.0", "1.1.0")
			cfg := webhookConfig(b)
			opts := floodDaemonOptions()
			if c.unlimited {
				opts = append(opts, withWebhookOptions(webhook.WithRate(0, 1)),
					withWebhookProcessOptions(webhook.WithProcessLimits(webhook.Limits{Rate: -1})))
			}
			d, _ := startDaemon(b, cfg, opts...)
			image := s.Ref("web")
			dir := appDir(b, image+":1.0.0")
			policy := map[string]string{"image-list": "web=" + image + ":~1", "web.platforms": "linux/amd64"}
			delegatedRender(b, d.cfg.Socket, dir, argoEnviron(b, "web", "warm", policy)) // the cache filled
			stop := func() floodCounts { return floodCounts{} }
			floodStart := time.Now()
			if c.flood {
				stop = flood(b, d.WebhookAddr(), s.Host, 1000)
				time.Sleep(time.Second) // past the limiter's burst: the steady flood
			}
			heapBefore := heapInUse()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				delegatedRender(b, d.cfg.Socket, dir, argoEnviron(b, "web", fmt.Sprintf("rev-%d", i), policy))
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			n := stop()
			floodTime := time.Since(floodStart)
			heapAfter := heapInUse()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(n.sent), "events-sent")
			b.ReportMetric(float64(n.sent)/floodTime.Seconds(), "sent/s")
			b.ReportMetric(float64(n.answered)/floodTime.Seconds(), "answered/s")
			for _, o := range []string{"unused", "rate-limited"} {
				b.ReportMetric(metricValue(b, d, "argocd_image_resolver_webhook_events_total", map[string]string{"kind": "distribution", "outcome": o}), "events-"+o)
			}
			b.ReportMetric(float64(heapAfter-heapBefore)/(1<<20), "heap-growth-MiB")
			if d.hookProc != nil {
				b.ReportMetric(procStatusMiB(d.hookProc.Pid(), "VmHWM"), "listener-peak-MiB")
			}
		})
	}
}

// heapInUse is the heap in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// flood posts perSecond distribution push events a second, each for another
// repository no app uses, from a process of its own (TestFloodHelperProcess),
// so that the sender's CPU is not the daemon's, until the returned stop, which
// says how many were sent and answered.
func flood(tb testing.TB, addr, host string, perSecond int) (stop func() floodCounts) {
	return helperProcess(tb, fmt.Sprintf("send|%s|%s|%d", addr, host, perSecond), nil)
}

// floodSink starts a process of its own that answers every request 200 after
// reading its body, as cheaply as an HTTP server can: the flood sent there
// costs the machine what it costs a sender and the kernel, and the daemon
// nothing. It returns the sink's address and its stop.
func floodSink(tb testing.TB) (addr string, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	end := helperProcess(tb, "sink", f)
	return ln.Addr().String(), func() { end() }
}

// helperProcess runs TestFloodHelperProcess with spec in a process of its own
// (with listener as its fd 3 when given) until the returned stop closes its
// stdin; stop returns the counts it printed ("sent N", "answered M").
func helperProcess(tb testing.TB, spec string, listener *os.File) (stop func() floodCounts) {
	args := []string{os.Args[0], "-test.run=^TestFloodHelperProcess$"}
	if cpus := os.Getenv(floodCPUsEnv); cpus != "" {
		args = append([]string{"taskset", "-c", cpus}, args...)
	}
	// The sender stands for a registry, whose CPU is elsewhere; the sink for the
	// same deliveries received, and dropped, by a process of the listener's
	// priority. Both run at it, on CPU time nothing measured wants.
	args = append([]string{"chrt", "--idle", "0", "nice", "-n", strconv.Itoa(webhook.DefaultNice)}, args...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), floodEnv+"="+spec)
	if listener != nil {
		cmd.ExtraFiles = []*os.File{listener}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	return func() floodCounts {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			tb.Fatalf("flood helper process %q: %v: %s", spec, err, out.String())
		}
		var n floodCounts
		for _, line := range strings.Split(out.String(), "\n") {
			if v, ok := strings.CutPrefix(line, "sent "); ok {
				n.sent, _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(line, "answered "); ok {
				n.answered, _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(line, "seconds "); ok {
				n.seconds, _ = strconv.ParseFloat(v, 64)
			}
		}
		return n
	}
}

// floodCounts are a sender's deliveries: sent, and answered (any status) by
// the end, and the seconds from its first to its stop.
type floodCounts struct {
	sent, answered int64
	seconds        float64
}

const floodEnv = "IMAGE_RESOLVER_TEST_FLOOD"

// floodCPUsEnv, when set, names the CPUs (taskset -c) the sender and the sink
// run on: run the benchmark itself on the others (taskset -c 0 daemon.test
// -test.bench ...) to keep the sender's CPU out of the daemon's.
const floodCPUsEnv = "IMAGE_RESOLVER_BENCH_FLOOD_CPUS"

// floodWorkersEnv, when set, makes BenchmarkFloodP99Interleaved's daemon render
// in worker processes, as the sidecar runs it, rather than in its own process.
const floodWorkersEnv = "IMAGE_RESOLVER_BENCH_FLOOD_WORKERS"

// floodInProcessEnv, when set, makes the flood benchmarks' daemon serve the
// webhooks in its own process, as before the listener process (the baseline).
const floodInProcessEnv = "IMAGE_RESOLVER_BENCH_FLOOD_IN_PROCESS"

// floodDaemonOptions serve the webhooks as the sidecar does, in a listener
// process, unless floodInProcessEnv is set.
func floodDaemonOptions() []Option {
	opts := []Option{WithNotifier(&fakeNotifier{})}
	if os.Getenv(floodInProcessEnv) == "" {
		opts = append(opts, WithWebhookListener(webhookListenerCommand))
	}
	return opts
}

// TestFloodHelperProcess is the sender of flood, or the sink of floodSink, run
// as a process of its own until its stdin closes.
func TestFloodHelperProcess(t *testing.T) {
	spec := os.Getenv(floodEnv)
	if spec == "" {
		return // not a helper process: nothing to test here
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }() //nolint:errcheck // EOF ends it
	if spec == "sink" {
		ln, err := net.FileListener(os.NewFile(3, "listener"))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body) //nolint:errcheck
		})}
		go srv.Serve(ln) //nolint:errcheck // closed at the end
		<-ctx.Done()
		srv.Close()
		return
	}
	parts := strings.Split(spec, "|")
	addr, host := parts[1], parts[2]
	perSecond, _ := strconv.Atoi(parts[3])
	// Open loop, as a registry's notifications are: each event is sent on its
	// tick whatever the answers to the ones before take. The listener makes a
	// delivery over its rate wait for its turn (up to a second): a sender that
	// waited for each answer before the next would send a fraction of the rate.
	// A tick sends every event due since the start: a ticker drops the ticks of
	// a receiver that ran late, and a sender below the renders' priority does.
	var sent, answered atomic.Int64
	var wg sync.WaitGroup
	const maxInFlight = 1024 // a second and more of the rate, waiting for its turn
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: maxInFlight}, Timeout: 5 * time.Second}
	inFlight := make(chan struct{}, maxInFlight)
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	start := time.Now()
	for i := 0; ctx.Err() == nil; i++ {
		if due := int(time.Since(start) * time.Duration(perSecond) / time.Second); i >= due {
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
		select {
		case inFlight <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-inFlight }()
			repo := fmt.Sprintf("unrelated/r%d", i)
			body := fmt.Sprintf(`{"events":[{"id":"e-%d","timestamp":"2026-12-05T12:00:00Z","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":100,"digest":"sha256:%064x","length":100,"repository":%q,"tag":"v1"},"request":{"host":%q,"method":"PUT"}}]}`,
				i, i, repo, host)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/webhooks/distribution", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testHookSecret)
			req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v2+json")
			sent.Add(1)
			if resp, err := client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body) //nolint:errcheck
				resp.Body.Close()
				answered.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Printf("sent %d\nanswered %d\nseconds %f\n", sent.Load(), answered.Load(), time.Since(start).Seconds())
}

// BenchmarkFloodP99Interleaved: the render p99 quiet, under 1,000 webhook
// events a second for unrelated repositories (the shipped rate limit), and
// under the same flood sent to a sink process instead of the daemon, in
// alternating rounds on one daemon, so that the machine's other load weighs on
// all alike. Reported: the median of the rounds' p99s and their ratios. On a
// machine of few cores the sender and the kernel's loopback share the CPUs the
// renders use: flood/sink is what the daemon's handling of the events costs its
// renders (the figure: within 1.10), flood/quiet what the whole flood costs on
// this machine.
func BenchmarkFloodP99Interleaved(b *testing.B) {
	s := rt.New(b)
	pushTags(b, s, "web", "linux/amd64", "1.0.0", "1.1.0")
	opts := floodDaemonOptions()
	if os.Getenv(floodWorkersEnv) != "" {
		opts = append(opts, WithRenderWorkers(workerCommand))
	}
	d, _ := startDaemon(b, webhookConfig(b), opts...)
	image := s.Ref("web")
	dir := appDir(b, image+":1.0.0")
	policy := map[string]string{"image-list": "web=" + image + ":~1", "web.platforms": "linux/amd64"}
	sinkAddr, stopSink := floodSink(b)
	defer stopSink()
	n := 0
	var cpu [3]time.Duration // this process's CPU per render: quiet, flood, sink
	segment := func(renders int, kind int) time.Duration {
		lat := make([]time.Duration, 0, renders)
		cpu0 := processCPU()
		for range renders {
			n++
			t0 := time.Now()
			delegatedRender(b, d.cfg.Socket, dir, argoEnviron(b, "web", fmt.Sprintf("rev-%d", n), policy))
			lat = append(lat, time.Since(t0))
		}
		cpu[kind] += (processCPU() - cpu0) / time.Duration(renders*b.N)
		slices.Sort(lat)
		return lat[len(lat)*99/100]
	}
	var rates, sentRates [3][]float64 // events a second answered, sent: -, flood, sink
	floodedSegment := func(addr string, kind int) time.Duration {
		stop := flood(b, addr, s.Host, 1000)
		// Deferred, so that a render failing the benchmark still stops the sender.
		defer func() {
			n := stop()
			rates[kind] = append(rates[kind], float64(n.answered)/n.seconds)
			sentRates[kind] = append(sentRates[kind], float64(n.sent)/n.seconds)
		}()
		time.Sleep(time.Second) // past the limiter's burst
		return segment(1000, kind)
	}
	segment(200, 0) // warm
	cpu[0] = 0
	var quiet, flooded, sunk []time.Duration
	for range b.N {
		quiet = append(quiet, segment(1000, 0))
		flooded = append(flooded, floodedSegment(d.WebhookAddr(), 1))
		sunk = append(sunk, floodedSegment(sinkAddr, 2))
	}
	median := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	q, f, k := median(quiet), median(flooded), median(sunk)
	b.ReportMetric(float64(q.Microseconds())/1000, "p99-quiet-ms")
	b.ReportMetric(float64(f.Microseconds())/1000, "p99-flood-ms")
	b.ReportMetric(float64(k.Microseconds())/1000, "p99-sink-ms")
	b.ReportMetric(float64(f)/float64(k), "flood/sink")
	b.ReportMetric(float64(f)/float64(q), "flood/quiet")
	b.ReportMetric(slices.Min(rates[1]), "min-events/s-flood")
	b.ReportMetric(slices.Min(rates[2]), "min-events/s-sink")
	b.ReportMetric(slices.Min(sentRates[1]), "min-sent/s-flood")
	b.ReportMetric(slices.Min(sentRates[2]), "min-sent/s-sink")
	b.ReportMetric(float64(cpu[0].Microseconds())/1000, "cpu-ms/render-quiet")
	b.ReportMetric(float64(cpu[1].Microseconds())/1000, "cpu-ms/render-flood")
	b.ReportMetric(float64(cpu[2].Microseconds())/1000, "cpu-ms/render-sink")
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
