package argocde2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pinsFile is the pins target's file (pin.PinsFile).
const pinsFile = ".argocd-image-resolver.pins.yaml"

// gitLog is the subjects of main in the lab's repository, newest first.
func gitLog(t *testing.T, lab *Lab) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", filepath.Join(lab.Dir, "git", "apps.git"), "log", "--format=%s", "main").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func gitShow(t *testing.T, lab *Lab, path string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", filepath.Join(lab.Dir, "git", "apps.git"), "show", "main:"+path).Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// waitGit waits until ok holds for the lab repository.
func waitGit(t *testing.T, lab *Lab, what string, ok func() bool) {
	t.Helper()
	if err := waitFor(90*time.Second, what, lab.Sidecar(), func() error {
		if ok() {
			return nil
		}
		return ErrNotYet
	}); err != nil {
		t.Fatal(err)
	}
}

// testPinsInGit: an app with pin-mode use. Its first render resolves live and the
// sidecar commits the pins to the app's branch; Argo CD (told by the git host's
// push webhook, as a real install is) renders that commit from the pins. A new
// tag becomes a pin commit by the refresh loop, which Argo CD renders by itself
// (no hard refresh); `git revert` of that commit brings the old image back, the
// sidecar records the reverted reference under held: in one commit, and never
// pins it again.
func testPinsInGit(t *testing.T, lab *Lab) {
	// The app's own directory, so that other scenarios' apps see no pins.
	work := lab.GitWork
	for _, c := range [][]string{
		{"git", "-C", work, "pull", "-q", "--ff-only", "origin", "main"},
		{"cp", "-r", filepath.Join(work, "apps", "plain-cron"), filepath.Join(work, "apps", "pinned")},
		{"git", "-C", work, "add", "-A"},
		{"git", "-C", work, "-c", "user.name=e2e", "-c", "user.email=e2e@127.0.0.1", "commit", "-q", "-m", "apps/pinned"},
		{"git", "-C", work, "push", "-q", "origin", "main"},
	} {
		if _, err := lab.must("", c...); err != nil {
			t.Fatal(err)
		}
	}
	commits := len(gitLog(t, lab))
	createAppFromFile(t, lab, AppSpec{Name: "pinned", Path: "apps/pinned", Namespace: "pinned", Params: [][2]string{{"pin-mode", "use"}}})

	// The first render pinned web (1.5.0, from new-tag-refresh) and batch (12).
	waitGit(t, lab, "the first pin commit", func() bool { return len(gitLog(t, lab)) > commits })
	pins := gitShow(t, lab, "apps/pinned/"+pinsFile)
	if !strings.Contains(pins, "reference: "+webRepo+":1.5.0") || !strings.Contains(pins, "reference: "+batchRepo+":12") {
		t.Fatalf("pins committed:\n%s", pins)
	}
	t.Logf("pin commit: %s", gitLog(t, lab)[0])
	waitApp(t, lab, "pinned", "rendered from its pins", func(a *Application) error {
		if web := get(t, manifests(t, lab, "pinned"), "Deployment/web"); !strings.Contains(web.Annotation(annResolved), "(pinned in "+pinsFile+")") {
			return ErrNotYet
		}
		return Compared(a)
	})
	web := get(t, manifests(t, lab, "pinned"), "Deployment/web")
	wantImages(t, "pinned, from git", web, webRepo+":1.5.0", webRepo+":1.5.0")
	syncApp(t, lab, "pinned")

	// A new tag: a pin commit, and Argo CD renders it with no refresh asked.
	requested0, _ := lab.MetricValue(metricRequested)
	pushed := time.Now()
	if err := lab.SeedTag("demo/web", "1.6.0"); err != nil {
		t.Fatal(err)
	}
	waitGit(t, lab, "the pin commit of 1.6.0", func() bool {
		return strings.Contains(gitShow(t, lab, "apps/pinned/"+pinsFile), "reference: "+webRepo+":1.6.0")
	})
	pinned := time.Since(pushed)
	waitApp(t, lab, "pinned", "OutOfSync with 1.6.0 from git", SyncStatus("OutOfSync"))
	rendered := time.Since(pushed)
	wantImages(t, "pinned after the pin commit", get(t, manifests(t, lab, "pinned"), "Deployment/web"), webRepo+":1.6.0", webRepo+":1.6.0")
	t.Logf("new tag pushed -> pin committed %s, -> Argo CD OutOfSync with it %s (tag TTL 1s, pass 1s, batch window 2s, webhook)",
		pinned.Round(100*time.Millisecond), rendered.Round(100*time.Millisecond))
	if lines := lab.LogLines("sidecar", "refresh requested", "application=argocd/pinned "); len(lines) != 0 {
		t.Errorf("a pin-mode use app was hard-refreshed: %q", lines)
	}
	_ = requested0
	syncApp(t, lab, "pinned")
	wantImages(t, "live after sync", live(t, lab, "pinned", "deployment", "web"), webRepo+":1.6.0", webRepo+":1.6.0")

	// git revert: the old image comes back, through Argo CD, and stays.
	for _, c := range [][]string{
		{"git", "-C", work, "pull", "-q", "--ff-only", "origin", "main"},
		{"git", "-C", work, "-c", "user.name=e2e", "-c", "user.email=e2e@127.0.0.1", "revert", "--no-edit", "HEAD"},
		{"git", "-C", work, "push", "-q", "origin", "main"},
	} {
		if _, err := lab.must("", c...); err != nil {
			t.Fatal(err)
		}
	}
	afterRevert := len(gitLog(t, lab)) // the hold commit may land before Argo CD renders the revert
	waitApp(t, lab, "pinned", "OutOfSync with 1.5.0 after the revert", func(a *Application) error {
		if !strings.Contains(strings.Join(get(t, manifests(t, lab, "pinned"), "Deployment/web").Images(), " "), webRepo+":1.5.0") {
			return ErrNotYet
		}
		return SyncStatus("OutOfSync")(a)
	})
	// The revert is held in git: one commit records web 1.6.0 under held: (the
	// pin stays 1.5.0), and nothing after it pins 1.6.0 again.
	waitGit(t, lab, "the hold commit", func() bool { return len(gitLog(t, lab)) > afterRevert })
	pins = gitShow(t, lab, "apps/pinned/"+pinsFile)
	if log := gitLog(t, lab); !strings.HasPrefix(log[0], "argocd-image-resolver: hold web 1.6.0") ||
		!strings.Contains(pins, "reference: "+webRepo+":1.5.0") || !strings.Contains(pins, "held:") || !strings.Contains(pins, "reference: "+webRepo+":1.6.0") {
		t.Fatalf("after the revert, commit %q, pins file:\n%s", log[0], pins)
	}
	commits = len(gitLog(t, lab))
	time.Sleep(5 * time.Second) // a few passes of the loop past the tag TTL
	if n := len(gitLog(t, lab)); n != commits {
		t.Errorf("the reverted pin was committed again: %q", gitLog(t, lab)[:n-commits])
	}
	syncApp(t, lab, "pinned")
	wantImages(t, "live after the revert", live(t, lab, "pinned", "deployment", "web"), webRepo+":1.5.0", webRepo+":1.5.0")
}
