package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-github/v93/github"
)

// maxPages bounds the pages one listing reads (100 per page: 100,000 pull
// requests), so an answer that always names a next page cannot loop forever.
const maxPages = 1000

// gitHub is a Forge on GitHub or GitHub Enterprise, through go-github.
type gitHub struct {
	client  *github.Client
	http    *http.Client
	graphQL string     // the GraphQL endpoint (auto-merge)
	app     *appTokens // nil: cfg.Token
}

// newGitHub returns the GitHub forge cfg describes: a token (Bearer) or a
// GitHub App installation's tokens, minted when needed. go-github neither
// sleeps nor retries: its rate-limit tracking is off, the pin writer decides.
func newGitHub(cfg Config) (Forge, error) {
	api, err := parseAPI(KindGitHub, cfg.API)
	if err != nil {
		return nil, err
	}
	g := &gitHub{graphQL: gitHubGraphQL(api)}
	var cred credential
	if cfg.GitHubApp != nil {
		if g.app, err = newAppTokens(cfg.GitHubApp, api); err != nil {
			return nil, err
		}
		cred = g.app.credential
	} else {
		cred = tokenCredential(KindGitHub, cfg.Token, "Authorization", "Bearer ")
	}
	g.http = newHTTPClient(cfg, api, cred)
	if g.app != nil {
		g.app.client = g.http
	}
	base := api.String() + "/"
	g.client, err = github.NewClient(github.WithHTTPClient(g.http), github.WithURLs(&base, &base),
		github.WithDisableRateLimitCheck(), github.WithUserAgent("argocd-image-resolver"))
	if err != nil {
		return nil, fmt.Errorf("forge github at %s: %w", api, err)
	}
	return g, nil
}

// gitHubGraphQL is the GraphQL endpoint next to the REST API at api:
// https://api.github.com/graphql, or https://HOST/api/graphql for an
// Enterprise API at https://HOST/api/v3.
func gitHubGraphQL(api *url.URL) string {
	u := *api
	if strings.HasSuffix(u.Path, "/api/v3") {
		u.Path = strings.TrimSuffix(u.Path, "/v3") + "/graphql"
	} else {
		u.Path += "/graphql"
	}
	return u.String()
}

func (g *gitHub) Kind() string { return KindGitHub }

// OpenPullRequests lists the open pull requests of repo, every page, and
// keeps those from a branch of repo itself that starts with headPrefix.
func (g *gitHub) OpenPullRequests(ctx context.Context, repo, headPrefix string) ([]PullRequest, error) {
	owner, name, err := splitGitHubRepo(OpList, repo)
	if err != nil {
		return nil, err
	}
	ctx, c := withCall(ctx, KindGitHub, OpList, repo)
	opt := &github.PullRequestListOptions{State: "open", ListOptions: github.ListOptions{PerPage: 100}}
	var out []PullRequest
	for range maxPages {
		prs, resp, err := g.client.PullRequests.List(ctx, owner, name, opt)
		if err != nil {
			return nil, c.fail(err)
		}
		for _, pr := range prs {
			if gitHubSameRepo(pr) && strings.HasPrefix(pr.GetHead().GetRef(), headPrefix) {
				out = append(out, fromGitHub(pr))
			}
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		if resp.NextPage <= max(opt.Page, 1) {
			return nil, c.refuse(errRefused, fmt.Sprintf("the next page (%d) is not after page %d", resp.NextPage, max(opt.Page, 1)))
		}
		opt.Page = resp.NextPage
	}
	return nil, c.refuse(errRefused, fmt.Sprintf("more than %d pages of open pull requests", maxPages))
}

// gitHubSameRepo says whether pr's head branch is in its base repository.
func gitHubSameRepo(pr *github.PullRequest) bool {
	head, base := pr.GetHead().GetRepo(), pr.GetBase().GetRepo()
	if head == nil || base == nil {
		return false // the fork was deleted
	}
	if head.GetID() != 0 && base.GetID() != 0 {
		return head.GetID() == base.GetID()
	}
	return strings.EqualFold(head.GetFullName(), base.GetFullName())
}

// Create opens the pull request, then adds labels, assignees and reviewers
// and enables auto-merge, each only when asked. When a step after opening
// fails, the opened pull request is returned with the error (the steps
// after it are still tried, unless the forge refused the token or limits
// the rate).
func (g *gitHub) Create(ctx context.Context, repo string, spec Spec) (PullRequest, error) {
	owner, name, err := splitGitHubRepo(OpCreate, repo)
	if err != nil {
		return PullRequest{}, err
	}
	if err := checkSpec(KindGitHub, repo, spec); err != nil {
		return PullRequest{}, err
	}
	cctx, c := withCall(ctx, KindGitHub, OpCreate, repo)
	pr, _, err := g.client.PullRequests.Create(cctx, owner, name, github.CreatePullRequest{
		Title: &spec.Title, Head: spec.Head, Base: spec.Base, Body: &spec.Body,
		MaintainerCanModify: github.Ptr(false),
	})
	if err != nil {
		return PullRequest{}, c.fail(err)
	}
	out := fromGitHub(pr)
	return out, runSteps(g.extras(ctx, owner, name, repo, pr, spec))
}

// extras are the steps after opening pr that spec asks for.
func (g *gitHub) extras(ctx context.Context, owner, name, repo string, pr *github.PullRequest, spec Spec) []step {
	n := pr.GetNumber()
	var steps []step
	if len(spec.Labels) > 0 {
		steps = append(steps, func() error {
			ctx, c := withCall(ctx, KindGitHub, OpLabels, repo)
			_, _, err := g.client.Issues.AddLabelsToIssue(ctx, owner, name, n, spec.Labels)
			return c.failIf(err)
		})
	}
	if len(spec.Assignees) > 0 {
		steps = append(steps, func() error {
			ctx, c := withCall(ctx, KindGitHub, OpAssignees, repo)
			_, _, err := g.client.Issues.AddAssignees(ctx, owner, name, n, spec.Assignees)
			return c.failIf(err)
		})
	}
	if len(spec.Reviewers) > 0 {
		steps = append(steps, func() error {
			ctx, c := withCall(ctx, KindGitHub, OpReviewers, repo)
			_, _, err := g.client.PullRequests.RequestReviewers(ctx, owner, name, n, gitHubReviewers(spec.Reviewers))
			return c.failIf(err)
		})
	}
	if spec.AutoMerge {
		steps = append(steps, func() error { return g.enableAutoMerge(ctx, repo, pr.GetNodeID()) })
	}
	return steps
}

// gitHubReviewers splits reviewers into users and teams: "org/team" names a
// team (its slug after the slash).
func gitHubReviewers(names []string) github.ReviewersRequest {
	var req github.ReviewersRequest
	for _, n := range names {
		if _, team, ok := strings.Cut(n, "/"); ok {
			req.TeamReviewers = append(req.TeamReviewers, team)
		} else {
			req.Reviewers = append(req.Reviewers, n)
		}
	}
	return req
}

// Update sets the title and body of pull request number.
func (g *gitHub) Update(ctx context.Context, repo string, number int, spec Spec) (PullRequest, error) {
	owner, name, err := splitGitHubRepo(OpUpdate, repo)
	if err != nil {
		return PullRequest{}, err
	}
	if number <= 0 {
		return PullRequest{}, fmt.Errorf("forge github: %s of %s: number %d: want a pull request number (1 or more): %w", OpUpdate, repo, number, ErrInvalid)
	}
	if strings.TrimSpace(spec.Title) == "" {
		return PullRequest{}, fmt.Errorf("forge github: %s #%d of %s: the title is empty: %w", OpUpdate, number, repo, ErrInvalid)
	}
	ctx, c := withCall(ctx, KindGitHub, OpUpdate, repo)
	pr, _, err := g.client.PullRequests.Edit(ctx, owner, name, number, &github.PullRequest{Title: &spec.Title, Body: &spec.Body})
	if err != nil {
		return PullRequest{}, c.fail(err)
	}
	return fromGitHub(pr), nil
}

// fromGitHub maps GitHub's pull request.
func fromGitHub(pr *github.PullRequest) PullRequest {
	state := StateOpen
	if pr.GetState() == "closed" {
		state = StateClosed
		if pr.GetMerged() || pr.MergedAt != nil {
			state = StateMerged
		}
	}
	return PullRequest{
		Number: pr.GetNumber(), URL: pr.GetHTMLURL(),
		Head: pr.GetHead().GetRef(), Base: pr.GetBase().GetRef(), HeadSHA: pr.GetHead().GetSHA(),
		Title: pr.GetTitle(), Body: pr.GetBody(), State: state,
	}
}

// splitGitHubRepo checks that repo is owner/name.
func splitGitHubRepo(op, repo string) (owner, name string, err error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" || strings.ContainsAny(name, "/?#% ") || strings.ContainsAny(owner, "?#% ") {
		return "", "", fmt.Errorf("forge github: %s: repository %q: want owner/name (e.g. octocat/hello-world): %w", op, repo, ErrInvalid)
	}
	return owner, name, nil
}

// checkSpec checks what opening a pull request needs.
func checkSpec(kind, repo string, spec Spec) error {
	for _, f := range []struct{ name, value string }{{"head", spec.Head}, {"base", spec.Base}, {"title", spec.Title}} {
		if strings.TrimSpace(f.value) == "" {
			return fmt.Errorf("forge %s: %s of %s: the %s is empty: %w", kind, OpCreate, repo, f.name, ErrInvalid)
		}
	}
	if spec.Head == spec.Base {
		return fmt.Errorf("forge %s: %s of %s: head and base are both %q: %w", kind, OpCreate, repo, spec.Head, ErrInvalid)
	}
	return nil
}

// step is one request after a pull request is opened.
type step func() error

// runSteps runs every step, and joins their errors; it stops at a refused
// token or a rate limit, where the next steps would be refused too.
func runSteps(steps []step) error {
	var errs []error
	for _, s := range steps {
		err := s()
		if err == nil {
			continue
		}
		errs = append(errs, err)
		if errors.Is(err, ErrRateLimited) || errors.Is(err, ErrUnauthorized) {
			break
		}
	}
	return errors.Join(errs...)
}

// failIf is c.fail(err) when err is not nil.
func (c *call) failIf(err error) error {
	if err == nil {
		return nil
	}
	return c.fail(err)
}
