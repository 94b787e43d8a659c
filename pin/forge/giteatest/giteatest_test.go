package giteatest_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge/giteatest"
)

func TestMain(m *testing.M) { giteatest.Main(m) }

// A dedicated Gitea answers its API with the admin's token, and Stop leaves
// no process of its group behind.
func TestStartStop(t *testing.T) {
	var g *giteatest.Gitea
	t.Run("run", func(t *testing.T) {
		g = giteatest.Start(t)
		var me struct {
			Login   string `json:"login"`
			IsAdmin bool   `json:"is_admin"`
		}
		g.API(t, http.MethodGet, "/user", nil, &me)
		if me.Login != g.User || !me.IsAdmin {
			t.Fatalf("GET /user = %+v, want admin %s", me, g.User)
		}
		if !g.Running() {
			t.Fatal("not running")
		}
	})
	if g == nil {
		return // skipped
	}
	if g.Running() {
		t.Fatal("still running after the test that started it ended")
	}
	// The whole process group is gone (ESRCH), git children included.
	if err := syscall.Kill(-g.Pid(), 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("kill(-%d, 0) = %v, want ESRCH: a process of Gitea's group is left", g.Pid(), err)
	}
	if _, err := http.Get(g.URL + "/api/v1/version"); err == nil {
		t.Fatalf("%s still answers after Stop", g.URL)
	}
}

// A second Shared is the first one, at no cost.
func TestSharedOnce(t *testing.T) {
	a := giteatest.Shared(t)
	t0 := time.Now()
	b := giteatest.Shared(t)
	if a != b {
		t.Fatal("Shared started a second Gitea")
	}
	if d := time.Since(t0); d > 100*time.Millisecond {
		t.Fatalf("second Shared took %s", d)
	}
}

// The helpers a forge test relies on: a repository with files on main, a
// branch, a pull request listed and merged, branch protection, and a proxy
// that counts requests.
func TestRepoPullRequestFlow(t *testing.T) {
	g := giteatest.Shared(t)
	repo := g.CreateRepo(t, "flow", map[string]string{"apps/a.yaml": "a: 1\n", "README.md": "hi\n"})
	if sha := g.BranchSHA(t, repo, "main"); len(sha) != 40 {
		t.Fatalf("main's tip = %q", sha)
	}
	g.CreateBranch(t, repo, "feature", "main", map[string]string{"apps/a.yaml": "a: 2\n"})
	g.CreateBranches(t, repo, "feature", "copy-1", "copy-2")
	for _, b := range []string{"copy-1", "copy-2"} {
		if got, want := g.BranchSHA(t, repo, b), g.BranchSHA(t, repo, "feature"); got != want {
			t.Fatalf("%s at %s, want feature's %s", b, got, want)
		}
	}
	n := g.OpenPullRequest(t, repo, "feature", "main", "Feature")
	open := g.PullRequests(t, repo, "open")
	if len(open) != 1 || open[0].Number != n || open[0].Head != "feature" || open[0].HeadRepo != repo {
		t.Fatalf("open pull requests = %+v, want #%d from feature", open, n)
	}
	g.ProtectBranch(t, repo, "main")
	g.MergePullRequest(t, repo, n)
	if p := g.PullRequest(t, repo, n); !p.Merged || p.State != "closed" {
		t.Fatalf("after merge: %+v", p)
	}
	if got := g.PullRequests(t, repo, "open"); len(got) != 0 {
		t.Fatalf("open after merge: %+v", got)
	}

	p := g.Proxy(t)
	resp, err := http.Get(p.URL + "/api/v1/repos/" + repo + "/pulls?state=all")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	reqs := p.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/api/v1/repos/"+repo+"/pulls" || reqs[0].Query != "state=all" || reqs[0].Status != 200 {
		t.Fatalf("proxy recorded %v", reqs)
	}
}

// The binary is looked up where the environment says, and a missing one
// names the command that builds it.
func TestMissingBinaryMessage(t *testing.T) {
	if os.Getenv("CI") != "" {
		t.Skip("under CI a missing binary fails the test, which this one cannot observe")
	}
	t.Setenv(giteatest.BinEnv, t.TempDir()+"/no-gitea")
	ft := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); giteatest.Start(ft) }()
	<-done
	if !strings.Contains(ft.msg, "no gitea binary at") || !strings.Contains(ft.msg, giteatest.BuildCommand) {
		t.Fatalf("message %q does not name the binary and %q", ft.msg, giteatest.BuildCommand)
	}
}

// recordingTB records a Skip or Fatal message and ends the goroutine.
type recordingTB struct {
	testing.TB
	msg string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Skipf(format string, args ...any) {
	r.msg = "skip: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.msg = "fatal: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}
