package cache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// BenchmarkRedisValue encodes and decodes one value as the tier writes and
// reads it, with and without the MAC: a tag list of 100 tags, a descriptor and a
// 2 KiB manifest-sized blob.
func BenchmarkRedisValue(b *testing.B) {
	var tags []string
	for i := range 100 {
		tags = append(tags, fmt.Sprintf("1.%d.%d", i/10, i%10))
	}
	blob := bytes.Repeat([]byte(`{"layers":[{"digest":"sha256:0123"}]}`), 2<<10/38)
	sum := sha256.Sum256(blob)
	blobKey := "sha256:" + hex.EncodeToString(sum[:])
	ctx := context.Background()
	for _, mac := range []bool{false, true} {
		var key []byte
		if mac {
			key = testMACKey
		}
		rd := codecRedis(key)
		b.Run(fmt.Sprintf("tags/mac=%v", mac), func(b *testing.B) {
			for b.Loop() {
				raw, _ := encodeFor(rd, tagsCodec, "argocd-image-resolver:v2:tags:r/app", "r/app", tags, time.Minute)
				if _, _, reason, err := decodeFrom(ctx, rd, tagsCodec, "argocd-image-resolver:v2:tags:r/app", "r/app", raw); reason != "" {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("blob/mac=%v", mac), func(b *testing.B) {
			for b.Loop() {
				raw, _ := encodeFor(rd, blobCodec, "argocd-image-resolver:v2:blob:"+blobKey, blobKey, blob, 0)
				if _, _, reason, err := decodeFrom(ctx, rd, blobCodec, "argocd-image-resolver:v2:blob:"+blobKey, blobKey, raw); reason != "" {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRedisTier renders 60 apps (3 images each over 20 repositories of 100
// multi-arch tags, newest-build among the policies) spread over 1 or 3 cold
// daemons, with and without the Redis tier (a real redis-server, emptied before
// each round), against a registry answering in 2ms. It reports the registry
// requests, tag lists and pings (GET /v2/, per daemon and repository) one round
// costs the installation, and the resolution
// latency of an app (mean and 95th percentile). "restart" is 3 daemons with empty
// memory over a Redis that holds the view (replicas restarted).
func BenchmarkRedisTier(b *testing.B) {
	const apps = 60
	s := rt.New(b)
	repos := s.SeedSharedRepositories(b)
	s.SetLatency(2 * time.Millisecond)
	rs := redistest.Start(b)
	for _, bc := range []struct {
		name    string
		daemons int
		redis   bool
		restart bool
		mac     bool
	}{
		{"daemons=1/redis=off", 1, false, false, false},
		{"daemons=1/redis=on", 1, true, false, false},
		{"daemons=3/redis=off", 3, false, false, false},
		{"daemons=3/redis=on", 3, true, false, false},
		{"daemons=3/redis=on/mac", 3, true, false, true},
		{"daemons=3/redis=on/restart", 3, true, true, false},
		{"daemons=3/redis=on/mac/restart", 3, true, true, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var lat []time.Duration
			var requests, lists, pings int
			for b.Loop() {
				b.StopTimer()
				rs.Flush(b)
				if bc.restart { // replicas that filled Redis, then restarted
					warm := newBenchDaemons(b, s, rs.Addr, bc.daemons, true, bc.mac)
					renderTimed(b, warm, s, repos, apps)
					for _, f := range warm {
						f.reg.Close()
					}
				}
				fs := newBenchDaemons(b, s, rs.Addr, bc.daemons, bc.redis, bc.mac)
				s.ResetCounts()
				b.StartTimer()
				lat = append(lat, renderTimed(b, fs, s, repos, apps)...)
				b.StopTimer()
				requests += s.Total()
				lists += s.Count(rt.Tags)
				pings += s.Count(rt.Ping)
				for _, f := range fs {
					f.reg.Close()
				}
				b.StartTimer()
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			var sum time.Duration
			for _, d := range lat {
				sum += d
			}
			b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
			b.ReportMetric(float64(lists)/float64(b.N), "lists/op")
			b.ReportMetric(float64(pings)/float64(b.N), "pings/op")
			b.ReportMetric(float64(sum.Milliseconds())/float64(len(lat)), "ms/app")
			b.ReportMetric(float64(lat[len(lat)*95/100].Milliseconds()), "p95-ms/app")
		})
	}
}

func newBenchDaemons(b *testing.B, s *rt.Server, addr string, n int, redis, mac bool) []*fixture {
	var fs []*fixture
	var ro RedisOptions
	if mac {
		ro.MACKey = keyFunc(testMACKey)
	}
	for range n {
		if redis {
			fs = append(fs, newSharedFixture(b, s, addr, ro))
		} else {
			fs = append(fs, newFixture(b, s, nil, nil))
		}
	}
	return fs
}

// renderTimed renders n apps at once, app i on daemon i%len(fs), and returns how
// long each took.
func renderTimed(b *testing.B, fs []*fixture, s *rt.Server, repos []string, n int) []time.Duration {
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			ans, err := fs[i%len(fs)].resolver.ResolveBatch(context.Background(), fmt.Sprintf("app-%d", i), appBatch(s, repos, i))
			lat[i] = time.Since(start)
			if err != nil {
				b.Error(err)
				return
			}
			for _, a := range ans {
				if a.Error != "" {
					b.Errorf("app %d: %s", i, a.Error)
				}
			}
		})
	}
	wg.Wait()
	return lat
}

var _ resolve.Batch = (*resolve.Resolver)(nil)
