package forge

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	sdk "code.gitea.io/sdk/gitea"
)

// giteaPageSize is how many pull requests or labels one list request asks for:
// Gitea's default MAX_RESPONSE_ITEMS, the most it answers.
const giteaPageSize = 50

// giteaMaxPages bounds a listing (50,000 pull requests or labels at 50 a page).
const giteaMaxPages = 1000

// gitea is a Forge on a Gitea or Forgejo server, through code.gitea.io/sdk/gitea.
type gitea struct {
	api      string // the server's base URL; the SDK adds /api/v1
	token    func(ctx context.Context) (string, error)
	http     *giteaHTTP
	pageSize int
}

// newGitea returns the Forge for cfg (Kind gitea; Token set; Timeout > 0).
func newGitea(cfg Config) (Forge, error) {
	if cfg.Token == nil {
		return nil, fmt.Errorf("forge gitea at %s: no token (tokenFile) configured (a GitHub App is for github only)", cfg.API)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	api, err := giteaBaseURL(cfg.API)
	if err != nil {
		return nil, err
	}
	return &gitea{api: api, token: cfg.Token, http: newGiteaHTTP(cfg), pageSize: giteaPageSize}, nil
}

// giteaBaseURL checks the configured API URL: http or https, a host, no query.
func giteaBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("forge gitea: api %q: want the server's URL, e.g. https://gitea.example (the client adds /api/v1)", raw)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// giteaSplitRepo splits owner/name.
func giteaSplitRepo(repo string) (owner, name string, err error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("forge gitea: repository %q: want owner/name", repo)
	}
	return owner, name, nil
}

func (g *gitea) Kind() string { return KindGitea }

// giteaSession is one Forge call's client: the token read now, the SDK's server
// version check off (it would cost a GET /version).
type giteaSession struct {
	g     *gitea
	c     *sdk.Client
	token string
	repo  string
	owner string
	name  string
}

func (g *gitea) session(ctx context.Context, repo string) (*giteaSession, error) {
	owner, name, err := giteaSplitRepo(repo)
	if err != nil {
		return nil, err
	}
	tok, err := g.token(ctx)
	if err != nil {
		return nil, fmt.Errorf("forge gitea at %s: read the token: %w", g.api, err)
	}
	c, err := sdk.NewClient(g.api, sdk.SetHTTPClient(g.http.client), sdk.SetToken(tok),
		sdk.SetGiteaVersion(""), sdk.SetUserAgent("argocd-image-resolver"))
	if err != nil {
		return nil, fmt.Errorf("forge gitea at %s: %w", g.api, err)
	}
	return &giteaSession{g: g, c: c, token: tok, repo: repo, owner: owner, name: name}, nil
}

// do runs one SDK call as operation op, and turns a refusal or a failure into
// an *Error.
func (s *giteaSession) do(ctx context.Context, op string, call func() (*sdk.Response, error)) error {
	ex := &giteaExchange{op: op}
	s.c.SetContext(context.WithValue(ctx, giteaExchangeKey{}, ex))
	_, err := call()
	if !ex.sent {
		if err == nil {
			err = errors.New("no request was sent")
		}
		return fmt.Errorf("forge gitea: %s of %s: %s", op, s.repo, giteaScrub(err.Error(), s.token))
	}
	if err == nil && ex.status < 400 {
		return nil
	}
	return ex.toError(op, s.repo, s.token, err)
}

// OpenPullRequests lists the open pull requests of repo, every page, and keeps
// those whose head branch is in repo and starts with headPrefix.
func (g *gitea) OpenPullRequests(ctx context.Context, repo, headPrefix string) ([]PullRequest, error) {
	s, err := g.session(ctx, repo)
	if err != nil {
		return nil, err
	}
	var out []PullRequest
	for page := 1; page != 0; {
		if page > giteaMaxPages {
			return nil, fmt.Errorf("forge gitea: list pull requests of %s: more than %d pages", repo, giteaMaxPages)
		}
		var prs []*sdk.PullRequest
		var resp *sdk.Response
		err := s.do(ctx, "list pull requests", func() (r *sdk.Response, err error) {
			opt := sdk.ListPullRequestsOptions{ListOptions: sdk.ListOptions{Page: page, PageSize: g.pageSize}, State: sdk.StateOpen}
			prs, resp, err = s.c.ListRepoPullRequests(s.owner, s.name, opt)
			return resp, err
		})
		if err != nil {
			return nil, err
		}
		for _, p := range prs {
			if giteaOwnHead(p) && strings.HasPrefix(p.Head.Ref, headPrefix) {
				out = append(out, giteaPullRequest(p))
			}
		}
		page = giteaNextPage(resp, page, len(prs), g.pageSize)
	}
	return out, nil
}

// giteaNextPage is the page after page (0: none): the Link header's next, or
// without a Link header, the next one when this one was full.
func giteaNextPage(resp *sdk.Response, page, got, size int) int {
	if resp.Header.Get("Link") != "" {
		if resp.NextPage > page {
			return resp.NextPage
		}
		return 0
	}
	if got >= size {
		return page + 1
	}
	return 0
}

// giteaOwnHead says whether p's head branch is in the repository it merges
// into (not a fork, not a deleted repository).
func giteaOwnHead(p *sdk.PullRequest) bool {
	return p.Head != nil && p.Base != nil && p.Head.RepoID != 0 && p.Head.RepoID == p.Base.RepoID
}

func giteaPullRequest(p *sdk.PullRequest) PullRequest {
	pr := PullRequest{Number: int(p.Index), URL: p.HTMLURL, Title: p.Title, Body: p.Body, State: StateOpen}
	if p.Head != nil {
		pr.Head, pr.HeadSHA = p.Head.Ref, p.Head.Sha
	}
	if p.Base != nil {
		pr.Base = p.Base.Ref
	}
	switch {
	case p.HasMerged:
		pr.State = StateMerged
	case p.State == sdk.StateClosed:
		pr.State = StateClosed
	}
	return pr
}

// Create opens the pull request: labels looked up by name first (one listing
// of the repository's labels), assignees by login with it, then reviewers
// asked (POST .../requested_reviewers) and auto-merge scheduled (POST
// .../merge with merge_when_checks_succeed) when wanted. When a step after
// the opening fails, the pull request opened is returned with the error.
func (g *gitea) Create(ctx context.Context, repo string, spec Spec) (PullRequest, error) {
	if err := giteaCheckSpec(repo, spec, true); err != nil {
		return PullRequest{}, err
	}
	s, err := g.session(ctx, repo)
	if err != nil {
		return PullRequest{}, err
	}
	labels, err := s.labelIDs(ctx, spec.Labels)
	if err != nil {
		return PullRequest{}, err
	}
	var p *sdk.PullRequest
	err = s.do(ctx, "create pull request", func() (resp *sdk.Response, err error) {
		p, resp, err = s.c.CreatePullRequest(s.owner, s.name, sdk.CreatePullRequestOption{
			Head: spec.Head, Base: spec.Base, Title: spec.Title, Body: spec.Body,
			Assignees: spec.Assignees, Labels: labels,
		})
		return resp, err
	})
	if err != nil {
		return PullRequest{}, err
	}
	pr := giteaPullRequest(p)
	if err := s.afterCreate(ctx, &pr, spec); err != nil {
		return pr, fmt.Errorf("pull request #%d of %s opened, but: %w", pr.Number, repo, err)
	}
	return pr, nil
}

// afterCreate asks the reviewers and schedules auto-merge, as spec wants.
func (s *giteaSession) afterCreate(ctx context.Context, pr *PullRequest, spec Spec) error {
	n := int64(pr.Number)
	if len(spec.Reviewers) > 0 {
		err := s.do(ctx, "request reviewers", func() (*sdk.Response, error) {
			return s.c.CreateReviewRequests(s.owner, s.name, n, sdk.PullReviewRequestOptions{Reviewers: spec.Reviewers})
		})
		if err != nil {
			return err
		}
	}
	if !spec.AutoMerge {
		return nil
	}
	return s.do(ctx, "enable auto-merge", func() (resp *sdk.Response, err error) {
		_, resp, err = s.c.MergePullRequest(s.owner, s.name, n, sdk.MergePullRequestOption{
			Style: sdk.MergeStyleMerge, MergeWhenChecksSucceed: true,
		})
		return resp, err
	})
}

// labelIDs looks the label names up among repo's labels (every page, one
// listing); a name repo lacks is an error naming it and those it has.
func (s *giteaSession) labelIDs(ctx context.Context, names []string) ([]int64, error) {
	if len(names) == 0 {
		return nil, nil
	}
	have := map[string]int64{}
	for page := 1; page != 0; {
		if page > giteaMaxPages {
			return nil, fmt.Errorf("forge gitea: list labels of %s: more than %d pages", s.repo, giteaMaxPages)
		}
		var ls []*sdk.Label
		var resp *sdk.Response
		err := s.do(ctx, "list labels", func() (r *sdk.Response, err error) {
			ls, resp, err = s.c.ListRepoLabels(s.owner, s.name, sdk.ListLabelsOptions{ListOptions: sdk.ListOptions{Page: page, PageSize: s.g.pageSize}})
			return resp, err
		})
		if err != nil {
			return nil, err
		}
		for _, l := range ls {
			have[l.Name] = l.ID
		}
		page = giteaNextPage(resp, page, len(ls), s.g.pageSize)
	}
	ids := make([]int64, 0, len(names))
	for _, n := range names {
		id, ok := have[n]
		if !ok {
			return nil, fmt.Errorf("forge gitea: label %q: %s has no such label (it has: %s)", n, s.repo, giteaNames(have))
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// Update sets the title and body of the open pull request number.
func (g *gitea) Update(ctx context.Context, repo string, number int, spec Spec) (PullRequest, error) {
	if err := giteaCheckSpec(repo, spec, false); err != nil {
		return PullRequest{}, err
	}
	if number <= 0 {
		return PullRequest{}, fmt.Errorf("forge gitea: pull request number %d of %s: want a number of 1 or more", number, repo)
	}
	s, err := g.session(ctx, repo)
	if err != nil {
		return PullRequest{}, err
	}
	body := spec.Body
	var p *sdk.PullRequest
	err = s.do(ctx, "update pull request", func() (resp *sdk.Response, err error) {
		p, resp, err = s.c.EditPullRequest(s.owner, s.name, int64(number), sdk.EditPullRequestOption{Title: spec.Title, Body: &body})
		return resp, err
	})
	if err != nil {
		return PullRequest{}, err
	}
	return giteaPullRequest(p), nil
}

// giteaCheckSpec refuses a spec the forge would: no title, and for a new pull
// request no head or base, or the same branch for both.
func giteaCheckSpec(repo string, spec Spec, create bool) error {
	bad := func(field, value, want string) error {
		return fmt.Errorf("forge gitea: pull request of %s: %s %q: %s", repo, field, value, want)
	}
	if strings.TrimSpace(spec.Title) == "" {
		return bad("title", spec.Title, "want a title that is not blank")
	}
	if !create {
		return nil
	}
	if spec.Head == "" || spec.Base == "" {
		return bad("head/base", spec.Head+"/"+spec.Base, "want both branch names")
	}
	if spec.Head == spec.Base {
		return bad("head", spec.Head, "want a branch other than the base")
	}
	return nil
}
