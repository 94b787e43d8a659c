package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/notify"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

// A query names a metric, labels and label values; the daemon must expose them.
type query struct {
	where string // file and panel or alert
	expr  string
}

// dashboardQueries returns every PromQL expression of dashboard.json: panel targets
// (rows included) and the metric of each label_values variable.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile("monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	var out []query
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("dashboard.json panel: %v", err)
			}
			for _, tg := range p.Targets {
				out = append(out, query{"dashboard.json panel " + p.Title, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("dashboard.json variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("dashboard.json variable %s: query %q is not label_values(METRIC, LABEL)", v.Name, q.Query)
		}
		// label_values(m, l): m must have the label l, as a by clause would.
		out = append(out, query{"dashboard.json variable " + v.Name, "count by (" + m[2] + ") (" + m[1] + ")"})
	}
	return out
}

// alertQueries returns the expression of every rule of prometheusrule.yaml.
func alertQueries(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile("monitoring/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert       string            `json:"alert"`
					Expr        string            `json:"expr"`
					For         string            `json:"for"`
					Labels      map[string]string `json:"labels"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &rule); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	var out []query
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("prometheusrule.yaml: a rule without alert or expr: %+v", r)
				continue
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || len(r.Annotations["description"]) < 200 {
				t.Errorf("alert %s: want a severity, a summary and a runbook-like description (what users see, what to check, what to do)", r.Alert)
			}
			if _, err := model.ParseDuration(r.For); err != nil {
				t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
			}
			out = append(out, query{"prometheusrule.yaml alert " + r.Alert, r.Expr})
		}
	}
	return out
}

// The alerts the issue asks for (stale answers, registry errors, refresh failures,
// daemon down), by the metric each one reads.
var requiredAlerts = map[string]string{
	"ArgoCDImageResolverDown":            "up",
	"ArgoCDImageResolverStaleAnswers":    "argocd_image_resolver_cache_stale_serves_total",
	"ArgoCDImageResolverRegistryErrors":  "argocd_image_resolver_registry_requests_total",
	"ArgoCDImageResolverRefreshFailures": "argocd_image_resolver_refreshes_total",
}

// The panels the dashboard must have, by a metric each one reads.
var requiredPanels = []string{
	"argocd_image_resolver_resolution_duration_seconds_count",  // resolutions
	"argocd_image_resolver_resolution_duration_seconds_bucket", // their latency
	"argocd_image_resolver_cache_hits_total",                   // hit ratio by layer
	"argocd_image_resolver_cache_misses_total",
	"argocd_image_resolver_registry_requests_total", // by registry and status
	"argocd_image_resolver_ratelimit_wait_seconds_bucket",
	"argocd_image_resolver_ratelimit_pauses_total",
	"argocd_image_resolver_cache_stale_serves_total",
	"argocd_image_resolver_refreshes_total",
	"argocd_image_resolver_pin_commits_total",
}

// Metrics Prometheus makes itself, per target; the daemon does not expose them.
var prometheusMetrics = map[string]bool{"up": true}

// Labels Prometheus (with the Prometheus Operator's ServiceMonitor) adds to every
// series of a target.
var targetLabels = map[string]bool{"job": true, "instance": true, "namespace": true, "pod": true,
	"service": true, "container": true, "endpoint": true}

// TestDashboardAndAlertsQueryTheDaemonsMetrics runs a daemon as the sidecar does
// (daemon.New, Listen, Run) against a registry and a Redis shared tier (redis-server),
// renders an app through it, lets a
// refresh fail against a Kubernetes API that forbids it and a registry pause with
// Retry-After, so that the series created on first use exist; then checks every
// metric, label and label value that dashboard.json and prometheusrule.yaml query
// against the daemon's /metrics. A renamed metric or label, or a typo in a query,
// fails here instead of drawing an empty panel or an alert that never fires.
func TestDashboardAndAlertsQueryTheDaemonsMetrics(t *testing.T) {
	queries := append(dashboardQueries(t), alertQueries(t)...)
	fams := scrapeRunningDaemon(t)
	series := seriesOf(fams)

	used := map[string]bool{}
	for _, q := range queries {
		p, err := parsePromQL(q.expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", q.where, err, q.expr)
			continue
		}
		labelsOf := map[string]bool{"le": true}
		for l := range targetLabels {
			labelsOf[l] = true
		}
		for _, sel := range p.selectors {
			used[sel.metric] = true
			s, ok := series[sel.metric]
			if !ok {
				if !prometheusMetrics[sel.metric] {
					t.Errorf("%s: metric %s is not in the daemon's /metrics", q.where, sel.metric)
				}
				continue
			}
			for l := range s.labels {
				labelsOf[l] = true
			}
			for _, m := range sel.matchers {
				if targetLabels[m.label] {
					continue
				}
				values, ok := s.labels[m.label]
				if !ok {
					t.Errorf("%s: %s has no label %s (it has %v)", q.where, sel.metric, m.label, slices.Sorted(mapKeys(s.labels)))
					continue
				}
				// An exact value must be one the daemon uses; regular expressions are
				// alternatives that may not all have happened in this run.
				if m.op == "=" && !values[m.value] {
					t.Errorf("%s: %s{%s=%q}: the daemon uses %s values %v", q.where, sel.metric, m.label, m.value, m.label, slices.Sorted(mapKeys(values)))
				}
			}
		}
		for _, l := range p.grouping {
			if !labelsOf[l] {
				t.Errorf("%s: groups by %s, which none of its metrics has", q.where, l)
			}
		}
	}
	for alert, metric := range requiredAlerts {
		if !slices.ContainsFunc(queries, func(q query) bool {
			return q.where == "prometheusrule.yaml alert "+alert && strings.Contains(q.expr, metric)
		}) {
			t.Errorf("no alert %s on %s", alert, metric)
		}
	}
	for _, m := range requiredPanels {
		if !slices.ContainsFunc(queries, func(q query) bool {
			return strings.HasPrefix(q.where, "dashboard.json panel") && strings.Contains(q.expr, m+"{")
		}) {
			t.Errorf("no dashboard panel queries %s", m)
		}
	}
	// Every family of the daemon is documented in docs/metrics.md.
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range fams {
		if strings.HasPrefix(name, "argocd_image_resolver_") && !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/metrics.md does not describe %s", name)
		}
	}
	t.Logf("%d queries, %d metrics used of %d families", len(queries), len(used), len(fams))
}

// metricSeries is what a scrape tells of one series name: its labels and the values
// each took.
type metricSeries struct{ labels map[string]map[string]bool }

// seriesOf indexes families by series name: a histogram's _bucket (with le), _sum
// and _count, a summary's _sum and _count, others by their name.
func seriesOf(fams map[string]*dto.MetricFamily) map[string]metricSeries {
	out := map[string]metricSeries{}
	add := func(name string, labels []*dto.LabelPair, extra ...string) {
		s, ok := out[name]
		if !ok {
			s = metricSeries{labels: map[string]map[string]bool{}}
			out[name] = s
		}
		for _, lp := range labels {
			if s.labels[lp.GetName()] == nil {
				s.labels[lp.GetName()] = map[string]bool{}
			}
			s.labels[lp.GetName()][lp.GetValue()] = true
		}
		for _, l := range extra {
			if s.labels[l] == nil {
				s.labels[l] = map[string]bool{}
			}
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				add(name+"_bucket", m.GetLabel(), "le")
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
			case dto.MetricType_SUMMARY:
				add(name, m.GetLabel(), "quantile")
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
			default:
				add(name, m.GetLabel())
			}
		}
	}
	return out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// forbiddingAPI is a Kubernetes API server that answers every request 403, as one
// does when the refresh loop's RBAC (rbac.yaml) is missing.
func forbiddingAPI(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,`+
			`"message":"applications.argoproj.io is forbidden: User \"system:serviceaccount:argocd:argocd-repo-server\" cannot get resource \"applications\""}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// scrapeRunningDaemon starts a daemon, exercises it, and returns its /metrics.
func scrapeRunningDaemon(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	reg := rt.New(t)
	for i, tag := range []string{"1.0.0", "1.1.0"} {
		reg.Push(t, "web", tag, rt.Image(time.Date(2026, 1, 1+i, 0, 0, 0, 0, time.UTC), "linux/amd64", rt.WithSeed("web"+tag)))
	}
	// One 429 with Retry-After: the registry is paused (ratelimit_pauses_total,
	// ratelimit_paused_seconds) and the request retried.
	reg.Inject(rt.Fault{Kind: rt.Tags, Status: http.StatusTooManyRequests, RetryAfter: "1", Times: 1})

	dir, err := os.MkdirTemp("", "cir") // short: unix socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := config.DefaultConfig()
	cfg.Socket = filepath.Join(dir, "d.sock")
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.TagTTL = time.Second
	cfg.RefreshAhead = 0 // the refresh pass below is the only reader after the render
	// The Redis shared tier, as several replicas use it: its metrics exist only then.
	cfg.Redis.Address = redistest.Start(t).Addr
	// A public key to require signatures with (signature_skips_total).
	cfg.Trust.Keys = map[string]string{"ci": publicKeyFile(t, dir)}
	notifier, err := notify.NewKubernetes(&rest.Config{Host: forbiddingAPI(t).URL})
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(cfg, daemon.WithLogger(slog.New(slog.DiscardHandler)),
		daemon.WithRemoteOptions(resolve.WithKeychain(authn.NewMultiKeychain()),
			resolve.WithRetry(resolve.RetryPolicy{Attempts: 3, Backoff: 5 * time.Millisecond, MaxWait: 5 * time.Second})),
		daemon.WithNotifier(notifier), daemon.WithRefreshEvery(time.Hour)) // the pass below is run by hand
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	}

	// A render as Argo CD's CMP server asks for it through the thin client.
	image := reg.Ref("web")
	app := t.TempDir()
	manifest := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n        - name: web\n          image: " + image + ":1.0.0\n"
	if err := os.WriteFile(filepath.Join(app, "deployment.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	environ := []string{"ARGOCD_APP_NAME=web", "ARGOCD_APP_NAMESPACE=default", "ARGOCD_APP_REVISION=0123abc",
		"ARGOCD_APP_SOURCE_REPO_URL=https://git.example/apps.git", "ARGOCD_APP_SOURCE_PATH=.", "ARGOCD_APP_SOURCE_TARGET_REVISION=main",
		`ARGOCD_APP_PARAMETERS=[{"name":"image-list","string":"web=` + image + `:~1"},{"name":"web.platforms","string":"linux/amd64"}]`}
	resp, err := api.Call(ctx, cfg.Socket, api.GenerateRequest{Dir: app, Environ: environ})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ExitCode != 0 || !strings.Contains(string(resp.Stdout), image+":1.1.0") {
		t.Fatalf("render: exit %d\n%s\n%s", resp.ExitCode, resp.Stdout, resp.Stderr)
	}
	// A batch on the socket API, as generate sends when it renders in-process.
	if _, err := daemon.NewClient(cfg.Socket).ResolveBatch(ctx, "web",
		[]resolve.Request{{Image: image, Policy: resolve.PolicySpec{Constraint: "~1", Platforms: []string{"linux/amd64"}}}}); err != nil {
		t.Fatal(err)
	}
	// A signature required and no tag signed: both candidates skipped for it.
	answers, err := daemon.NewClient(cfg.Socket).ResolveBatch(ctx, "web",
		[]resolve.Request{{Image: image, Policy: resolve.PolicySpec{Verify: resolve.VerifySpec{Key: "ci"}}}})
	if err != nil || len(answers) != 1 || answers[0].ErrorKind != resolve.KindNoTag {
		t.Fatalf("resolution requiring a signature: %v %+v, want no tag", err, answers)
	}
	// A new tag: the refresh loop asks the API for a hard refresh, which is forbidden.
	reg.Push(t, "web", "1.2.0", rt.Image(time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC), "linux/amd64", rt.WithSeed("web1.2.0")))
	time.Sleep(cfg.TagTTL + 100*time.Millisecond)
	d.Refresher.Pass(ctx)
	// The app opts out of refreshes: the loop forgets it (tracked_apps_forgotten_total).
	environ[len(environ)-1] = `ARGOCD_APP_PARAMETERS=[{"name":"image-list","string":"web=` + image + `:~1"},{"name":"refresh","string":"off"},{"name":"web.platforms","string":"linux/amd64"}]`
	if resp, err := api.Call(ctx, cfg.Socket, api.GenerateRequest{Dir: app, Environ: environ}); err != nil || resp.ExitCode != 0 {
		t.Fatalf("render with refresh off: %v %+v", err, resp)
	}

	hresp, err := http.Get("http://" + d.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer hresp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(hresp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// TestDashboardLayout checks what Grafana needs of dashboard.json beyond its queries:
// a uid, panels with unique ids inside the 24-column grid without overlapping, and
// every query on the dashboard's data source variable (so the import asks for one).
func TestDashboardLayout(t *testing.T) {
	b, err := os.ReadFile("monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			GridPos struct{ X, Y, W, H int } `json:"gridPos"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" {
		t.Error("dashboard.json has no uid: every import would make a new dashboard")
	}
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.X < 0 || g.W <= 0 || g.H <= 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.Type != "row" && (p.Datasource == nil || p.Datasource.UID != "${datasource}") {
			t.Errorf("panel %q does not use the ${datasource} variable", p.Title)
		}
	}
}

// publicKeyFile writes the public half of a fresh signing key into dir.
func publicKeyFile(t *testing.T, dir string) string {
	t.Helper()
	sg, err := signtest.New()
	if err != nil {
		t.Fatal(err)
	}
	pem, err := sg.PublicKeyPEM("ci")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "ci.pub")
	if err := os.WriteFile(f, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
