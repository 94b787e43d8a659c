package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
			var opts []Option
			if c.unlimited {
				opts = append(opts, withWebhookOptions(webhook.WithRate(0, 1)))
			}
			d, _ := startDaemon(b, cfg, append(opts, WithNotifier(&fakeNotifier{}))...)
			image := s.Ref("web")
			dir := appDir(b, image+":1.0.0")
			policy := map[string]string{"image-list": "web=" + image + ":~1", "web.platforms": "linux/amd64"}
			delegatedRender(b, d.cfg.Socket, dir, argoEnviron(b, "web", "warm", policy)) // the cache filled
			stop := func() int64 { return 0 }
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
			sent := stop()
			floodTime := time.Since(floodStart)
			heapAfter := heapInUse()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(sent), "events-sent")
			b.ReportMetric(float64(sent)/floodTime.Seconds(), "events/s")
			for _, o := range []string{"unused", "rate-limited"} {
				b.ReportMetric(metricValue(b, d, "argocd_image_resolver_webhook_events_total", map[string]string{"kind": "distribution", "outcome": o}), "events-"+o)
			}
			b.ReportMetric(float64(heapAfter-heapBefore)/(1<<20), "heap-growth-MiB")
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
// says how many were sent.
func flood(tb testing.TB, addr, host string, perSecond int) (stop func() int64) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestFloodHelperProcess$")
	cmd.Env = append(os.Environ(), floodEnv+"="+fmt.Sprintf("%s|%s|%d", addr, host, perSecond))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	return func() int64 {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			tb.Fatalf("flood process: %v: %s", err, out.String())
		}
		var n int64
		for _, line := range strings.Split(out.String(), "\n") {
			if v, ok := strings.CutPrefix(line, "sent "); ok {
				n, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		return n
	}
}

const floodEnv = "IMAGE_RESOLVER_TEST_FLOOD"

// TestFloodHelperProcess is the sender of flood, run as a process of its own:
// it posts until its stdin closes, then prints how many it sent.
func TestFloodHelperProcess(t *testing.T) {
	spec := os.Getenv(floodEnv)
	if spec == "" {
		return // not a helper process: nothing to test here
	}
	parts := strings.Split(spec, "|")
	addr, host := parts[0], parts[1]
	perSecond, _ := strconv.Atoi(parts[2])
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }() //nolint:errcheck // EOF ends it
	var sent atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 5 * time.Second}
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			tick := time.NewTicker(time.Second * workers / time.Duration(perSecond))
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				repo := fmt.Sprintf("unrelated/r%d-%d", w, i)
				body := fmt.Sprintf(`{"events":[{"id":"e-%d-%d","timestamp":"2026-12-05T12:00:00Z","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":100,"digest":"sha256:%064x","length":100,"repository":%q,"tag":"v1"},"request":{"host":%q,"method":"PUT"}}]}`,
					w, i, i, repo, host)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/webhooks/distribution", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+testHookSecret)
				req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v2+json")
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body) //nolint:errcheck
					resp.Body.Close()
					sent.Add(1)
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("sent %d\n", sent.Load())
}

// BenchmarkFloodP99Interleaved: the render p99 quiet and under 1,000 webhook
// events a second for unrelated repositories (the shipped rate limit), in
// alternating rounds on one daemon, so that the machine's other load weighs on
// both alike; reports the median of the rounds' p99s and their ratio.
func BenchmarkFloodP99Interleaved(b *testing.B) {
	s := rt.New(b)
	pushTags(b, s, "web", "linux/amd64", "1.0.0", "1.1.0")
	d, _ := startDaemon(b, webhookConfig(b), WithNotifier(&fakeNotifier{}))
	image := s.Ref("web")
	dir := appDir(b, image+":1.0.0")
	policy := map[string]string{"image-list": "web=" + image + ":~1", "web.platforms": "linux/amd64"}
	n := 0
	segment := func(renders int) time.Duration {
		lat := make([]time.Duration, 0, renders)
		for range renders {
			n++
			t0 := time.Now()
			delegatedRender(b, d.cfg.Socket, dir, argoEnviron(b, "web", fmt.Sprintf("rev-%d", n), policy))
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		return lat[len(lat)*99/100]
	}
	segment(200) // warm
	var quiet, flooded []time.Duration
	for range b.N {
		quiet = append(quiet, segment(1000))
		stop := flood(b, d.WebhookAddr(), s.Host, 1000)
		time.Sleep(time.Second) // past the limiter's burst
		flooded = append(flooded, segment(1000))
		stop()
	}
	slices.Sort(quiet)
	slices.Sort(flooded)
	q, f := quiet[len(quiet)/2], flooded[len(flooded)/2]
	b.ReportMetric(float64(q.Microseconds())/1000, "p99-quiet-ms")
	b.ReportMetric(float64(f.Microseconds())/1000, "p99-flood-ms")
	b.ReportMetric(float64(f)/float64(q), "ratio")
}
