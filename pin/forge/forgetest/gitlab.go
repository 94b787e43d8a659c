package forgetest

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Routes of the GitLab server, as Count and FailNext name them.
const (
	GitLabListMRs   = "GET /api/v4/projects/{id}/merge_requests"
	GitLabCreateMR  = "POST /api/v4/projects/{id}/merge_requests"
	GitLabUpdateMR  = "PUT /api/v4/projects/{id}/merge_requests/{iid}"
	GitLabMergeMR   = "PUT /api/v4/projects/{id}/merge_requests/{iid}/merge"
	GitLabListUsers = "GET /api/v4/users"
)

// MR is a merge request the GitLab server holds.
type MR struct {
	IID          int
	Title        string
	Description  string
	SourceBranch string
	TargetBranch string
	SHA          string
	// SourceProject is the path of the source branch's project when it is
	// a fork ("" when it is the project itself).
	SourceProject string
	// State is opened, closed, merged or locked.
	State string
	// Labels; Assignees and Reviewers are usernames.
	Labels, Assignees, Reviewers []string
	// AutoMerge: set to merge when the pipeline succeeds.
	AutoMerge          bool
	RemoveSourceBranch bool
}

// GitLab is a GitLab REST v4 server for tests.
type GitLab struct {
	*core
	// URL is the server's base URL (forge.Config.API; the API is at /api/v4).
	URL string
	// Token is the token the server accepts (PRIVATE-TOKEN, or Bearer).
	Token string

	smu      sync.Mutex
	projects map[string]*glProject
	users    []glUser
	nextID   int64

	mr, mrSingle, user                                      sample
	unauthorized, forbidden, notFound, conflict, validation sample
	rateLimit                                               sample
}

type glProject struct {
	id       int64
	path     string
	mrs      []*MR
	branches map[string]string
}

type glUser struct {
	id       int64
	username string
}

// NewGitLab starts a GitLab server, stopped when t ends. Its page size is
// 5 when a request names none (so listings paginate), at most 100.
func NewGitLab(t testing.TB) *GitLab {
	l := &GitLab{
		core: newCore(t, 5, 100), Token: secret("glpat-"),
		projects: map[string]*glProject{}, nextID: 100,
		mr: load("gitlab-merge-request"), mrSingle: load("gitlab-merge-request-single"), user: load("gitlab-user"),
		unauthorized: load("gitlab-error-unauthorized"), forbidden: load("gitlab-error-forbidden"),
		notFound: load("gitlab-error-not-found"), conflict: load("gitlab-error-conflict"),
		validation: load("gitlab-error-validation"), rateLimit: load("gitlab-error-rate-limit"),
	}
	l.URL = l.srv.URL
	unauthorized := failure(l.unauthorized, 0, nil)
	for pattern, h := range map[string]http.HandlerFunc{
		GitLabListMRs: l.listMRs, GitLabCreateMR: l.createMR, GitLabUpdateMR: l.updateMR,
		GitLabMergeMR: l.mergeMR, GitLabListUsers: l.listUsers,
	} {
		l.handle(pattern, l.authorized, unauthorized, h)
	}
	return l
}

func (l *GitLab) authorized(r *http.Request) bool {
	tok := r.Header.Get("PRIVATE-TOKEN")
	if tok == "" {
		tok, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	return tok != "" && tok == l.Token
}

// AddProject adds project path (group[/subgroup]/name) and returns its ID.
func (l *GitLab) AddProject(path string) int64 {
	l.smu.Lock()
	defer l.smu.Unlock()
	return l.project(path, true).id
}

// project is the project path or ID (added when add); l.smu held.
func (l *GitLab) project(pathOrID string, add bool) *glProject {
	if id, err := strconv.ParseInt(pathOrID, 10, 64); err == nil {
		for _, p := range l.projects {
			if p.id == id {
				return p
			}
		}
		return nil
	}
	key := strings.ToLower(pathOrID)
	if p, ok := l.projects[key]; ok || !add {
		return p
	}
	l.nextID++
	p := &glProject{id: l.nextID, path: pathOrID, branches: map[string]string{}}
	l.projects[key] = p
	return p
}

// AddUsers adds users by username and returns their IDs.
func (l *GitLab) AddUsers(usernames ...string) []int64 {
	l.smu.Lock()
	defer l.smu.Unlock()
	ids := make([]int64, 0, len(usernames))
	for _, u := range usernames {
		id := int64(len(l.users) + 1)
		l.users = append(l.users, glUser{id: id, username: u})
		ids = append(ids, id)
	}
	return ids
}

// username is the user of id ("" none); l.smu held.
func (l *GitLab) username(id int64) string {
	for _, u := range l.users {
		if u.id == id {
			return u.username
		}
	}
	return ""
}

// SetBranch sets the head commit of branch in project path.
func (l *GitLab) SetBranch(path, branch, sha string) {
	l.smu.Lock()
	defer l.smu.Unlock()
	l.project(path, true).branches[branch] = sha
}

// AddMR adds mr to project path (its iid the next one when 0, state
// opened when empty) and returns it as held.
func (l *GitLab) AddMR(path string, mr MR) MR {
	l.smu.Lock()
	defer l.smu.Unlock()
	p := l.project(path, true)
	if mr.IID == 0 {
		mr.IID = len(p.mrs) + 1
	}
	if mr.State == "" {
		mr.State = "opened"
	}
	if mr.SHA == "" {
		mr.SHA = p.sha(mr.SourceBranch)
	}
	p.mrs = append(p.mrs, &mr)
	return cloneMR(&mr)
}

// MRs are the merge requests of project path, by iid.
func (l *GitLab) MRs(path string) []MR {
	l.smu.Lock()
	defer l.smu.Unlock()
	p := l.project(path, false)
	if p == nil {
		return nil
	}
	out := make([]MR, 0, len(p.mrs))
	for _, mr := range p.mrs {
		out = append(out, cloneMR(mr))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].IID < out[j].IID })
	return out
}

func cloneMR(mr *MR) MR {
	c := *mr
	c.Labels, c.Assignees, c.Reviewers = slices.Clone(mr.Labels), slices.Clone(mr.Assignees), slices.Clone(mr.Reviewers)
	return c
}

func (p *glProject) sha(branch string) string {
	if sha, ok := p.branches[branch]; ok {
		return sha
	}
	r := ghRepo{owner: "gitlab", name: p.path}
	return r.sha(branch)
}

// RateLimit is a 429 with the RateLimit-* headers, its reset after reset,
// and Retry-After (none when retryAfter is 0).
func (l *GitLab) RateLimit(retryAfter, reset time.Duration) Failure {
	at := time.Now().Add(reset)
	h := map[string]string{"RateLimit-Reset": fmt.Sprint(at.Unix()), "RateLimit-ResetTime": at.UTC().Format(http.TimeFormat)}
	if retryAfter > 0 {
		h["Retry-After"] = fmt.Sprint(int(retryAfter.Seconds()))
	}
	return failure(l.rateLimit, 0, h)
}

// Validation is a 400 whose message says field: message.
func (l *GitLab) Validation(field, message string) Failure {
	f := failure(l.validation, 0, nil)
	f.Body = fmt.Appendf(nil, `{"message":{%q:[%q]}}`, field, message)
	return f
}

// Refusal is the documented refusal of status: 401, 403, 404, 409 (an open
// merge request exists); others a bare message.
func (l *GitLab) Refusal(status int) Failure {
	switch status {
	case http.StatusUnauthorized:
		return failure(l.unauthorized, 0, nil)
	case http.StatusForbidden:
		return failure(l.forbidden, 0, nil)
	case http.StatusNotFound:
		return failure(l.notFound, 0, nil)
	case http.StatusConflict:
		return failure(l.conflict, 0, nil)
	}
	f := failure(l.notFound, status, nil)
	f.Body = fmt.Appendf(nil, `{"message":"%d %s"}`, status, http.StatusText(status))
	return f
}
