package daemon

import (
	"bufio"
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
				stop = flood(b, d.WebhookAddr(), s.Host, 1000, true).stop
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
				// VmHWM counts the binary's pages, shared with the daemon's
				// (the same file); RssAnon is the listener's own.
				b.ReportMetric(procStatusMiB(d.hookProc.Pid(), "VmHWM"), "listener-peak-MiB")
				b.ReportMetric(procStatusMiB(d.hookProc.Pid(), "RssAnon"), "listener-anon-MiB")
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

// floodSender posts perSecond distribution push events a second to addr while
// on, each for another repository no app uses, from a process of its own
// (TestFloodHelperProcess), so that the sender's CPU is not the daemon's.
type floodSender struct {
	in   io.Writer
	stop func() floodCounts // ends it; says how many were sent and answered
}

// flood starts a floodSender, sending at once when on.
func flood(tb testing.TB, addr, host string, perSecond int, on bool) *floodSender {
	in, stop := helperProcess(tb, fmt.Sprintf("send|%s|%s|%d|%t", addr, host, perSecond, on), nil)
	return &floodSender{in: in, stop: stop}
}

func (f *floodSender) on()  { io.WriteString(f.in, "on\n") }  //nolint:errcheck // a dead sender fails stop
func (f *floodSender) off() { io.WriteString(f.in, "off\n") } //nolint:errcheck

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
	_, end := helperProcess(tb, "sink", f)
	return ln.Addr().String(), func() { end() }
}

// helperProcess runs TestFloodHelperProcess with spec in a process of its own
// (with listener as its fd 3 when given), reading commands on in, until the
// returned stop closes in; stop returns the counts it printed ("sent N",
// "answered M", "seconds S").
func helperProcess(tb testing.TB, spec string, listener *os.File) (in io.Writer, stop func() floodCounts) {
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
	return stdin, func() floodCounts {
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
// the end, and the seconds it was on.
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

// floodClientsEnv, when set to N, makes BenchmarkFloodP99Interleaved ask for
// N renders at once (default 1): over the CPUs' number, they leave no CPU idle.
const floodClientsEnv = "IMAGE_RESOLVER_BENCH_FLOOD_CLIENTS"

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
// as a process of its own until its stdin closes. The sender sends while on:
// "on" and "off" lines on its stdin switch it.
func TestFloodHelperProcess(t *testing.T) {
	spec := os.Getenv(floodEnv)
	if spec == "" {
		return // not a helper process: nothing to test here
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmds := make(chan string)
	go func() {
		for sc := bufio.NewScanner(os.Stdin); sc.Scan(); {
			cmds <- sc.Text()
		}
		cancel() // EOF ends it
	}()
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
	perSecond, _ := strconv.Atoi(parts[3])
	s := &sender{addr: parts[1], host: parts[2], perSecond: perSecond, client: &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: maxInFlight}, Timeout: 5 * time.Second},
		inFlight: make(chan struct{}, maxInFlight)}
	s.run(ctx, cmds, parts[4] == "true")
	fmt.Printf("sent %d\nanswered %d\nseconds %f\n", s.sent.Load(), s.answered.Load(), s.onFor.Seconds())
}

// maxInFlight bounds a sender's deliveries waiting for answers: a second and
// more of the rate, waiting for its turn.
const maxInFlight = 1024

// sender is the flood's sender, in its helper process.
type sender struct {
	addr, host     string
	perSecond      int
	client         *http.Client
	inFlight       chan struct{}
	wg             sync.WaitGroup
	sent, answered atomic.Int64
	onFor          time.Duration
	next           int
}

// run sends while on, until ctx ends. Open loop, as a registry's
// notifications are: each event is sent on its tick whatever the answers to
// the ones before take. The listener makes a delivery over its rate wait for
// its turn (up to a second): a sender that waited for each answer before the
// next would send a fraction of the rate. A tick sends every event due since
// the sender was switched on: a ticker drops the ticks of a receiver that ran
// late, and a sender below the renders' priority does.
func (s *sender) run(ctx context.Context, cmds <-chan string, on bool) {
	defer s.wg.Wait()
	tick := time.NewTicker(time.Second / time.Duration(s.perSecond))
	defer tick.Stop()
	var since time.Time
	var base int
	switchOn := func() { on, since, base = true, time.Now(), s.next }
	switchOff := func() {
		if on {
			on, s.onFor = false, s.onFor+time.Since(since)
		}
	}
	defer switchOff()
	if on {
		switchOn()
	}
	for ctx.Err() == nil {
		if !on {
			select {
			case c := <-cmds:
				if c == "on" {
					switchOn()
				}
			case <-ctx.Done():
			}
			continue
		}
		if due := base + int(time.Since(since)*time.Duration(s.perSecond)/time.Second); s.next >= due {
			select {
			case c := <-cmds:
				if c == "off" {
					switchOff()
				}
				continue
			case <-ctx.Done():
				continue
			case <-tick.C:
			}
		}
		select {
		case s.inFlight <- struct{}{}:
			s.send(ctx, s.next)
			s.next++
		case <-ctx.Done():
		}
	}
}

// send posts event i, on a goroutine of its own.
func (s *sender) send(ctx context.Context, i int) {
	s.wg.Go(func() {
		defer func() { <-s.inFlight }()
		repo := fmt.Sprintf("unrelated/r%d", i)
		body := fmt.Sprintf(`{"events":[{"id":"e-%d","timestamp":"2026-12-05T12:00:00Z","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":100,"digest":"sha256:%064x","length":100,"repository":%q,"tag":"v1"},"request":{"host":%q,"method":"PUT"}}]}`,
			i, i, repo, s.host)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.addr+"/webhooks/distribution", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testHookSecret)
		req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v2+json")
		s.sent.Add(1)
		if resp, err := s.client.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body) //nolint:errcheck
			resp.Body.Close()
			s.answered.Add(1)
		}
	})
}

// BenchmarkFloodP99Interleaved: the render p99 quiet, under 1,000 webhook
// events a second for unrelated repositories (the shipped rate limit), and
// under the same flood sent to a sink process instead of the daemon, in
// rounds of a segment of 500 renders of each kind on one daemon (b.N rounds,
// the order turning), so that the machine's other load weighs on all alike.
// Reported: the p99 of every render of a kind pooled, and the median of the
// segments' p99s, with their ratios. On a machine of few cores the sender and
// the kernel's loopback share the CPUs the renders use: flood/sink is what the
// daemon's handling of the events costs its renders, flood/quiet what the
// whole flood costs on this machine. The sender and the sink run at the
// listener's priority (SCHED_IDLE): the sender stands for a registry
// elsewhere. IMAGE_RESOLVER_BENCH_FLOOD_IN_PROCESS=1 serves the webhooks in
// the daemon's process (the baseline); IMAGE_RESOLVER_BENCH_FLOOD_WORKERS=1
// renders in worker processes, as the sidecar does.
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
	var cpu [3]time.Duration      // this process's CPU per render: quiet, flood, sink
	var pooled [3][]time.Duration // every render's latency, by kind
	clients := 1                  // renders asked for at once: more than the CPUs keeps them busy
	if v, err := strconv.Atoi(os.Getenv(floodClientsEnv)); err == nil && v > 0 {
		clients = v
	}
	segment := func(renders int, kind int) time.Duration {
		lat := make([]time.Duration, 0, renders)
		var mu sync.Mutex
		var wg sync.WaitGroup
		cpu0 := processCPU()
		for c := range clients {
			wg.Go(func() {
				for i := c; i < renders; i += clients {
					mu.Lock()
					n++
					rev := fmt.Sprintf("rev-%d", n)
					mu.Unlock()
					t0 := time.Now()
					delegatedRender(b, d.cfg.Socket, dir, argoEnviron(b, "web", rev, policy))
					mu.Lock()
					lat = append(lat, time.Since(t0))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		cpu[kind] += (processCPU() - cpu0) / time.Duration(renders*b.N)
		pooled[kind] = append(pooled[kind], lat...)
		slices.Sort(lat)
		return lat[len(lat)*99/100]
	}
	// Two senders, started once and switched on in turn: one to the daemon's
	// listener, one to the sink. A round runs a segment of each kind, in an
	// order that turns with the rounds, each after a second that lets the one
	// before settle (the deliveries waiting for their turn answered) and, when
	// flooded, the listener's burst pass.
	senders := [3]*floodSender{nil, flood(b, d.WebhookAddr(), s.Host, 1000, false), flood(b, sinkAddr, s.Host, 1000, false)}
	var counts [3]floodCounts
	defer func() { // deferred, so that a render failing the benchmark still stops them
		for k, f := range senders {
			if f != nil {
				counts[k] = f.stop()
			}
		}
	}()
	segment(200, 0) // warm
	cpu[0], pooled[0] = 0, nil
	var p99s [3][]time.Duration
	for r := range b.N {
		for i := range 3 {
			kind := (r + i) % 3
			if senders[kind] != nil {
				senders[kind].on()
			}
			time.Sleep(time.Second)
			p99s[kind] = append(p99s[kind], segment(floodSegmentRenders, kind))
			if senders[kind] != nil {
				senders[kind].off()
			}
		}
	}
	for k, f := range senders[1:] {
		counts[k+1], senders[k+1] = f.stop(), nil
	}
	quiet, flooded, sunk := p99s[0], p99s[1], p99s[2]
	median := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	q, f, k := median(quiet), median(flooded), median(sunk)
	b.ReportMetric(float64(q.Microseconds())/1000, "p99-quiet-ms")
	b.ReportMetric(float64(f.Microseconds())/1000, "p99-flood-ms")
	b.ReportMetric(float64(k.Microseconds())/1000, "p99-sink-ms")
	b.ReportMetric(float64(f)/float64(k), "flood/sink")
	b.ReportMetric(float64(f)/float64(q), "flood/quiet")
	// The p99 of every render of a kind, all rounds pooled: steadier than the
	// median of the rounds' p99s, each of which is its 10th slowest render.
	var p99 [3]time.Duration
	for k := range pooled {
		slices.Sort(pooled[k])
		p99[k] = pooled[k][len(pooled[k])*99/100]
	}
	b.ReportMetric(float64(p99[1])/float64(p99[0]), "pooled-flood/quiet")
	b.ReportMetric(float64(p99[1])/float64(p99[2]), "pooled-flood/sink")
	b.ReportMetric(float64(p99[0].Microseconds())/1000, "pooled-p99-quiet-ms")
	for k, name := range []string{"", "flood", "sink"} {
		if n := counts[k]; n.seconds > 0 {
			b.ReportMetric(float64(n.sent)/n.seconds, "sent/s-"+name)
			b.ReportMetric(float64(n.answered)/n.seconds, "answered/s-"+name)
		}
	}
	b.ReportMetric(float64(cpu[0].Microseconds())/1000, "cpu-ms/render-quiet")
	b.ReportMetric(float64(cpu[1].Microseconds())/1000, "cpu-ms/render-flood")
	b.ReportMetric(float64(cpu[2].Microseconds())/1000, "cpu-ms/render-sink")
}

// floodSegmentRenders is how many renders a segment of
// BenchmarkFloodP99Interleaved times.
const floodSegmentRenders = 500

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
