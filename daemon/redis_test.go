package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// Several repo-server replicas, each with its daemon, sharing one Redis: the
// registry sees one fetch per key for the whole installation.

// replica is one daemon of the installation, stoppable mid-test.
type replica struct {
	d      *Daemon
	client *Client
	stop   func() // stops the daemon and waits for it
}

func startReplica(t *testing.T, redisAddr string) *replica {
	t.Helper()
	cfg := testConfig()
	cfg.Socket = socketPath(t)
	useRedis(&cfg, redisAddr)
	return startStoppable(t, cfg)
}

// useRedis shares the daemon's view through the redis-server at addr, with
// command timeouts of 5s rather than 200ms: a loaded test machine must not pass
// for a Redis that stopped answering (which opens the circuit, and each replica
// then fetches alone). A Redis killed by a test is seen at once (refused).
func useRedis(cfg *config.Config, addr string) {
	cfg.Redis.Address = addr
	cfg.Redis.DialTimeout, cfg.Redis.Timeout = 5*time.Second, 5*time.Second
}

// startStoppable starts a daemon that the test may stop (and start again) midway.
func startStoppable(t *testing.T, cfg config.Config, opts ...Option) *replica {
	t.Helper()
	opts = append([]Option{WithLogger(slog.New(slog.DiscardHandler)),
		WithRemoteOptions(resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain()))}, opts...)
	d, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-errc:
		cancel()
		t.Fatalf("daemon: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-errc; err != nil {
				t.Errorf("daemon: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &replica{d: d, client: NewClient(cfg.Socket), stop: stop}
}

// seedInstallation pushes n repositories of multi-arch indexes and
// single-platform images.
func seedInstallation(t *testing.T, s *rt.Server, prefix string, n int) []string {
	var repos []string
	for r := range n {
		repo := fmt.Sprintf("shop/%s%d", prefix, r)
		repos = append(repos, repo)
		for i, tag := range []string{"1.0.0", "1.1.0", "1.2.0", "2.0.0", "2.1.0", "2.2.0"} {
			if i%2 == 0 {
				s.PushIndex(t, repo, tag, rt.Index(day(i), []string{"linux/amd64", "linux/arm64"}, rt.WithSeed(repo+tag)))
			} else {
				s.Push(t, repo, tag, rt.Image(day(i), "linux/amd64", rt.WithSeed(repo+tag)))
			}
		}
	}
	return repos
}

// replicaBatch is app i's resolution batch: two images, policies that need tag lists,
// descriptors, manifests and configs.
func replicaBatch(s *rt.Server, repos []string, i int) []resolve.Request {
	policies := []resolve.PolicySpec{
		{Strategy: "newest-build"},
		{Platforms: []string{"linux/arm64"}},
		{Constraint: "~1.1"},
		{Strategy: "digest", Constraint: "2.0.0"},
		{Constraint: "^2", Platforms: []string{"linux/amd64"}, PinDigest: true},
	}
	return []resolve.Request{
		{Image: s.Ref(repos[i%len(repos)]), Policy: policies[i%len(policies)]},
		{Image: s.Ref(repos[(i+1)%len(repos)]), Policy: policies[(i/3)%len(policies)]},
	}
}

// renderOn runs n resolution batches at once through the replicas' sockets, app
// i on replica i%len, and fails the test on any failure.
func renderOn(t *testing.T, rs []*replica, s *rt.Server, repos []string, n int, during func()) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, 2*n)
	for i := range n {
		wg.Go(func() {
			r := rs[i%len(rs)]
			ans, err := r.client.ResolveBatch(context.Background(), fmt.Sprintf("ns_app-%d", i), replicaBatch(s, repos, i))
			if err != nil {
				errs <- err.Error()
				return
			}
			for j, a := range ans {
				if a.Error != "" {
					errs <- fmt.Sprintf("app %d image %d: %s", i, j, a.Error)
				}
			}
		})
	}
	if during != nil {
		during()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// fetchedTwice lists registry requests for one key made more than once.
func fetchedTwice(s *rt.Server) []string {
	seen := map[string]int{}
	for _, r := range s.Requests() {
		switch r.Kind {
		case rt.Tags, rt.ManifestHead, rt.ManifestGet, rt.BlobGet:
			seen[r.Method+" "+r.Path]++
		}
	}
	var out []string
	for k, n := range seen {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s x%d", k, n))
		}
	}
	return out
}

func metricValue(t testing.TB, d *Daemon, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := d.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s %v", name, labels)
	return 0
}

func TestReplicasShareOneViewThroughRedis(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	repos := seedInstallation(t, s, "svc", 6)
	s.SetLatency(5 * time.Millisecond) // so that the replicas' fetches overlap
	replicas := []*replica{startReplica(t, rs.Addr), startReplica(t, rs.Addr), startReplica(t, rs.Addr)}
	for i, r := range replicas {
		if up := metricValue(t, r.d, "argocd_image_resolver_cache_redis_up", nil); up != 1 {
			t.Fatalf("replica %d: redis_up %v", i, up)
		}
	}

	// 60 renders at once over 3 replicas: one tag list per repository in all.
	renderOn(t, replicas, s, repos, 60, nil)
	if got := s.Count(rt.Tags); got != len(repos) {
		t.Errorf("%d tag lists for %d repositories across 3 replicas, want one each; %v", got, len(repos), s.Counts())
	}
	if twice := fetchedTwice(s); len(twice) > 0 {
		t.Errorf("keys fetched more than once across the replicas: %v", twice)
	}
	var fromRedis float64
	for _, r := range replicas {
		fromRedis += metricValue(t, r.d, "argocd_image_resolver_cache_redis_hits_total", map[string]string{"layer": "tags"})
	}
	if fromRedis == 0 {
		t.Error("no tag list was read from redis")
	}

	// Redis killed mid-run: the renders go on, from memory and the registry.
	// (new replicas: empty memory, so that the renders need Redis or the registry)
	replicas[0].stop()
	replicas[1].stop()
	replicas[2].stop()
	replicas = []*replica{startReplica(t, rs.Addr), startReplica(t, rs.Addr), startReplica(t, rs.Addr)}
	rs.Flush(t)
	s.ResetCounts()
	// Killed at the registry's 20th request, which is held until Redis is dead:
	// the renders of the run reach it, and go on after.
	var atKill atomic.Int64
	s.OnRequest(func(_ rt.Request, total int) {
		if total == 20 {
			rs.Stop()
			atKill.Store(int64(s.Total()))
		}
	})
	renderOn(t, replicas, s, repos, 60, nil)
	s.OnRequest(nil)
	if atKill := int(atKill.Load()); atKill == 0 || s.Total() <= atKill {
		t.Errorf("redis was not killed mid-run: %d registry requests before the kill, %d in all", atKill, s.Total())
	}
	for i, r := range replicas {
		if up := metricValue(t, r.d, "argocd_image_resolver_cache_redis_up", nil); up != 0 {
			t.Errorf("replica %d: redis_up %v after redis was killed", i, up)
		}
	}

	// Redis back (empty): the replicas rejoin and share again.
	rs.Restart()
	waitUntil(t, time.Minute, "replicas see redis again", func() bool {
		for _, r := range replicas {
			if metricValue(t, r.d, "argocd_image_resolver_cache_redis_up", nil) != 1 {
				return false
			}
		}
		return true
	})
	s.ResetCounts()
	late := seedInstallation(t, s, "late", 3)
	renderOn(t, replicas, s, late, 60, nil)
	if got := s.Count(rt.Tags); got != len(late) {
		t.Errorf("after redis came back: %d tag lists for %d new repositories, want one each; %v", got, len(late), s.Counts())
	}
	if twice := fetchedTwice(s); len(twice) > 0 {
		t.Errorf("after redis came back, keys fetched more than once: %v", twice)
	}

	// A replica restarted while Redis holds the view asks the registry nothing it
	// knows: no manifest, no config, no tag list (within the TTLs).
	replicas[1].stop()
	s.ResetCounts()
	again := startReplica(t, rs.Addr)
	renderOn(t, []*replica{again}, s, late, 20, nil)
	if n := s.Count(rt.ManifestGet) + s.Count(rt.BlobGet) + s.Count(rt.ManifestHead) + s.Count(rt.Tags); n != 0 {
		t.Errorf("restarted replica: %d registry requests for what redis holds, want 0: %v", n, s.Counts())
	}
}

// waitUntil polls ok until it holds, for what depends on an outside process (a
// redis-server that was restarted, seen by the replicas' probes); d is a hang
// guard.
func waitUntil(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
