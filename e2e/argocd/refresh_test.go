package argocde2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	metricRequested      = `argocd_image_resolver_refreshes_total{outcome="requested"}`
	metricAlreadyPending = `argocd_image_resolver_refreshes_total{outcome="already-pending"}`
	metricFailed         = `argocd_image_resolver_refreshes_total{outcome="failed"}`
	metricTracked        = `argocd_image_resolver_tracked_apps`
)

// TestRefreshLoopKubeAPI runs the refresh loop against a real kube-apiserver with
// Argo CD's Application CRD, the sidecar holding only what deploy/rbac.yaml grants
// (no Argo CD processes, so nothing consumes the annotation: what the loop did stays
// visible). A new tag of demo/web makes the loop annotate exactly the apps whose
// answer changed, once each; an app in another namespace is refreshed once the
// operator adds deploy/rbac-apps-in-any-namespace.yaml there; a restarted daemon
// goes on watching the same apps without a render.
func TestRefreshLoopKubeAPI(t *testing.T) {
	versions, err := Versions(paths)
	if err != nil {
		t.Fatal(err)
	}
	lab := startKubeLab(t, versions[0])
	web, api, batch := webRepo+":~1", apiRepo+":~1", batchRepo

	apps := []struct {
		app     KubeApp
		images  []string // as the source writes them
		changes bool     // the new web tag changes its answer
	}{
		{KubeApp{Namespace: "argocd", Name: "web", Images: map[string]string{"web": web}}, []string{webRepo + ":1.0.0"}, true},
		{KubeApp{Namespace: "argocd", Name: "both", Images: map[string]string{"web": web, "api": api}}, []string{webRepo + ":1.0.0", apiRepo + ":1.0.0"}, true},
		{KubeApp{Namespace: "argocd", Name: "steady", Images: map[string]string{"batch": batch}, Params: [][2]string{{"batch.update-strategy", "numeric"}}}, []string{batchRepo + ":1"}, false},
		{KubeApp{Namespace: "argocd", Name: "quiet", Images: map[string]string{"web": web}, Params: [][2]string{{"refresh", "off"}}}, []string{webRepo + ":1.0.0"}, false},
		{KubeApp{Namespace: "team-a", Name: "web", Images: map[string]string{"web": web}}, []string{webRepo + ":1.0.0"}, true},
	}
	for _, a := range apps {
		if err := lab.CreateKubeApp(a.app); err != nil {
			t.Fatal(err)
		}
		out, err := lab.RenderKubeApp(a.app, a.images...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, webRepo) && !strings.Contains(out, webRepo+":1.1.0") {
			t.Fatalf("%s rendered:\n%s", a.app.ArgoName(), out)
		}
	}
	wantMetric(t, lab, metricTracked, 4) // not quiet: it opted out

	pushed := time.Now()
	if err := lab.SeedTag("demo/web", "1.6.0"); err != nil {
		t.Fatal(err)
	}
	// web and both are refreshed; team-a/web is refused (no RBAC in team-a yet).
	waitMetric(t, lab, metricRequested, 2, time.Minute)
	took := time.Since(pushed)
	waitMetric(t, lab, metricFailed, 1, time.Minute)
	annotated := func() map[string]string {
		got := map[string]string{}
		for _, a := range apps {
			app, err := lab.AppIn(a.app.Namespace, a.app.Name)
			if err != nil {
				t.Fatal(err)
			}
			got[a.app.ArgoName()] = app.Metadata.Annotations[RefreshAnnotation]
		}
		return got
	}
	want := map[string]string{"web": "hard", "both": "hard", "steady": "", "quiet": "", "team-a_web": ""}
	if got := annotated(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("refresh annotations %v, want %v", got, want)
	}
	t.Logf("new tag pushed -> refresh annotation set: %s (tag TTL 1s, a pass every 1s)", took.Round(100*time.Millisecond))
	if lines := lab.LogLines("sidecar", "refresh requested", "application=argocd/web ", "old="+webRepo+":1.1.0 ", "new="+webRepo+":1.6.0 "); len(lines) != 1 {
		t.Errorf("%d log lines for the refresh of web naming the old and new reference, want 1", len(lines))
	}
	if lines := lab.LogLines("sidecar", "refresh failed", "team-a/web", "forbidden"); len(lines) == 0 {
		t.Errorf("no warning naming team-a/web and the refusal")
	}

	// The operator grants the loop team-a's Applications, as the docs say.
	if _, err := lab.must("", "kubectl", "apply", "-f", filepath.Join(lab.Paths.Root, "deploy", "rbac-apps-in-any-namespace.yaml")); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, lab, metricRequested, 3, time.Minute) // the retry's backoff is 5s, then 10s
	want["team-a_web"] = "hard"
	if got := annotated(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("refresh annotations %v, want %v", got, want)
	}
	// No second refresh of the same change: a few more passes, still 3.
	time.Sleep(3 * time.Second)
	wantMetric(t, lab, metricRequested, 3)
	wantMetric(t, lab, metricAlreadyPending, 0)

	// A restarted daemon goes on watching what it watched (the watch list it saved
	// beside its socket), without a render: nothing is news until a tag is. The
	// annotations are cleared first, as Argo CD does when it renders.
	for _, a := range apps {
		if _, err := lab.must("", "kubectl", "-n", a.app.Namespace, "annotate", "application", a.app.Name, RefreshAnnotation+"-"); err != nil {
			t.Fatal(err)
		}
	}
	if err := lab.RestartSidecar(); err != nil {
		t.Fatal(err)
	}
	wantMetric(t, lab, metricTracked, 4)
	if lines := lab.LogLines("sidecar", "watch list restored", "apps=4"); len(lines) != 1 {
		t.Errorf("%d log lines saying the watch list of 4 apps was restored, want 1", len(lines))
	}
	time.Sleep(3 * time.Second)
	wantMetric(t, lab, metricRequested, 0)
	wantMetric(t, lab, metricFailed, 0)
	if err := lab.SeedTag("demo/web", "1.7.0"); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, lab, metricRequested, 3, time.Minute)
	if got := annotated(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("refresh annotations after the restart and a new tag %v, want %v", got, want)
	}
}

func wantMetric(t *testing.T, lab *Lab, sample string, want float64) {
	t.Helper()
	got, err := lab.MetricValue(sample)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("%s = %v, want %v", sample, got, want)
	}
}

func waitMetric(t *testing.T, lab *Lab, sample string, want float64, limit time.Duration) {
	t.Helper()
	var got float64
	err := waitFor(limit, sample, lab.Sidecar(), func() error {
		var err error
		if got, err = lab.MetricValue(sample); err != nil {
			return err
		}
		if got < want {
			return ErrNotYet
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("%s = %v, want %v", sample, got, want)
	}
}
