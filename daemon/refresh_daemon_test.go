package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/notify"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// appDir writes a plain-YAML app whose Deployment runs image.
func appDir(t testing.TB, image string) string {
	t.Helper()
	dir := t.TempDir()
	manifest := `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  template:
    spec:
      containers:
        - name: web
          image: ` + image + "\n"
	if err := os.WriteFile(filepath.Join(dir, "deployment.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// argoEnviron is the environment Argo CD gives a CMP render of app at revision,
// with the plugin parameters params (name -> string value).
func argoEnviron(t testing.TB, app, revision string, params map[string]string) []string {
	t.Helper()
	var ps []map[string]string
	for k, v := range params {
		ps = append(ps, map[string]string{"name": k, "string": v})
	}
	b, err := json.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	return []string{"ARGOCD_APP_NAME=" + app, "ARGOCD_APP_NAMESPACE=default", "ARGOCD_APP_REVISION=" + revision,
		"ARGOCD_APP_SOURCE_REPO_URL=https://git.example/apps.git", "ARGOCD_APP_SOURCE_PATH=.",
		"ARGOCD_APP_SOURCE_TARGET_REVISION=main", "ARGOCD_APP_PARAMETERS=" + string(b)}
}

func delegatedRender(t testing.TB, socket, dir string, environ []string) string {
	t.Helper()
	resp, err := api.Call(context.Background(), socket, api.GenerateRequest{Dir: dir, Environ: environ})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ExitCode != 0 {
		t.Fatalf("render failed: %s", resp.Stderr)
	}
	return string(resp.Stdout)
}

// TestRefreshLoopThroughTheDaemon: renders through /v1/generate are remembered
// (not streamed ones, not opted-out ones); a new tag makes the loop refresh the
// app once, at the cost of one tag list and the new candidate's manifest and
// config; a pass over fresh entries costs nothing, and one after the tag TTL one
// tag list.
func TestRefreshLoopThroughTheDaemon(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0")
	cfg := testConfig()
	cfg.TagTTL = time.Second
	cfg.RefreshAhead = 0 // no background refresh: the passes below are the only readers
	n := &fakeNotifier{}
	clock := newFakeClock()
	d, _ := startDaemon(t, cfg, WithNotifier(n), WithRefreshEvery(time.Hour), withClock(clock)) // passes by hand
	socket := d.cfg.Socket
	image := s.Ref("web")
	dir := appDir(t, image+":1.0.0")
	policy := map[string]string{"image-list": "web=" + image + ":~1", "web.platforms": "linux/amd64"}

	if out := delegatedRender(t, socket, dir, argoEnviron(t, "web", "0123abc", policy)); !strings.Contains(out, image+":1.1.0") {
		t.Fatalf("render:\n%s", out)
	}
	delegatedRender(t, socket, dir, argoEnviron(t, "diff-local", "streamed", policy))
	quiet := map[string]string{"refresh": "off"}
	for k, v := range policy {
		quiet[k] = v
	}
	delegatedRender(t, socket, dir, argoEnviron(t, "quiet", "0123abc", quiet))
	if got := names(d.Tracker); len(got) != 1 || got[0] != "web" {
		t.Fatalf("tracked %v, want [web] (streamed and opted-out renders are not)", got)
	}

	d.Refresher.Pass(context.Background())
	if c := n.count(); c != 0 {
		t.Fatalf("%d refreshes with no new tag", c)
	}

	s.ResetCounts()
	pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0", "1.2.0")
	s.ResetCounts()
	clock.Advance(cfg.TagTTL + 100*time.Millisecond) // the tag list expires
	d.Refresher.Pass(context.Background())
	if len(n.calls) != 1 || n.calls[0] != (notify.App{Namespace: "argocd", Name: "web"}) {
		t.Fatalf("refreshes %v, want [argocd/web]", n.calls)
	}
	// What a render would cost: the tag list, and the new candidate checked for
	// linux/amd64 (its manifest and config).
	want := map[rt.Kind]int{rt.Tags: 1, rt.ManifestGet: 1, rt.BlobGet: 1}
	if got := s.Counts(); !equalCounts(got, want) {
		t.Errorf("requests of the pass that found 1.2.0: %v, want %v", got, want)
	}

	s.ResetCounts()
	d.Refresher.Pass(context.Background())
	if got := s.Total(); got != 0 {
		t.Errorf("a pass over fresh entries made %d requests: %v", got, s.Counts())
	}
	clock.Advance(cfg.TagTTL + 100*time.Millisecond)
	d.Refresher.Pass(context.Background())
	if got := s.Counts(); !equalCounts(got, map[rt.Kind]int{rt.Tags: 1}) {
		t.Errorf("a pass after the tag TTL, nothing new: %v, want one tag list", got)
	}
	if c := n.count(); c != 1 {
		t.Errorf("%d refreshes, want still 1", c)
	}

	// The render Argo CD makes after the refresh shows 1.2.0 and is remembered.
	if out := delegatedRender(t, socket, dir, argoEnviron(t, "web", "0123abc", policy)); !strings.Contains(out, image+":1.2.0") {
		t.Errorf("render after the refresh:\n%s", out)
	}
}

func equalCounts(got, want map[rt.Kind]int) bool {
	for k, v := range got {
		if v != 0 && want[k] != v {
			return false
		}
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
