package forge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge/forgetest"
)

// Operations of a fixture, named alike for both forges.
const (
	fxList      = "list"
	fxCreate    = "create"
	fxUpdate    = "update"
	fxLabels    = "labels"
	fxAssignees = "assignees"
	fxReviewers = "reviewers"
	fxAutoMerge = "auto-merge"
	fxUsers     = "users"
)

// fixture is one forge's test server and a Forge on it, seen alike.
type fixture struct {
	kind  string
	api   string
	repo  string
	token string
	forge Forge
	obs   *observer
	// routes maps fixture operations to the server's routes ("": none).
	routes map[string]string
	count  func(route string) int
	total  func() int
	fail   func(route string, n int, f forgetest.Failure)
	// seedOpen adds open pull requests: mine from the repository itself
	// with head prefix "image-resolver/", plus a fork's and another
	// prefix's (open), and a closed one.
	seed func(mine int)
	// held is the pull request number as the server holds it.
	held func(number int) heldPR
	// failures the server renders as documented.
	rateLimit  func(retryAfter, reset time.Duration) forgetest.Failure
	refusal    func(status int) forgetest.Failure
	validation func(msg string) forgetest.Failure
}

// heldPR is what a server holds of a pull request.
type heldPR struct {
	Title, Body, Head, Base, State string
	Labels, Assignees, Reviewers   []string
	AutoMerge                      bool
	// KeepsBranch: GitHub maintainer_can_modify false / GitLab
	// remove_source_branch false.
	KeepsBranch bool
}

// observer records Config.Observe's calls.
type observer struct {
	mu    sync.Mutex
	calls []observed
}

type observed struct {
	op     string
	status int
}

func (o *observer) observe(op string, status int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, observed{op, status})
}

func (o *observer) all() []observed {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]observed(nil), o.calls...)
}

// staticToken is a Config.Token of tok.
func staticToken(tok string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return tok, nil }
}

func newGitHubFixture(t *testing.T) *fixture {
	srv := forgetest.NewGitHub(t)
	srv.AddRepo("octo/app-config")
	srv.AddUsers("alice", "bob")
	fx := &fixture{kind: KindGitHub, api: srv.URL, repo: "octo/app-config", token: srv.Token, obs: &observer{}, count: srv.Count, total: srv.Total, fail: srv.FailNext,
		routes: map[string]string{
			fxList: forgetest.GitHubListPulls, fxCreate: forgetest.GitHubCreatePull, fxUpdate: forgetest.GitHubUpdatePull,
			fxLabels: forgetest.GitHubAddLabels, fxAssignees: forgetest.GitHubAddAssignees, fxReviewers: forgetest.GitHubRequestReviewers,
			fxAutoMerge: forgetest.GitHubGraphQL, fxUsers: "",
		},
		rateLimit: func(retryAfter, reset time.Duration) forgetest.Failure {
			if retryAfter > 0 {
				return srv.SecondaryRateLimit(429, retryAfter)
			}
			return srv.RateLimit(403, reset)
		},
		refusal: srv.Refusal, validation: srv.Validation,
	}
	fx.seed = func(mine int) {
		for i := range mine {
			head := fmt.Sprintf("image-resolver/app-%03d", i)
			srv.SetBranch(fx.repo, head, fmt.Sprintf("%040x", i+1))
			srv.AddPR(fx.repo, forgetest.PR{Title: "pin " + head, Body: "body", Head: head, Base: "main"})
		}
		srv.AddPR(fx.repo, forgetest.PR{Title: "fork", Head: "image-resolver/fork", Base: "main", HeadRepo: "someone/app-config"})
		srv.AddPR(fx.repo, forgetest.PR{Title: "other", Head: "feature/x", Base: "main"})
		srv.AddPR(fx.repo, forgetest.PR{Title: "closed", Head: "image-resolver/old", Base: "main", State: "closed", Merged: true})
	}
	fx.held = func(number int) heldPR {
		for _, pr := range srv.PRs(fx.repo) {
			if pr.Number == number {
				return heldPR{pr.Title, pr.Body, pr.Head, pr.Base, pr.State, pr.Labels, pr.Assignees, pr.Reviewers, pr.AutoMerge, !pr.MaintainerCanModify}
			}
		}
		t.Fatalf("github: no pull request #%d held", number)
		return heldPR{}
	}
	fx.forge = mustNew(t, Config{Kind: KindGitHub, API: srv.URL, Token: staticToken(srv.Token), Observe: fx.obs.observe})
	return fx
}

func newGitLabFixture(t *testing.T) *fixture {
	srv := forgetest.NewGitLab(t)
	repo := "group/sub/app.config" // escaped as group%2Fsub%2Fapp%2Econfig
	srv.AddProject(repo)
	srv.AddUsers("alice", "bob")
	fx := &fixture{kind: KindGitLab, api: srv.URL, repo: repo, token: srv.Token, obs: &observer{}, count: srv.Count, total: srv.Total, fail: srv.FailNext,
		routes: map[string]string{
			fxList: forgetest.GitLabListMRs, fxCreate: forgetest.GitLabCreateMR, fxUpdate: forgetest.GitLabUpdateMR,
			fxLabels: "", fxAssignees: "", fxReviewers: "",
			fxAutoMerge: forgetest.GitLabMergeMR, fxUsers: forgetest.GitLabListUsers,
		},
		rateLimit: srv.RateLimit, refusal: srv.Refusal,
		validation: func(msg string) forgetest.Failure { return srv.Validation("source_branch", msg) },
	}
	fx.seed = func(mine int) {
		for i := range mine {
			head := fmt.Sprintf("image-resolver/app-%03d", i)
			srv.SetBranch(repo, head, fmt.Sprintf("%040x", i+1))
			srv.AddMR(repo, forgetest.MR{Title: "pin " + head, Description: "body", SourceBranch: head, TargetBranch: "main"})
		}
		srv.AddMR(repo, forgetest.MR{Title: "fork", SourceBranch: "image-resolver/fork", TargetBranch: "main", SourceProject: "someone/app.config"})
		srv.AddMR(repo, forgetest.MR{Title: "other", SourceBranch: "feature/x", TargetBranch: "main"})
		srv.AddMR(repo, forgetest.MR{Title: "closed", SourceBranch: "image-resolver/old", TargetBranch: "main", State: "merged"})
	}
	fx.held = func(number int) heldPR {
		for _, mr := range srv.MRs(repo) {
			if mr.IID == number {
				state := map[string]string{"opened": StateOpen, "merged": StateMerged}[mr.State]
				return heldPR{mr.Title, mr.Description, mr.SourceBranch, mr.TargetBranch, state, mr.Labels, mr.Assignees, mr.Reviewers, mr.AutoMerge, !mr.RemoveSourceBranch}
			}
		}
		t.Fatalf("gitlab: no merge request !%d held", number)
		return heldPR{}
	}
	fx.forge = mustNew(t, Config{Kind: KindGitLab, API: srv.URL, Token: staticToken(srv.Token), Observe: fx.obs.observe})
	return fx
}

// fixtures are both forges' fixtures.
var fixtures = []func(*testing.T) *fixture{newGitHubFixture, newGitLabFixture}

func mustNew(t *testing.T, cfg Config) Forge {
	t.Helper()
	f, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s at %s): %v", cfg.Kind, cfg.API, err)
	}
	return f
}

// requests is the count of every fixture operation, for exact comparisons.
func (fx *fixture) requests() map[string]int {
	out := map[string]int{}
	for op, route := range fx.routes {
		if route != "" {
			out[op] = fx.count(route)
		}
	}
	return out
}

// want fills want's zero counts for every operation the server has.
func (fx *fixture) want(want map[string]int) map[string]int {
	out := map[string]int{}
	for op, route := range fx.routes {
		if route != "" {
			out[op] = want[op]
		}
	}
	return out
}

// checkObserved asserts Observe was told of every request exactly once.
func (fx *fixture) checkObserved(t *testing.T) {
	t.Helper()
	if got, want := len(fx.obs.all()), fx.total(); got != want {
		t.Errorf("%s: Observe called %d times, the server answered %d requests", fx.kind, got, want)
	}
}

// checkNoToken asserts that no secret appears in err however it is printed.
func checkNoToken(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range secrets {
		for _, text := range []string{err.Error(), fmt.Sprintf("%v", err), fmt.Sprintf("%+v", err)} {
			if s != "" && strings.Contains(text, s) {
				t.Fatalf("the error shows a secret: %s", text)
			}
		}
		var fe *Error
		if errors.As(err, &fe) && strings.Contains(fe.Detail, s) {
			t.Fatalf("the error's Detail shows a secret: %s", fe.Detail)
		}
	}
}
