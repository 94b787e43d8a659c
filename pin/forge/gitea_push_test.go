package forge

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/memfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge/giteatest"
)

// newGiteaAnswerServer serves h on 127.0.0.1 for the test and returns its URL.
func newGiteaAnswerServer(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// A direct push to a protected branch, the way the pin writer pushes (go-git
// over HTTP, basic auth), is refused and the branch is unchanged. The test
// logs what go-git reports, which the writer maps to a clear error.
func testGiteaProtectedPush(t *testing.T, g *giteatest.Gitea) {
	repo := g.CreateRepo(t, "protected", map[string]string{"apps/a.yaml": "tag: v1\n"})
	g.ProtectBranch(t, repo, "main")
	before := g.BranchSHA(t, repo, "main")

	auth := &githttp.BasicAuth{Username: g.User, Password: g.Password}
	r, err := git.Clone(memory.NewStorage(), memfs.New(), &git.CloneOptions{URL: g.RepoURL(repo), Auth: auth})
	if err != nil {
		t.Fatalf("clone: %v", err)
	}
	wt, err := r.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	f, err := wt.Filesystem.Create("apps/a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte("tag: v2\n"))
	_ = f.Close()
	if _, err := wt.Add("apps/a.yaml"); err != nil {
		t.Fatal(err)
	}
	sig := &object.Signature{Name: "pin", Email: "pin@127.0.0.1", When: time.Unix(1767225600, 0)}
	if _, err := wt.Commit("pin a to v2", &git.CommitOptions{Author: sig, Committer: sig}); err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	err = r.Push(&git.PushOptions{Auth: auth, Progress: &progress})
	if err == nil {
		t.Fatal("the push to protected main was accepted")
	}
	t.Logf("go-git Push error: %q", err.Error())
	t.Logf("go-git Push progress (sideband): %q", progress.String())
	if after := g.BranchSHA(t, repo, "main"); after != before {
		t.Fatalf("main moved from %s to %s", before, after)
	}
	for _, secret := range []string{g.Password, g.Token} {
		if strings.Contains(err.Error(), secret) || strings.Contains(progress.String(), secret) {
			t.Fatal("a credential is in go-git's error or progress")
		}
	}
}
