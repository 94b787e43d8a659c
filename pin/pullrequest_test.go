package pin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge/giteatest"
)

func TestMain(m *testing.M) { giteatest.Main(m) }

// prWriter is a writer opening pull requests on g through the recording proxy p.
func prWriter(t *testing.T, g *giteatest.Gitea, p *giteatest.Proxy, repo string, opts ...WriterOption) *Writer {
	t.Helper()
	fg, err := forge.New(forge.Config{Kind: forge.KindGitea, API: p.URL, Token: func(context.Context) (string, error) { return g.Token, nil }})
	if err != nil {
		t.Fatal(err)
	}
	base := []WriterOption{
		WithAuth(func(string) (transport.AuthMethod, error) {
			return &githttp.BasicAuth{Username: g.User, Password: g.Password}, nil
		}),
		WithForges(func(string) (ForgeRepo, error) { return ForgeRepo{Forge: fg, Repo: repo}, nil }),
		WithRetry(1, 0),
	}
	return NewWriter(append(base, opts...)...)
}

func prChange(g *giteatest.Gitea, repo, app, ref, base, group string) Change {
	url := ""
	if g != nil {
		url = g.RepoURL(repo)
	}
	return Change{RepoURL: url, Branch: "main", Push: PushPullRequest, PRGroup: group, Edit: Edit{
		App: app, Dir: "apps/" + app, Target: pinsTarget{},
		Pins: []Pin{{Alias: "web", Image: "ghcr.io/org/web", Reference: ref, Tag: ref[strings.LastIndex(ref, ":")+1:], Policy: "semver ~1",
			Skipped: []string{"1.9.0: no linux/arm64"}}},
		Base: map[string]string{"web": base},
	}}
}

// apiCalls counts the proxy's requests since the last reset, and resets it.
func apiCalls(p *giteatest.Proxy) (int, string) {
	n, s := len(p.Requests()), p.Summary()
	p.Reset()
	return n, s
}

func write(t *testing.T, w *Writer, cs ...Change) Result {
	t.Helper()
	res, err := w.Write(context.Background(), cs)
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	return res
}

func actions(res Result) string {
	var out []string
	for _, pr := range res.PullRequests {
		out = append(out, pr.Branch+"="+pr.Action)
	}
	return strings.Join(out, ",")
}

// TestPullRequestsOnGitea: pin-push pull-request on a real Gitea: one pull
// request per app, opened once, updated in place by a newer pin, left alone
// when nothing changed, not opened again once closed with the same pins, and
// gone once merged; the base branch never gets a direct commit; API calls are
// one listing plus one per app whose pull request changes.
func TestPullRequestsOnGitea(t *testing.T) {
	g := giteatest.Shared(t)
	p := g.Proxy(t)
	repo := g.CreateRepo(t, "prs", map[string]string{"apps/web/deployment.yaml": "kind: Deployment\n", "apps/api/deployment.yaml": "kind: Deployment\n"})
	mainTip := g.BranchSHA(t, repo, "main")
	w := prWriter(t, g, p, repo)

	res := write(t, w, prChange(g, repo, "api", "ghcr.io/org/web:1.1.0", "", ""), prChange(g, repo, "web", "ghcr.io/org/web:1.1.0", "", ""))
	if got := actions(res); got != "image-resolver/api=created,image-resolver/web=created" {
		t.Fatalf("first write: %s", got)
	}
	if n, s := apiCalls(p); n != 2 {
		t.Errorf("first write: %d API calls, want 2 (two creates: new branches have no pull request to list):\n%s", n, s)
	}
	open := g.PullRequests(t, repo, "open")
	if len(open) != 2 {
		t.Fatalf("%d open pull requests, want 2", len(open))
	}
	web := g.PullRequest(t, repo, res.PullRequests[1].Number)
	for _, want := range []string{"ghcr.io/org/web:1.1.0", "(no pin)", "semver ~1", "1.9.0: no linux/arm64", "https://ghcr.io/org/web", "apps/web/" + PinsFile} {
		if !strings.Contains(web.Body, want) {
			t.Errorf("body lacks %q:\n%s", want, web.Body)
		}
	}
	if web.Head != "image-resolver/web" || web.Base != "main" || !strings.Contains(web.Title, "web") {
		t.Errorf("pull request %+v", web)
	}
	if tip := g.BranchSHA(t, repo, "main"); tip != mainTip {
		t.Fatalf("main moved from %s to %s: pins must arrive by pull request only", mainTip, tip)
	}

	// The same pins again: nothing pushed, nothing asked (the writer knows
	// its pull requests); a restarted writer lists them once.
	same := []Change{prChange(g, repo, "api", "ghcr.io/org/web:1.1.0", "", ""), prChange(g, repo, "web", "ghcr.io/org/web:1.1.0", "", "")}
	if got := actions(write(t, w, same...)); got != "image-resolver/api=unchanged,image-resolver/web=unchanged" {
		t.Errorf("same pins: %s", got)
	}
	if n, s := apiCalls(p); n != 0 {
		t.Errorf("same pins: %d API calls, want none:\n%s", n, s)
	}
	if got := actions(write(t, prWriter(t, g, p, repo), same...)); got != "image-resolver/api=unchanged,image-resolver/web=unchanged" {
		t.Errorf("same pins, restarted writer: %s", got)
	}
	if n, s := apiCalls(p); n != 1 {
		t.Errorf("same pins, restarted writer: %d API calls, want the listing only:\n%s", n, s)
	}

	// A newer tag for web: the same pull request, its branch and body updated.
	headBefore := web.HeadSHA
	res = write(t, w, prChange(g, repo, "web", "ghcr.io/org/web:1.2.0", "", ""))
	if got := actions(res); got != "image-resolver/web=updated" || res.PullRequests[0].Number != web.Number {
		t.Errorf("newer tag: %s #%d, want web updated in #%d", got, res.PullRequests[0].Number, web.Number)
	}
	if n, s := apiCalls(p); n != 1 {
		t.Errorf("newer tag: %d API calls, want one update:\n%s", n, s)
	}
	web = g.WaitPullRequest(t, repo, web.Number, "head moved", func(pr giteatest.PullRequest) bool { return pr.HeadSHA != headBefore })
	if !strings.Contains(web.Body, "ghcr.io/org/web:1.2.0") || len(g.PullRequests(t, repo, "open")) != 2 {
		t.Errorf("after the newer tag: body %q, %d open", web.Body, len(g.PullRequests(t, repo, "open")))
	}

	// Merged: main carries the pin; the same pin again asks nothing.
	g.MergePullRequest(t, repo, web.Number)
	res = write(t, w, prChange(g, repo, "web", "ghcr.io/org/web:1.2.0", "", ""))
	if len(res.PullRequests) != 0 {
		t.Errorf("after the merge: %s, want nothing", actions(res))
	}

	// Closed by a person: not opened again for the same pins, by this writer
	// (no call) nor a restarted one (the listing); a newer pin opens a new one.
	api := res0Number(t, g, repo, "image-resolver/api")
	g.API(t, http.MethodPatch, fmt.Sprintf("/repos/%s/pulls/%d", repo, api), map[string]any{"state": "closed"}, nil)
	p.Reset()
	apiSame := prChange(g, repo, "api", "ghcr.io/org/web:1.1.0", "", "")
	if got := actions(write(t, w, apiSame)); got != "image-resolver/api="+PRUnchanged {
		t.Errorf("closed pull request, same pins: %s", got)
	}
	restarted := prWriter(t, g, p, repo)
	if got := actions(write(t, restarted, apiSame)); got != "image-resolver/api="+PRNotReopened {
		t.Errorf("closed pull request, same pins, restarted writer: %s", got)
	}
	if n, s := apiCalls(p); n != 1 {
		t.Errorf("closed, same pins: %d API calls, want the restarted writer's listing only:\n%s", n, s)
	}
	if n := len(g.PullRequests(t, repo, "open")); n != 0 {
		t.Errorf("%d open pull requests after the close, want 0", n)
	}
	p.Reset()
	res = write(t, w, prChange(g, repo, "api", "ghcr.io/org/web:1.2.0", "", ""))
	if got := actions(res); got != "image-resolver/api=created" || res.PullRequests[0].Number == api {
		t.Errorf("closed pull request, newer pin: %s #%d (closed was #%d)", got, res.PullRequests[0].Number, api)
	}
	if n, s := apiCalls(p); n != 2 {
		t.Errorf("closed, newer pin: %d API calls, want the update that finds it closed and a create:\n%s", n, s)
	}
}

func res0Number(t *testing.T, g *giteatest.Gitea, repo, head string) int {
	t.Helper()
	for _, pr := range g.PullRequests(t, repo, "open") {
		if pr.Head == head {
			return pr.Number
		}
	}
	t.Fatalf("no open pull request from %s", head)
	return 0
}

// TestPullRequestPerRepository: pin-pr-group repository puts every app's
// pins in one pull request from image-resolver/repository-main.
func TestPullRequestPerRepository(t *testing.T) {
	g := giteatest.Shared(t)
	p := g.Proxy(t)
	repo := g.CreateRepo(t, "group", map[string]string{"README.md": "apps\n"})
	w := prWriter(t, g, p, repo)
	var cs []Change
	for _, app := range []string{"a", "b", "c"} {
		cs = append(cs, prChange(g, repo, app, "ghcr.io/org/web:2.0.0", "", GroupRepository))
	}
	res := write(t, w, cs...)
	if got := actions(res); got != "image-resolver/repository-main=created" || len(res.PullRequests[0].Apps) != 3 {
		t.Fatalf("%s, apps %v", got, res.PullRequests)
	}
	if n, s := apiCalls(p); n != 1 {
		t.Errorf("%d API calls, want one create:\n%s", n, s)
	}
}

// TestProtectedBranchSaysPullRequest: a direct push to a protected branch is
// refused, and the error says so and names pin-push: pull-request; the same
// pins by pull request go through.
func TestProtectedBranchSaysPullRequest(t *testing.T) {
	g := giteatest.Shared(t)
	p := g.Proxy(t)
	repo := g.CreateRepo(t, "protected", map[string]string{"apps/web/deployment.yaml": "kind: Deployment\n"})
	g.ProtectBranch(t, repo, "main")
	w := prWriter(t, g, p, repo)
	direct := prChange(g, repo, "web", "ghcr.io/org/web:1.1.0", "", "")
	direct.Push = PushDirect
	_, err := w.Write(context.Background(), []Change{direct})
	if !errors.Is(err, ErrPushRefused) || !strings.Contains(err.Error(), "pin-push: pull-request") || !strings.Contains(err.Error(), "Not allowed to push to protected branch main") || strings.Contains(err.Error(), g.Password) {
		t.Fatalf("direct push to a protected branch: %v", err)
	}
	if got := actions(write(t, w, prChange(g, repo, "web", "ghcr.io/org/web:1.1.0", "", ""))); got != "image-resolver/web=created" {
		t.Errorf("by pull request: %s", got)
	}
}
