package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

const testHookSecret = "0123456789abcdef-webhook-secret"

// webhookConfig is testConfig with the distribution webhook on a free port.
func webhookConfig(t testing.TB) config.Config {
	t.Helper()
	cfg := testConfig()
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(testHookSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.WebhookAddr = "127.0.0.1:0"
	cfg.Webhooks = config.Webhooks{"distribution": {SecretFile: file}}
	return cfg
}

// postDistribution sends a CNCF distribution notification of a manifest push of
// repo:tag on host, as the registry does, and returns the status.
func postDistribution(t *testing.T, addr, secret, host, repo, tag string) int {
	t.Helper()
	body := fmt.Sprintf(`{"events":[{"id":"%d","timestamp":"2026-12-05T12:00:00Z","action":"push",
"target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":100,
"digest":"sha256:%064x","length":100,"repository":%q,"url":"http://%s/v2/%s/manifests/%s","tag":%q},
"request":{"id":"r","addr":"127.0.0.1:1","host":%q,"method":"PUT","useragent":"go-containerregistry"},
"actor":{},"source":{"addr":"registry:5000","instanceID":"i"}}]}`,
		time.Now().UnixNano(), time.Now().UnixNano(), repo, host, repo, tag, tag, host)
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/distribution", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v2+json")
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWebhookPushRefreshesTheApp: with the shipped TTLs and interval, a push
// announced by a registry webhook reads the repository's tag list again and
// refreshes the app that now resolves to the new tag, at the cost a render would
// have (the list, the new candidate's manifest and config); a push of nothing the
// policy chooses reads the list and refreshes nothing; a push to a repository no
// app uses costs no request; a wrong secret changes nothing.
// It holds with the webhooks served in the daemon's process and in a listener
// process of their own, as the sidecar serves them.
func TestWebhookPushRefreshesTheApp(t *testing.T) {
	t.Run("in process", func(t *testing.T) { testWebhookPushRefreshesTheApp(t) })
	t.Run("listener process", func(t *testing.T) { testWebhookPushRefreshesTheApp(t, WithWebhookListener(webhookListenerCommand)) })
}

// webhookListenerEnv makes this test binary a webhook listener process (TestMain).
const webhookListenerEnv = "IMAGE_RESOLVER_TEST_WEBHOOK_LISTENER"

// webhookListenerCommand starts this test binary as the webhook listener
// process (WithWebhookListener).
func webhookListenerCommand() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), webhookListenerEnv+"=1")
	return cmd
}

func testWebhookPushRefreshesTheApp(t *testing.T, opts ...Option) {
	s := rt.New(t)
	pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0")
	cfg := webhookConfig(t)
	n := &fakeNotifier{}
	d, _ := startDaemon(t, cfg, append(opts, WithNotifier(n))...)
	image := s.Ref("web")
	dir := appDir(t, image+":1.0.0")
	policy := map[string]string{"image-list": "web=" + image + ":~1", "web.platforms": "linux/amd64"}
	if out := delegatedRender(t, d.cfg.Socket, dir, argoEnviron(t, "web", "0123abc", policy)); !strings.Contains(out, image+":1.1.0") {
		t.Fatalf("render:\n%s", out)
	}
	addr := d.WebhookAddr()
	events := func(outcome string) float64 {
		return metricValue(t, d, "argocd_image_resolver_webhook_events_total", map[string]string{"kind": "distribution", "outcome": outcome})
	}

	pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0", "1.2.0")
	s.ResetCounts()
	if code := postDistribution(t, addr, "wrong-secret-0123456789", s.Host, "web", "1.2.0"); code != http.StatusUnauthorized {
		t.Fatalf("a wrong secret: %d, want 401", code)
	}
	if code := postDistribution(t, addr, testHookSecret, s.Host, "web", "1.2.0"); code/100 != 2 {
		t.Fatalf("the push event: %d", code)
	}
	waitFor(t, "the app refreshed after the push", func() bool { return n.count() == 1 })
	want := map[rt.Kind]int{rt.Tags: 1, rt.ManifestGet: 1, rt.BlobGet: 1}
	if got := s.Counts(); !equalCounts(got, want) {
		t.Errorf("requests after the push: %v, want %v", got, want)
	}
	if events("accepted") != 1 || events("unauthorized") != 1 {
		t.Errorf("events: accepted %v, unauthorized %v; want 1 and 1", events("accepted"), events("unauthorized"))
	}
	if c := testutil.CollectAndCount(d.Metrics.PushToRefresh); c != 1 {
		t.Errorf("webhook_refresh_seconds: %d series", c)
	}

	// A push of a tag the policy does not choose: one list, no refresh.
	pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0", "1.2.0", "2.0.0")
	s.ResetCounts()
	postDistribution(t, addr, testHookSecret, s.Host, "web", "2.0.0")
	waitFor(t, "the tag list read again", func() bool { return s.Count(rt.Tags) == 1 })
	d.pushesIdle(t)
	if n.count() != 1 {
		t.Errorf("refreshes after a push of 2.0.0 (outside ~1): %d, want still 1", n.count())
	}

	// A repository no app uses: nothing.
	s.ResetCounts()
	postDistribution(t, addr, testHookSecret, s.Host, "other/unused", "1.0.0")
	d.pushesIdle(t)
	if s.Total() != 0 || events("unused") != 1 {
		t.Errorf("a push to an unused repository: %d requests, unused %v; want 0 and 1", s.Total(), events("unused"))
	}
}

// pushesIdle waits until no push is queued or being handled.
func (d *Daemon) pushesIdle(t *testing.T) {
	t.Helper()
	waitFor(t, "pushes handled", func() bool {
		d.pushes.mu.Lock()
		defer d.pushes.mu.Unlock()
		return len(d.pushes.pending) == 0 && !d.pushes.busy
	})
}

// TestHardRefreshReadsTheRegistryAgain: a render of an app and revision rendered
// before (Argo CD's hard refresh) reads the tag list again when it is older than
// revalidateAfter, and shows a tag pushed meanwhile; a storm of them within that
// time costs nothing more; a first render of another revision does not read it;
// another reader of the list just before a push does not hide the push.
func TestHardRefreshReadsTheRegistryAgain(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0")
	cfg := testConfig()
	clock := newFakeClock()
	d, _ := startDaemon(t, cfg, withClock(clock), WithRefreshEvery(time.Hour))
	image := s.Ref("web")
	dir := appDir(t, image+":1.0.0")
	policy := map[string]string{"image-list": "web=" + image + ":~1", "web.platforms": "linux/amd64"}
	render := func(revision string) string {
		return delegatedRender(t, d.cfg.Socket, dir, argoEnviron(t, "web", revision, policy))
	}
	render("rev1")
	pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0", "1.2.0")
	clock.Advance(revalidateAfter + time.Second)
	s.ResetCounts()

	if out := render("rev2"); !strings.Contains(out, image+":1.1.0") || s.Total() != 0 {
		t.Fatalf("first render of another revision: %d requests; want the cached list (1.1.0):\n%s", s.Total(), out)
	}
	if out := render("rev1"); !strings.Contains(out, image+":1.2.0") {
		t.Fatalf("hard refresh of rev1 after a push: want 1.2.0:\n%s", out)
	}
	if got := s.Count(rt.Tags); got != 1 {
		t.Errorf("hard refresh: %d tag lists, want 1", got)
	}
	s.ResetCounts()
	for range 5 {
		render("rev1")
	}
	if s.Total() != 0 {
		t.Errorf("5 more hard refreshes within %s: %v, want no request", revalidateAfter, s.Counts())
	}
	if got := testutil.ToFloat64(d.Metrics.Revalidations.WithLabelValues("tags", "ok")); got != 1 {
		t.Errorf("revalidations counted: %v, want 1", got)
	}

	// The list read by someone else (the refresh loop) just before a push does
	// not hide the push from the next hard refresh.
	clock.Advance(revalidateAfter)
	repo, err := name.NewRepository(image, name.WeakValidation)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Registry.RevalidateTags(context.Background(), repo, clock.Now()); err != nil {
		t.Fatal(err)
	}
	pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0", "1.2.0", "1.3.0")
	clock.Advance(time.Second)
	if out := render("rev1"); !strings.Contains(out, image+":1.3.0") {
		t.Errorf("hard refresh right after another read of the list and a push: want 1.3.0:\n%s", out)
	}
}

// TestWebhookReachesTheOtherReplica: two replicas sharing Redis; the app was
// rendered on the second only; the registry's webhook reaches the first (the
// Service picked it). The first tells the second through Redis, which reads the
// list again and refreshes the app at once, shipped TTLs notwithstanding.
func TestWebhookReachesTheOtherReplica(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0")
	first, second := webhookConfig(t), testConfig()
	useRedis(&first, rs.Addr)
	useRedis(&second, rs.Addr)
	n1, n2 := &fakeNotifier{}, &fakeNotifier{}
	a, _ := startDaemon(t, first, WithNotifier(n1))
	b, _ := startDaemon(t, second, WithNotifier(n2))
	image := s.Ref("web")
	dir := appDir(t, image+":1.0.0")
	policy := map[string]string{"image-list": "web=" + image + ":~1", "web.platforms": "linux/amd64"}
	delegatedRender(t, b.cfg.Socket, dir, argoEnviron(t, "web", "0123abc", policy))
	waitSubscribed(t, rs.Addr, 2)

	pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0", "1.2.0")
	if code := postDistribution(t, a.WebhookAddr(), testHookSecret, s.Host, "web", "1.2.0"); code/100 != 2 {
		t.Fatalf("the push event: %d", code)
	}
	waitFor(t, "the other replica refreshed the app", func() bool { return n2.count() == 1 })
	if n1.count() != 0 {
		t.Errorf("the replica that got the event (tracking nothing) refreshed %d apps", n1.count())
	}
	if got := metricValue(t, a, "argocd_image_resolver_webhook_events_total", map[string]string{"kind": "distribution", "outcome": "unused"}); got != 1 {
		t.Errorf("first replica's outcome: unused = %v, want 1 (it uses nothing itself)", got)
	}
}

// waitSubscribed waits until n daemons listen on the push channel of the shared tier.
func waitSubscribed(t *testing.T, addr string, n int64) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	waitFor(t, "daemons subscribed", func() bool {
		chs, err := c.PubSubChannels(context.Background(), "*:pushed").Result()
		if err != nil || len(chs) != 1 {
			return false
		}
		m, err := c.PubSubNumSub(context.Background(), chs[0]).Result()
		return err == nil && m[chs[0]] >= n
	})
}
