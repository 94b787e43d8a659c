package forge

import (
	"context"
	"fmt"
	"strings"
	"sync"

	gitlab "gitlab.com/gitlab-org/api/client-go"
)

// gitLab is a Forge on GitLab, through gitlab-org/api/client-go: merge
// requests are its pull requests (Number is the iid).
type gitLab struct {
	client *gitlab.Client

	mu    sync.Mutex
	users map[string]int64 // username -> ID, as looked up
}

// noWait is a rate limiter that never waits: the pin writer decides.
type noWait struct{}

func (noWait) Wait(context.Context) error { return nil }

// newGitLab returns the GitLab forge cfg describes (token in PRIVATE-TOKEN).
// The client never retries nor sleeps: retries are off, its limiter never
// waits.
func newGitLab(cfg Config) (Forge, error) {
	api, err := parseAPI(KindGitLab, cfg.API)
	if err != nil {
		return nil, err
	}
	if cfg.Token == nil {
		return nil, fmt.Errorf("forge gitlab at %s: no token (tokenFile) configured (a GitHub App is for GitHub only)", api)
	}
	hc := newHTTPClient(cfg, api, tokenCredential(KindGitLab, cfg.Token, gitlab.AccessTokenHeaderName, ""))
	client, err := gitlab.NewAuthSourceClient(gitlab.Unauthenticated{},
		gitlab.WithBaseURL(api.String()), gitlab.WithHTTPClient(hc),
		gitlab.WithoutRetries(), gitlab.WithCustomRetryMax(0), gitlab.WithCustomLimiter(noWait{}),
		gitlab.WithUserAgent("argocd-image-resolver"))
	if err != nil {
		return nil, fmt.Errorf("forge gitlab at %s: %w", api, err)
	}
	return &gitLab{client: client, users: map[string]int64{}}, nil
}

func (g *gitLab) Kind() string { return KindGitLab }

// OpenPullRequests lists the opened merge requests of repo, every page, and
// keeps those from a branch of repo itself that starts with headPrefix.
func (g *gitLab) OpenPullRequests(ctx context.Context, repo, headPrefix string) ([]PullRequest, error) {
	if err := checkGitLabRepo(OpList, repo); err != nil {
		return nil, err
	}
	ctx, c := withCall(ctx, KindGitLab, OpList, repo)
	opt := &gitlab.ListProjectMergeRequestsOptions{
		State:       gitlab.Ptr("opened"),
		ListOptions: gitlab.ListOptions{PerPage: 100},
	}
	var out []PullRequest
	for range maxPages {
		mrs, resp, err := g.client.MergeRequests.ListProjectMergeRequests(repo, opt, gitlab.WithContext(ctx))
		if err != nil {
			return nil, c.fail(err)
		}
		for _, mr := range mrs {
			if mr.SourceProjectID == mr.TargetProjectID && strings.HasPrefix(mr.SourceBranch, headPrefix) {
				out = append(out, fromGitLab(mr))
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
	return nil, c.refuse(errRefused, fmt.Sprintf("more than %d pages of opened merge requests", maxPages))
}

// Create opens the merge request with its labels, assignees and reviewers
// (usernames looked up once per forge), then sets it to merge when the
// pipeline succeeds when asked. When that last step fails, the opened merge
// request is returned with the error.
func (g *gitLab) Create(ctx context.Context, repo string, spec Spec) (PullRequest, error) {
	if err := checkGitLabRepo(OpCreate, repo); err != nil {
		return PullRequest{}, err
	}
	if err := checkSpec(KindGitLab, repo, spec); err != nil {
		return PullRequest{}, err
	}
	opt := &gitlab.CreateMergeRequestOptions{
		Title: &spec.Title, Description: &spec.Body,
		SourceBranch: &spec.Head, TargetBranch: &spec.Base,
		RemoveSourceBranch: gitlab.Ptr(false),
	}
	if len(spec.Labels) > 0 {
		opt.Labels = gitlab.Ptr(gitlab.LabelOptions(spec.Labels))
	}
	var err error
	if opt.AssigneeIDs, err = g.userIDs(ctx, repo, spec.Assignees); err != nil {
		return PullRequest{}, err
	}
	if opt.ReviewerIDs, err = g.userIDs(ctx, repo, spec.Reviewers); err != nil {
		return PullRequest{}, err
	}
	cctx, c := withCall(ctx, KindGitLab, OpCreate, repo)
	mr, _, err := g.client.MergeRequests.CreateMergeRequest(repo, opt, gitlab.WithContext(cctx))
	if err != nil {
		return PullRequest{}, c.fail(err)
	}
	out := fromGitLab(&mr.BasicMergeRequest)
	if spec.AutoMerge {
		return out, g.enableAutoMerge(ctx, repo, mr.IID)
	}
	return out, nil
}

// enableAutoMerge sets merge request iid to merge when its pipeline
// succeeds: auto_merge (GitLab 17.11 on) and merge_when_pipeline_succeeds
// (before; still accepted) both, so any GitLab understands.
func (g *gitLab) enableAutoMerge(ctx context.Context, repo string, iid int64) error {
	ctx, c := withCall(ctx, KindGitLab, OpAutoMerge, repo)
	_, _, err := g.client.MergeRequests.AcceptMergeRequest(repo, iid, &gitlab.AcceptMergeRequestOptions{
		AutoMerge:                 gitlab.Ptr(true),
		MergeWhenPipelineSucceeds: gitlab.Ptr(true),
	}, gitlab.WithContext(ctx))
	return c.failIf(err)
}

// userIDs looks up the IDs of usernames (GET /users?username=), each once
// per forge; nil for none.
func (g *gitLab) userIDs(ctx context.Context, repo string, usernames []string) (*[]int64, error) {
	if len(usernames) == 0 {
		return nil, nil
	}
	ids := make([]int64, 0, len(usernames))
	for _, name := range usernames {
		id, err := g.userID(ctx, repo, name)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return &ids, nil
}

func (g *gitLab) userID(ctx context.Context, repo, name string) (int64, error) {
	name = strings.TrimPrefix(strings.TrimSpace(name), "@")
	g.mu.Lock()
	id, ok := g.users[name]
	g.mu.Unlock()
	if ok {
		return id, nil
	}
	ctx, c := withCall(ctx, KindGitLab, OpUser, repo)
	users, _, err := g.client.Users.ListUsers(&gitlab.ListUsersOptions{Username: &name}, gitlab.WithContext(ctx))
	if err != nil {
		return 0, c.fail(err)
	}
	for _, u := range users {
		if strings.EqualFold(u.Username, name) {
			g.mu.Lock()
			g.users[name] = u.ID
			g.mu.Unlock()
			return u.ID, nil
		}
	}
	return 0, fmt.Errorf("forge gitlab: %s for %s: no user %q: %w", OpUser, repo, name, ErrNotFound)
}

// Update sets the title and description of merge request number (its iid).
func (g *gitLab) Update(ctx context.Context, repo string, number int, spec Spec) (PullRequest, error) {
	if err := checkGitLabRepo(OpUpdate, repo); err != nil {
		return PullRequest{}, err
	}
	if number <= 0 {
		return PullRequest{}, fmt.Errorf("forge gitlab: %s of %s: number %d: want a merge request iid (1 or more): %w", OpUpdate, repo, number, ErrInvalid)
	}
	if strings.TrimSpace(spec.Title) == "" {
		return PullRequest{}, fmt.Errorf("forge gitlab: %s !%d of %s: the title is empty: %w", OpUpdate, number, repo, ErrInvalid)
	}
	ctx, c := withCall(ctx, KindGitLab, OpUpdate, repo)
	mr, _, err := g.client.MergeRequests.UpdateMergeRequest(repo, int64(number),
		&gitlab.UpdateMergeRequestOptions{Title: &spec.Title, Description: &spec.Body}, gitlab.WithContext(ctx))
	if err != nil {
		return PullRequest{}, c.fail(err)
	}
	return fromGitLab(&mr.BasicMergeRequest), nil
}

// fromGitLab maps GitLab's merge request.
func fromGitLab(mr *gitlab.BasicMergeRequest) PullRequest {
	state := StateClosed // closed, locked
	switch mr.State {
	case "opened":
		state = StateOpen
	case "merged":
		state = StateMerged
	}
	return PullRequest{
		Number: int(mr.IID), URL: mr.WebURL,
		Head: mr.SourceBranch, Base: mr.TargetBranch, HeadSHA: mr.SHA,
		Title: mr.Title, Body: mr.Description, State: state,
	}
}

// checkGitLabRepo checks that repo is a project path: group[/subgroup]/name.
func checkGitLabRepo(op, repo string) error {
	parts := strings.Split(repo, "/")
	ok := len(parts) >= 2
	for _, p := range parts {
		ok = ok && p != "" && p != "." && p != ".." && !strings.ContainsAny(p, "?#% ")
	}
	if !ok {
		return fmt.Errorf("forge gitlab: %s: repository %q: want the project path group[/subgroup]/name: %w", op, repo, ErrInvalid)
	}
	return nil
}
