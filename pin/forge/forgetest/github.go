package forgetest

import (
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Routes of the GitHub server, as Count and FailNext name them. The same
// routes answer under /api/v3 (GitHub Enterprise); GraphQL at /api/graphql.
const (
	GitHubListPulls        = "GET /repos/{owner}/{repo}/pulls"
	GitHubCreatePull       = "POST /repos/{owner}/{repo}/pulls"
	GitHubUpdatePull       = "PATCH /repos/{owner}/{repo}/pulls/{number}"
	GitHubAddLabels        = "POST /repos/{owner}/{repo}/issues/{number}/labels"
	GitHubAddAssignees     = "POST /repos/{owner}/{repo}/issues/{number}/assignees"
	GitHubRequestReviewers = "POST /repos/{owner}/{repo}/pulls/{number}/requested_reviewers"
	GitHubAppToken         = "POST /app/installations/{id}/access_tokens"
	GitHubGraphQL          = "POST /graphql"
)

// PR is a pull request the GitHub server holds.
type PR struct {
	Number      int
	NodeID      string
	Title, Body string
	Head, Base  string
	HeadSHA     string
	// HeadRepo is the head branch's repository (owner/name) when it is a
	// fork; "" when it is the repository itself; "-" for a deleted fork.
	HeadRepo string
	// State is "open" or "closed"; Merged with "closed".
	State               string
	Merged              bool
	Labels              []string
	Assignees           []string
	Reviewers           []string
	TeamReviewers       []string
	AutoMerge           bool
	MaintainerCanModify bool
}

// GitHub is a GitHub REST (and GraphQL auto-merge) server for tests.
type GitHub struct {
	*core
	// URL is the API's base URL (forge.Config.API); EnterpriseURL is the
	// same API as GitHub Enterprise serves it (GraphQL at /api/graphql).
	URL, EnterpriseURL string
	// Token is the token the server accepts (Bearer or token).
	Token string

	smu       sync.Mutex
	repos     map[string]*ghRepo
	users     map[string]bool
	app       *ghApp
	lastToken string
	nextID    int64

	pull, pullCreated, label, user, issue, token, autoMerge, autoMergeRefused sample
	validation, rateLimit, secondary, badCreds, notFound, forbidden, badJWT   sample
}

type ghRepo struct {
	id               int64
	owner, name      string
	prs              []*PR
	branches         map[string]string
	autoMergeAllowed bool
}

func (r *ghRepo) full() string { return r.owner + "/" + r.name }

// NewGitHub starts a GitHub server, stopped when t ends. Its page size is
// 5 when a request names none (so listings paginate), at most 100.
func NewGitHub(t testing.TB) *GitHub {
	g := &GitHub{
		core: newCore(t, 5, 100), Token: secret("ghp_"),
		repos: map[string]*ghRepo{}, users: map[string]bool{}, nextID: 1000,
		pull: load("github-pull"), pullCreated: load("github-pull-created"), label: load("github-labels-added"),
		user: load("github-user"), issue: load("github-issue"), token: load("github-installation-token"),
		autoMerge: load("github-graphql-auto-merge"), autoMergeRefused: load("github-graphql-error"),
		validation: load("github-error-validation"), rateLimit: load("github-error-rate-limit"),
		secondary: load("github-error-secondary-rate-limit"), badCreds: load("github-error-bad-credentials"),
		notFound: load("github-error-not-found"), forbidden: load("github-error-forbidden"), badJWT: load("github-error-jwt"),
	}
	g.URL = g.srv.URL
	g.EnterpriseURL = g.srv.URL + "/api/v3"
	unauthorized := failure(g.badCreds, 0, nil)
	for pattern, h := range map[string]http.HandlerFunc{
		GitHubListPulls: g.listPulls, GitHubCreatePull: g.createPull, GitHubUpdatePull: g.updatePull,
		GitHubAddLabels: g.addLabels, GitHubAddAssignees: g.addAssignees, GitHubRequestReviewers: g.requestReviewers,
	} {
		g.handle(pattern, g.authorized, unauthorized, h, "/api/v3")
	}
	g.handle(GitHubAppToken, nil, Failure{}, g.mintToken, "/api/v3")
	g.handle(GitHubGraphQL, g.authorized, unauthorized, g.graphQL, "/api")
	return g
}

// authorized checks the token (or an installation token not expired).
func (g *GitHub) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		tok, ok = strings.CutPrefix(h, "token ")
	}
	g.smu.Lock()
	defer g.smu.Unlock()
	valid := ok && tok != "" && (tok == g.Token || g.app != nil && time.Now().Before(g.app.tokens[tok]))
	if valid {
		g.lastToken = tok
	}
	return valid
}

// LastToken is the token the last request accepted carried.
func (g *GitHub) LastToken() string {
	g.smu.Lock()
	defer g.smu.Unlock()
	return g.lastToken
}

// AddRepo adds repository owner/name (auto-merge allowed).
func (g *GitHub) AddRepo(fullName string) {
	g.smu.Lock()
	defer g.smu.Unlock()
	g.repo(fullName, true)
}

// repo is the repository fullName (added when add); g.smu held.
func (g *GitHub) repo(fullName string, add bool) *ghRepo {
	key := strings.ToLower(fullName)
	if r, ok := g.repos[key]; ok || !add {
		return r
	}
	owner, name, _ := strings.Cut(fullName, "/")
	g.nextID++
	r := &ghRepo{id: g.nextID, owner: owner, name: name, branches: map[string]string{}, autoMergeAllowed: true}
	g.repos[key] = r
	return r
}

// AddUsers adds users: the logins reviewers and assignees may name.
func (g *GitHub) AddUsers(logins ...string) {
	g.smu.Lock()
	defer g.smu.Unlock()
	for _, l := range logins {
		g.users[strings.ToLower(l)] = true
	}
}

// SetBranch sets the head commit of branch in repo (pull requests from it
// report it as their head SHA).
func (g *GitHub) SetBranch(repo, branch, sha string) {
	g.smu.Lock()
	defer g.smu.Unlock()
	g.repo(repo, true).branches[branch] = sha
}

// SetAutoMergeAllowed allows or refuses auto-merge in repo.
func (g *GitHub) SetAutoMergeAllowed(repo string, allowed bool) {
	g.smu.Lock()
	defer g.smu.Unlock()
	g.repo(repo, true).autoMergeAllowed = allowed
}

// AddPR adds pr to repo (its number the next one when 0, state open when
// empty) and returns it as held.
func (g *GitHub) AddPR(repo string, pr PR) PR {
	g.smu.Lock()
	defer g.smu.Unlock()
	r := g.repo(repo, true)
	if pr.Number == 0 {
		pr.Number = len(r.prs) + 1
	}
	if pr.State == "" {
		pr.State = "open"
	}
	if pr.HeadSHA == "" {
		pr.HeadSHA = r.sha(pr.Head)
	}
	pr.NodeID = nodeID(r, pr.Number)
	r.prs = append(r.prs, &pr)
	return clonePR(&pr)
}

// PRs are the pull requests of repo, by number.
func (g *GitHub) PRs(repo string) []PR {
	g.smu.Lock()
	defer g.smu.Unlock()
	r := g.repo(repo, false)
	if r == nil {
		return nil
	}
	out := make([]PR, 0, len(r.prs))
	for _, pr := range r.prs {
		out = append(out, clonePR(pr))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out
}

func clonePR(pr *PR) PR {
	c := *pr
	c.Labels, c.Assignees = slices.Clone(pr.Labels), slices.Clone(pr.Assignees)
	c.Reviewers, c.TeamReviewers = slices.Clone(pr.Reviewers), slices.Clone(pr.TeamReviewers)
	return c
}

// sha is branch's head commit: as set, else one derived from its name.
func (r *ghRepo) sha(branch string) string {
	if sha, ok := r.branches[branch]; ok {
		return sha
	}
	sum := sha1.Sum([]byte(r.full() + ":" + branch))
	return hex.EncodeToString(sum[:])
}

func nodeID(r *ghRepo, number int) string {
	return "PR_" + base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d:%d", r.id, number))
}

// userID is a stable ID for login.
func userID(login string) int64 {
	h := fnv.New32a()
	h.Write([]byte(strings.ToLower(login)))
	return int64(h.Sum32()%1_000_000) + 1
}

// RateLimit is the refusal of an exhausted primary rate limit: status
// (403 or 429), X-RateLimit-Remaining 0, reset after reset.
func (g *GitHub) RateLimit(status int, reset time.Duration) Failure {
	at := time.Now().Add(reset).Unix()
	return failure(g.rateLimit, status, map[string]string{"X-RateLimit-Reset": fmt.Sprint(at)})
}

// SecondaryRateLimit is the refusal of a secondary rate limit: status (403
// or 429) with Retry-After (none when retryAfter is 0).
func (g *GitHub) SecondaryRateLimit(status int, retryAfter time.Duration) Failure {
	h := map[string]string{}
	if retryAfter > 0 {
		h["Retry-After"] = fmt.Sprint(int(retryAfter.Seconds()))
	}
	return failure(g.secondary, status, h)
}

// Validation is a 422 Validation Failed whose error says message.
func (g *GitHub) Validation(message string) Failure {
	f := failure(g.validation, 0, nil)
	f.Body = fmt.Appendf(nil, `{"message":"Validation Failed","errors":[{"resource":"PullRequest","code":"custom","message":%q}],"documentation_url":"https://docs.github.com/rest/pulls/pulls#create-a-pull-request","status":"422"}`, message)
	return f
}

// Refusal is the documented refusal of status: 401 (bad credentials), 403
// (resource not accessible), 404; others a bare message.
func (g *GitHub) Refusal(status int) Failure {
	switch status {
	case http.StatusUnauthorized:
		return failure(g.badCreds, 0, nil)
	case http.StatusForbidden:
		return failure(g.forbidden, 0, nil)
	case http.StatusNotFound:
		return failure(g.notFound, 0, nil)
	}
	f := failure(g.notFound, status, nil)
	f.Body = fmt.Appendf(nil, `{"message":%q}`, http.StatusText(status))
	return f
}
