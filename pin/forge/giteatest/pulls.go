package giteatest

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// PullRequest is a pull request as Gitea's API shows it, the parts tests
// check.
type PullRequest struct {
	Number     int
	Title      string
	Body       string
	State      string // open or closed
	Merged     bool
	Head, Base string // branch names
	HeadSHA    string
	HeadRepo   string // owner/name of the head branch's repository
	Mergeable  bool
	Labels     []string
	Assignees  []string
	// Reviewers are the users asked to review.
	Reviewers []string
}

type apiUser struct {
	Login string `json:"login"`
}

type apiPull struct {
	Number int    `json:"number"`
	Title  string `json:"title"`
	Body   string `json:"body"`
	State  string `json:"state"`
	Merged bool   `json:"merged"`
	Head   struct {
		Ref  string `json:"ref"`
		SHA  string `json:"sha"`
		Repo *struct {
			FullName string `json:"full_name"`
		} `json:"repo"`
	} `json:"head"`
	Base struct {
		Ref string `json:"ref"`
	} `json:"base"`
	Mergeable bool `json:"mergeable"`
	Labels    []struct {
		Name string `json:"name"`
	} `json:"labels"`
	Assignees          []apiUser `json:"assignees"`
	RequestedReviewers []apiUser `json:"requested_reviewers"`
}

func (p apiPull) pullRequest() PullRequest {
	pr := PullRequest{
		Number: p.Number, Title: p.Title, Body: p.Body, State: p.State, Merged: p.Merged,
		Head: p.Head.Ref, Base: p.Base.Ref, HeadSHA: p.Head.SHA, Mergeable: p.Mergeable,
	}
	if p.Head.Repo != nil {
		pr.HeadRepo = p.Head.Repo.FullName
	}
	for _, l := range p.Labels {
		pr.Labels = append(pr.Labels, l.Name)
	}
	for _, u := range p.Assignees {
		pr.Assignees = append(pr.Assignees, u.Login)
	}
	for _, u := range p.RequestedReviewers {
		pr.Reviewers = append(pr.Reviewers, u.Login)
	}
	return pr
}

// PullRequests lists repo's pull requests in state (open, closed or all),
// every page, newest first.
func (g *Gitea) PullRequests(t testing.TB, repo, state string) []PullRequest {
	t.Helper()
	var out []PullRequest
	for page := 1; ; page++ {
		var prs []apiPull
		q := url.Values{"state": {state}, "page": {fmt.Sprint(page)}, "limit": {"50"}}
		g.API(t, http.MethodGet, "/repos/"+repo+"/pulls?"+q.Encode(), nil, &prs)
		for _, p := range prs {
			out = append(out, p.pullRequest())
		}
		if len(prs) < 50 {
			return out
		}
	}
}

// PullRequest is repo's pull request number n.
func (g *Gitea) PullRequest(t testing.TB, repo string, n int) PullRequest {
	t.Helper()
	var p apiPull
	g.API(t, http.MethodGet, fmt.Sprintf("/repos/%s/pulls/%d", repo, n), nil, &p)
	return p.pullRequest()
}

// OpenPullRequest opens a pull request from head into base as a person would
// (without the code under test) and returns its number.
func (g *Gitea) OpenPullRequest(t testing.TB, repo, head, base, title string) int {
	t.Helper()
	var p apiPull
	g.API(t, http.MethodPost, "/repos/"+repo+"/pulls",
		map[string]any{"head": head, "base": base, "title": title}, &p)
	return p.Number
}

// MergePullRequest merges repo's pull request n (a merge commit) as a
// reviewer would, once Gitea has found it mergeable.
//
// Gitea re-checks every open pull request of a base branch when that branch
// moves, and refuses a merge with 405 "Please try again later" while the check
// runs (even right after the pull request read as mergeable), so such a
// refusal is retried for up to a minute.
func (g *Gitea) MergePullRequest(t testing.TB, repo string, n int) {
	t.Helper()
	path := fmt.Sprintf("/repos/%s/pulls/%d/merge", repo, n)
	deadline := time.Now().Add(time.Minute)
	for {
		if p := g.WaitPullRequest(t, repo, n, "mergeable", func(p PullRequest) bool { return p.Mergeable || p.Merged }); p.Merged {
			return
		}
		err := g.call(t.Context(), http.MethodPost, path, map[string]any{"Do": "merge"}, nil, false)
		var apiErr *APIError
		if err == nil {
			return
		}
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusMethodNotAllowed || time.Now().After(deadline) {
			t.Fatalf("giteatest: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// WaitPullRequest polls repo's pull request n until ok holds (what names
// the wait in the failure), for up to a minute.
func (g *Gitea) WaitPullRequest(t testing.TB, repo string, n int, what string, ok func(PullRequest) bool) PullRequest {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		p := g.PullRequest(t, repo, n)
		if ok(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("giteatest: %s pull request #%d not %s after a minute: %+v", repo, n, what, p)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
