package argocde2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	// argoPoll is Argo CD's default git poll (timeout.reconciliation 180s; the
	// lab sets 600s): what a merge waits for where no push webhook is configured.
	argoPoll = 180 * time.Second

	metricPinLanded   = `argocd_image_resolver_refreshes_total{outcome="pin-landed"}`
	metricNotReopened = `argocd_image_resolver_pin_pull_requests_total{action="closed-not-reopened"}`
)

// testPinsByPullRequest: issue 23's pull requests through a whole Argo CD. An
// app (pin-mode use, pin-push pull-request) on a Gitea repository, from which
// no webhook reaches Argo CD. A new tag opens a pull request (branch
// image-resolver/<app>) while the app keeps rendering the old pin; a newer tag
// updates the same pull request; the merge, through Gitea's API, is rendered by
// Argo CD (its revision the merge commit, the newest tag in the manifests) long
// before Argo CD's own poll, because the sidecar watches the base branch and
// asks for a normal refresh. A person's revert on main is rendered the same way,
// and a restarted sidecar (which forgot what it wrote) does not open the pull
// request again for the reverted reference.
func testPinsByPullRequest(t *testing.T, lab *Lab) {
	const app = "pr-pinned"
	g := lab.Gitea
	image := DemoHost + "/demo/prweb" // its own image: the other scenarios' tags change nothing here
	ref := func(tag string) string { return image + ":" + tag }
	if err := lab.SeedTag("demo/prweb", "1.0.0"); err != nil {
		t.Fatal(err)
	}
	repo, work := createPRRepo(t, lab, app, image)
	mainTip := tip(t, g, work)
	createAppFromFile(t, lab, AppSpec{Name: app, RepoURL: g.RepoURL(repo), Path: "apps/" + app, Namespace: app,
		Params: [][2]string{{"pin-mode", "use"}, {"pin-push", "pull-request"}}})
	waitRendered(t, lab, app, mainTip, ref("1.0.0"))

	// A new tag: a pull request, and the app still renders main's pin.
	pushed := time.Now()
	if err := lab.SeedTag("demo/prweb", "1.1.0"); err != nil {
		t.Fatal(err)
	}
	pr := waitPR(t, g, repo, "the pull request of 1.1.0", func(pr GiteaPR) bool { return strings.Contains(pr.Body, ref("1.1.0")) })
	opened := time.Since(pushed)
	if pr.Head.Ref != "image-resolver/"+app || pr.Base.Ref != "main" || pr.State != "open" {
		t.Errorf("pull request #%d: head %q base %q state %q, want image-resolver/%s into main, open", pr.Number, pr.Head.Ref, pr.Base.Ref, pr.State, app)
	}
	if got := tip(t, g, work); got != mainTip {
		t.Fatalf("main moved (%s -> %s): pins go by pull request", mainTip, got)
	}
	waitRendered(t, lab, app, mainTip, ref("1.0.0"))

	// A newer tag: the same pull request, a new head, the body naming it.
	pushed = time.Now()
	if err := lab.SeedTag("demo/prweb", "1.2.0"); err != nil {
		t.Fatal(err)
	}
	first := pr
	pr = waitPR(t, g, repo, "the pull request updated to 1.2.0", func(pr GiteaPR) bool {
		return strings.Contains(pr.Body, ref("1.2.0")) && pr.Head.SHA != first.Head.SHA
	})
	updated := time.Since(pushed)
	if pr.Number != first.Number || strings.Contains(pr.Body, ref("1.1.0")) {
		t.Errorf("after 1.2.0: pull request #%d (first #%d), body:\n%s", pr.Number, first.Number, pr.Body)
	}

	// The merge: Argo CD renders the merge commit, asked by the sidecar.
	landed0, _ := lab.MetricValue(metricPinLanded)
	if err := g.Merge(repo, pr.Number); err != nil {
		t.Fatal(err)
	}
	merged := time.Now() // the merge commit is on main when Gitea answers
	if pr, _ = g.PullRequest(repo, pr.Number); !pr.Merged || pr.MergeCommit == "" || pr.MergeCommit != tip(t, g, work) {
		t.Fatalf("after the merge: pull request %+v, main at %s", pr, tip(t, g, work))
	}
	waitRenderedWithin(t, lab, app, pr.MergeCommit, ref("1.2.0"), argoPoll)
	rendered := time.Since(merged)
	wantMetric(t, lab, metricPinLanded, landed0+1)

	// A person reverts the merge on main: rendered the same way.
	for _, c := range [][]string{
		{"-C", work, "pull", "-q", "--ff-only", "origin", "main"},
		{"-C", work, "-c", "user.name=e2e", "-c", "user.email=e2e@127.0.0.1", "revert", "-m", "1", "--no-edit", "HEAD"},
		{"-C", work, "push", "-q", "origin", "main"},
	} {
		if _, err := g.Git(c...); err != nil {
			t.Fatal(err)
		}
	}
	reverted := time.Now()
	revert := tip(t, g, work)
	waitRenderedWithin(t, lab, app, revert, ref("1.0.0"), argoPoll)
	revertRendered := time.Since(reverted)
	wantMetric(t, lab, metricPinLanded, landed0+2)

	// A restarted sidecar forgot what it wrote; once the app renders again (a hard
	// refresh: a pin-mode use app is watched from its next render) its refresh
	// pass sees 1.2.0 newer than the pin, and the writer finds the pull request
	// merged with that very pin: none is opened.
	if err := lab.RestartSidecar(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	hardRefresh(t, lab, app)
	waitRendered(t, lab, app, revert, ref("1.0.0"))
	waitMetric(t, lab, metricNotReopened, 1, time.Minute)
	declined := time.Since(restarted)
	if lines := lab.LogLines("sidecar", "pins pull request closed-not-reopened", "image-resolver/"+app); len(lines) == 0 {
		t.Errorf("no \"pins pull request closed-not-reopened\" line for image-resolver/%s in the sidecar's log", app)
	}
	time.Sleep(3 * time.Second) // a few more passes (1 s each)
	prs, err := g.PullRequests(repo, "all")
	if err != nil {
		t.Fatal(err)
	}
	if len(prs) != 1 || prs[0].Number != pr.Number || !prs[0].Merged {
		t.Errorf("pull requests after the revert and the restart: %+v, want only #%d, merged", prs, pr.Number)
	}
	if got := tip(t, g, work); got != revert {
		t.Errorf("main moved after the revert (%s -> %s)", revert, got)
	}
	t.Logf("new tag -> pull request opened %s; newer tag -> updated %s; merge -> Argo CD renders the merge commit %s (Argo CD's poll: %s by default, 600s in the lab; no webhook); revert -> rendered %s; sidecar restart + hard refresh -> closed-not-reopened %s",
		opened.Round(100*time.Millisecond), updated.Round(100*time.Millisecond), rendered.Round(100*time.Millisecond), argoPoll,
		revertRendered.Round(100*time.Millisecond), declined.Round(100*time.Millisecond))
}

// createPRRepo makes a Gitea repository holding apps/<app>: plain-cron with its
// web image replaced by image, and a pins file pinning image:1.0.0 and batch:12.
// It returns owner/name and a working copy of main.
func createPRRepo(t *testing.T, lab *Lab, app, image string) (repo, work string) {
	t.Helper()
	src := filepath.Join(lab.Dir, "tmp", "pr-src")
	dir := filepath.Join(src, "apps", app)
	if err := copyDir(filepath.Join(lab.Paths.Root, "testdata", "apps", "plain-cron"), dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"deployment.yaml", ".argocd-image-resolver.yaml"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(strings.ReplaceAll(string(b), webRepo, image)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pins := fmt.Sprintf("pins:\n  web:\n    reference: %s:1.0.0\n  batch:\n    reference: %s:12\n", image, batchRepo)
	if err := os.WriteFile(filepath.Join(dir, pinsFile), []byte(pins), 0o644); err != nil {
		t.Fatal(err)
	}
	work = filepath.Join(lab.Dir, "tmp", "pr-work")
	repo, err := lab.Gitea.CreateRepo("pins-by-pr", src, work)
	if err != nil {
		t.Fatal(err)
	}
	return repo, work
}

// tip is main's commit in the repository of the working copy work.
func tip(t *testing.T, g *Gitea, work string) string {
	t.Helper()
	sha, err := g.Tip(work, "main")
	if err != nil {
		t.Fatal(err)
	}
	return sha
}

// waitPR waits (90 s) for exactly one open pull request in repo, for which ok
// holds.
func waitPR(t *testing.T, g *Gitea, repo, what string, ok func(GiteaPR) bool) GiteaPR {
	t.Helper()
	var got GiteaPR
	err := waitFor(90*time.Second, what, g.proc, func() error {
		prs, err := g.PullRequests(repo, "open")
		if err != nil {
			return err
		}
		if len(prs) > 1 {
			return fmt.Errorf("%d open pull requests, want one: %+v", len(prs), prs)
		}
		if len(prs) == 0 || !ok(prs[0]) {
			return fmt.Errorf("%w: %+v", ErrNotYet, prs)
		}
		got = prs[0]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// waitRendered waits until Argo CD compared app at revision and its manifests
// run web at ref, from the pins file.
func waitRendered(t *testing.T, lab *Lab, app, revision, ref string) {
	t.Helper()
	waitRenderedWithin(t, lab, app, revision, ref, 120*time.Second)
}

func waitRenderedWithin(t *testing.T, lab *Lab, app, revision, ref string, limit time.Duration) {
	t.Helper()
	_, err := lab.WaitApp(app, limit, "rendered at "+revision+" with "+ref, func(a *Application) error {
		if err := Compared(a); err != nil {
			return err
		}
		if len(a.Status.Conditions) > 0 {
			return fmt.Errorf("conditions: %s", a.ConditionsText())
		}
		if a.Status.Sync.Revision != revision {
			return fmt.Errorf("%w: compared at %s", ErrNotYet, a.Status.Sync.Revision)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	web := get(t, manifests(t, lab, app), "Deployment/web")
	wantImages(t, "argocd app manifests at "+revision[:8], web, ref, ref)
	if !strings.Contains(web.Annotation(annResolved), "(pinned in "+pinsFile+")") {
		t.Errorf("at %s web is not rendered from the pins: %s=%q", revision[:8], annResolved, web.Annotation(annResolved))
	}
}
