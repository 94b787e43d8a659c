package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// startDaemon runs a daemon on a fresh socket and a loopback metrics port until
// the test ends.
func startDaemon(t testing.TB, cfg config.Config, opts ...Option) (*Daemon, *Client) {
	t.Helper()
	if cfg.Socket == "" {
		cfg.Socket = socketPath(t)
	}
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
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	return d, NewClient(cfg.Socket)
}

// testConfig is the default configuration on a loopback port; startDaemon gives
// it a socket of its own (never the default path, which a real daemon may hold).
func testConfig() config.Config {
	cfg := config.DefaultConfig()
	cfg.Socket = ""
	cfg.MetricsAddr = "127.0.0.1:0"
	return cfg
}

func TestSocketRoundTrip(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0", "2.0.0-rc.1")
	_, client := startDaemon(t, testConfig())
	reqs := []resolve.Request{
		{Image: s.Ref("app"), Policy: resolve.PolicySpec{Platforms: []string{"linux/amd64"}, PinDigest: true}},
		{Image: s.Ref("app"), Policy: resolve.PolicySpec{Constraint: "^9"}},
		{Image: s.Ref("app"), Policy: resolve.PolicySpec{Strategy: "bogus"}},
		{Image: s.Ref("missing"), Policy: resolve.PolicySpec{}},
		{Image: s.Ref("app"), Policy: resolve.PolicySpec{Platforms: []string{"linux/amd64"}, PinDigest: true}},
		{Image: s.Ref("app"), Policy: resolve.PolicySpec{Strategy: "name"}},
	}
	got, err := client.ResolveBatch(context.Background(), "ns/app", reqs)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := resolve.NewRemote(resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := resolve.NewResolver(remote).ResolveBatch(context.Background(), "ns/app", reqs)
	if len(got) != len(reqs) {
		t.Fatalf("%d answers", len(got))
	}
	for i := range reqs {
		g, w := got[i], want[i]
		if g.Error != w.Error || g.ErrorKind != w.ErrorKind {
			t.Errorf("answer %d: error %q (%s), want %q (%s)", i, g.Error, g.ErrorKind, w.Error, w.ErrorKind)
		}
		if (g.Result == nil) != (w.Result == nil) {
			t.Fatalf("answer %d: result %v, want %v", i, g.Result, w.Result)
		}
		if g.Result != nil && (g.Result.Reference != w.Result.Reference || g.Result.Candidates != w.Result.Candidates ||
			strings.Join(g.Result.Warnings, ";") != strings.Join(w.Result.Warnings, ";")) {
			t.Errorf("answer %d: %+v, want %+v", i, g.Result, w.Result)
		}
	}
	if ref := s.Ref("app") + ":1.1.0@" + s.Digest(t, "app", "1.1.0"); got[0].Result.Reference != ref {
		t.Errorf("reference %s, want %s", got[0].Result.Reference, ref)
	}
	// Error kinds survive the socket: errors.Is/As work on the client side.
	var ie *resolve.InputError
	var re *resolve.RegistryError
	if !errors.Is(got[1].Err(), resolve.ErrNoTag) || !errors.As(got[2].Err(), &ie) || !errors.As(got[3].Err(), &re) {
		t.Errorf("kinds: %v / %v / %v", got[1].Err(), got[2].Err(), got[3].Err())
	}
	if got[1].Result == nil || got[1].Result.Candidates != 0 {
		t.Errorf("a no-tag answer carries its partial result: %+v", got[1].Result)
	}
	if err := client.Health(context.Background()); err != nil {
		t.Errorf("health: %v", err)
	}
}

func TestClientUnreachable(t *testing.T) {
	dir := shortTempDir(t)
	// No socket at all.
	c := NewClient(dir + "/none.sock")
	if _, err := c.ResolveBatch(context.Background(), "app", nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("no socket: %v, want ErrUnreachable", err)
	}
	// A socket file left by a daemon that died.
	stale := dir + "/stale.sock"
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	_, err = NewClient(stale).ResolveBatch(context.Background(), "app", nil)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), stale) {
		t.Fatalf("stale socket: %v, want ErrUnreachable naming the socket", err)
	}
	// At once: the dial was refused, no timeout was waited out.
	if !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("stale socket: %v, want the dial refused", err)
	}
	// Something that is not the daemon.
	notDaemon := dir + "/other.sock"
	ln, err = net.Listen("unix", notDaemon)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go http.Serve(ln, http.NotFoundHandler()) //nolint:errcheck
	if _, err := NewClient(notDaemon).ResolveBatch(context.Background(), "app", nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("not a daemon: %v, want ErrUnreachable", err)
	}

	// A daemon takes over the stale socket; a second daemon does not take over a live one.
	cfg := testConfig()
	cfg.Socket = stale
	_, client := startDaemon(t, cfg)
	if err := client.Health(context.Background()); err != nil {
		t.Fatalf("daemon on a stale socket: %v", err)
	}
	d2, err := New(cfg, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "another daemon") {
		t.Fatalf("second daemon: %v", err)
	}
}

func TestDaemonStopsGracefully(t *testing.T) {
	cfg := testConfig()
	cfg.Socket = socketPath(t)
	d, err := New(cfg, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	<-d.Ready()
	addr := d.MetricsAddr()
	if code := httpGet(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Fatalf("readyz %d", code)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(cfg.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if _, err := NewClient(cfg.Socket).ResolveBatch(context.Background(), "app", nil); !errors.Is(err, ErrUnreachable) {
		t.Errorf("after stop: %v, want ErrUnreachable", err)
	}
}

func httpGet(t testing.TB, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	resp.Body.Close()
	return resp.StatusCode
}

// scrape reads /metrics over HTTP.
func scrape(t testing.TB, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// sumBy adds a family's values by one label.
func sumBy(fam *dto.MetricFamily, label string, filter map[string]string) map[string]float64 {
	out := map[string]float64{}
	if fam == nil {
		return out
	}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		ok := true
		for k, v := range filter {
			ok = ok && labels[k] == v
		}
		if !ok {
			continue
		}
		v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		out[labels[label]] += v
	}
	return out
}

func TestMetricsMatchTheRegistry(t *testing.T) {
	s := rt.New(t, rt.WithBearerAuth("robot", "pw"))
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	s.PushIndex(t, "multi", "1.0.0", rt.Index(day(1), []string{"linux/amd64", "linux/arm64"}))
	s.Inject(rt.Fault{Kind: rt.Tags, PathContains: "/multi/", Status: http.StatusServiceUnavailable, Times: 1})
	d, client := startDaemon(t, testConfig(), WithRemoteOptions(resolve.WithKeychain(basicKeychain{"robot", "pw"})))
	reqs := []resolve.Request{
		{Image: s.Ref("app"), Policy: resolve.PolicySpec{Strategy: "newest-build"}},
		{Image: s.Ref("multi"), Policy: resolve.PolicySpec{Platforms: []string{"linux/arm64"}}},
		{Image: s.Ref("app"), Policy: resolve.PolicySpec{Constraint: "~1.0"}},
	}
	for range 2 {
		if ans, err := client.ResolveBatch(context.Background(), "app", reqs); err != nil || ans[0].Error != "" || ans[1].Error != "" {
			t.Fatalf("%v %+v", err, ans)
		}
	}
	fams := scrape(t, d.MetricsAddr())
	for _, name := range []string{"cache_hits_total", "cache_misses_total", "cache_stale_serves_total", "cache_entries",
		"cache_bytes", "cache_evictions_total", "registry_requests_total", "resolution_duration_seconds",
		"ratelimit_wait_seconds", "refresh_ahead_total", "singleflight_shared_total", "batch_duration_seconds"} {
		if fams[cache.Namespace+"_"+name] == nil {
			t.Errorf("family %s_%s missing", cache.Namespace, name)
		}
	}
	if fams["go_goroutines"] == nil || fams["process_resident_memory_bytes"] == nil {
		t.Errorf("runtime and process families missing")
	}

	// Requests that failed below HTTP never reached the registry: for a loopback
	// registry go-containerregistry's ping tries https first, which fails.
	reqFam := fams[cache.Namespace+"_registry_requests_total"]
	if failed := sumBy(reqFam, "kind", map[string]string{"status": "error"}); len(failed) != 0 {
		t.Errorf("failed attempts by kind: %v, want none (the https pings before plain HTTP are %s)", failed, resolve.StatusHTTPSFallback)
	}
	if fb := sumBy(reqFam, "kind", map[string]string{"status": resolve.StatusHTTPSFallback}); fb["ping"] != 2 {
		t.Errorf("https-fallback pings: %v, want 2", fb)
	}
	reqFam.Metric = slices.DeleteFunc(reqFam.Metric, func(m *dto.Metric) bool {
		return slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool {
			return lp.GetName() == "status" && lp.GetValue() == resolve.StatusHTTPSFallback
		})
	})
	byKind := sumBy(reqFam, "kind", map[string]string{"registry": s.Host})
	want := map[string]float64{
		"ping":     float64(s.Count(rt.Ping)),
		"token":    float64(s.Count(rt.Token)),
		"tags":     float64(s.Count(rt.Tags)),
		"manifest": float64(s.Count(rt.ManifestGet) + s.Count(rt.ManifestHead)),
		"blob":     float64(s.Count(rt.BlobGet)),
	}
	for k, w := range want {
		if byKind[k] != w {
			t.Errorf("registry_requests_total{kind=%q} = %v, registrytest counted %v", k, byKind[k], w)
		}
	}
	if w := sumBy(fams[cache.Namespace+"_registry_requests_total"], "method", map[string]string{"kind": "manifest"})["HEAD"]; w != float64(s.Count(rt.ManifestHead)) {
		t.Errorf("HEADs %v, registrytest %d", w, s.Count(rt.ManifestHead))
	}
	if st := sumBy(fams[cache.Namespace+"_registry_requests_total"], "status", nil); st["503"] != 1 || st["401"] == 0 {
		t.Errorf("by status: %v, want one 503 (the injected fault) and the 401 challenges", st)
	}
	if want["token"] == 0 || want["ping"] == 0 {
		t.Errorf("registrytest counted no token or ping: %v", s.Counts())
	}

	// Cache counters: the second batch was answered from the cache.
	hits := sumBy(fams[cache.Namespace+"_cache_hits_total"], "layer", nil)
	misses := sumBy(fams[cache.Namespace+"_cache_misses_total"], "layer", nil)
	if misses[cache.LayerTags] != 2 || hits[cache.LayerTags] < 2 {
		t.Errorf("tags: misses %v hits %v, want 2 misses (two repositories) and hits after", misses[cache.LayerTags], hits[cache.LayerTags])
	}
	if misses[cache.LayerBlob] != float64(s.Count(rt.BlobGet)) {
		t.Errorf("blob misses %v, blob GETs %d", misses[cache.LayerBlob], s.Count(rt.BlobGet))
	}
	if misses[cache.LayerManifest] != float64(s.Count(rt.ManifestGet)) {
		t.Errorf("manifest misses %v, manifest GETs %d", misses[cache.LayerManifest], s.Count(rt.ManifestGet))
	}
	entries := sumBy(fams[cache.Namespace+"_cache_entries"], "layer", nil)
	// Each manifest read left its facts, not the manifest or its config.
	if entries[cache.LayerTags] != 2 || entries[cache.LayerBlob] != 0 || entries[cache.LayerManifest] != 0 || entries[cache.LayerFacts] != float64(s.Count(rt.ManifestGet)) {
		t.Errorf("entries %v, want 2 tag lists, no blob, no manifest and facts per manifest read (%d)", entries, s.Count(rt.ManifestGet))
	}
	res := sumBy(fams[cache.Namespace+"_resolution_duration_seconds"], "strategy", map[string]string{"result": "ok"})
	if res["semver"] != 2*1+2*1 || res["newest-build"] != 2 {
		t.Errorf("resolutions by strategy: %v", res)
	}
	if code := httpGet(t, "http://"+d.MetricsAddr()+"/healthz"); code != http.StatusOK {
		t.Errorf("healthz %d", code)
	}
}

// Registry entries scoped to apps: the daemon's cache is shared by every app, so the
// app is checked before the cache is read, and a refused app costs no request.
func TestAppScopingBeforeTheCache(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0")
	cfg := testConfig()
	if err := cfg.ParseFile("c.yaml", []byte("registries: [{prefix: '"+s.Host+"', apps: ['team-a/*']}]")); err != nil {
		t.Fatal(err)
	}
	_, client := startDaemon(t, cfg)
	reqs := []resolve.Request{{Image: s.Ref("app"), Policy: resolve.PolicySpec{}}}
	ans, err := client.ResolveBatch(context.Background(), "team-a/web", reqs)
	if err != nil || ans[0].Error != "" {
		t.Fatalf("allowed app: %v %+v", err, ans)
	}
	s.ResetCounts()
	for _, app := range []string{"team-b/web", ""} {
		ans, err = client.ResolveBatch(context.Background(), app, reqs)
		if err != nil || ans[0].ErrorKind != resolve.KindRegistry || !strings.Contains(ans[0].Error, "team-a/*") {
			t.Fatalf("app %q: %v %+v, want a refusal naming the entry's apps", app, err, ans)
		}
	}
	if s.Total() != 0 {
		t.Errorf("refused apps cost %d registry requests", s.Total())
	}
}

// A registry that lists tags breaking the OCI tag grammar: the resolution skips
// them, and /metrics counts them by registry, per resolution that met them.
func TestInvalidTagsCounted(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	s.Inject(rt.Fault{Kind: rt.Tags, Body: rt.TagsBody("app", "1.0.0", "1.1.0", "9.9.9+evil", "../x", "-1")})
	d, client := startDaemon(t, testConfig())
	for range 2 {
		got, err := client.ResolveBatch(context.Background(), "ns/app", []resolve.Request{{Image: s.Ref("app")}})
		if err != nil {
			t.Fatal(err)
		}
		if got[0].Error != "" || got[0].Result.Tag != "1.1.0" || got[0].Result.InvalidTags != 3 {
			t.Fatalf("answer = %+v; want 1.1.0 with 3 invalid tags skipped", got[0])
		}
	}
	fams := scrape(t, d.MetricsAddr())
	got := sumBy(fams[cache.Namespace+"_invalid_tags_skipped_total"], "registry", nil)
	if want := map[string]float64{s.Host: 6}; !maps.Equal(got, want) {
		t.Errorf("invalid_tags_skipped_total = %v, want %v", got, want)
	}
}
