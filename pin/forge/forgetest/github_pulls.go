package forgetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// lookup finds the repository and pull request of r's path (number 0: no
// pull request asked); it answers 404 itself and returns nil when absent.
// g.smu held.
func (g *GitHub) lookup(w http.ResponseWriter, r *http.Request, wantPR bool) (*ghRepo, *PR) {
	repo := g.repo(r.PathValue("owner")+"/"+r.PathValue("repo"), false)
	if repo == nil {
		failure(g.notFound, 0, nil).write(w)
		return nil, nil
	}
	if !wantPR {
		return repo, nil
	}
	n, _ := strconv.Atoi(r.PathValue("number"))
	for _, pr := range repo.prs {
		if pr.Number == n {
			return repo, pr
		}
	}
	failure(g.notFound, 0, nil).write(w)
	return nil, nil
}

// listPulls answers GET /repos/{owner}/{repo}/pulls: state (open, closed,
// all; default open), newest first, a page with its Link header.
func (g *GitHub) listPulls(w http.ResponseWriter, r *http.Request) {
	g.smu.Lock()
	defer g.smu.Unlock()
	repo, _ := g.lookup(w, r, false)
	if repo == nil {
		return
	}
	state := r.URL.Query().Get("state")
	if state == "" {
		state = "open"
	}
	var match []*PR
	for _, pr := range slices.Backward(repo.prs) {
		if state == "all" || pr.State == state {
			match = append(match, pr)
		}
	}
	p := g.paginate(r, len(match))
	out := make([]any, 0, p.to-p.from)
	for _, pr := range match[p.from:p.to] {
		out = append(out, g.renderPR(repo, pr, false))
	}
	if link := p.link(r); link != "" {
		w.Header().Set("Link", link)
	}
	writeJSON(w, http.StatusOK, out)
}

// createPull answers POST /repos/{owner}/{repo}/pulls.
func (g *GitHub) createPull(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Title               *string `json:"title"`
		Head                string  `json:"head"`
		Base                string  `json:"base"`
		Body                *string `json:"body"`
		MaintainerCanModify *bool   `json:"maintainer_can_modify"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Problems parsing JSON"})
		return
	}
	g.smu.Lock()
	defer g.smu.Unlock()
	repo, _ := g.lookup(w, r, false)
	if repo == nil {
		return
	}
	for _, f := range []struct {
		field   string
		missing bool
	}{{"title", in.Title == nil || *in.Title == ""}, {"head", in.Head == ""}, {"base", in.Base == ""}} {
		if field := f.field; f.missing {
			f := failure(g.validation, 0, nil)
			f.Body = fmt.Appendf(nil, `{"message":"Validation Failed","errors":[{"resource":"PullRequest","field":%q,"code":"missing_field"}],"status":"422"}`, field)
			f.write(w)
			return
		}
	}
	pr := &PR{Title: *in.Title, Base: in.Base, Head: in.Head, State: "open", MaintainerCanModify: in.MaintainerCanModify != nil && *in.MaintainerCanModify}
	if owner, branch, ok := strings.Cut(in.Head, ":"); ok {
		pr.Head = branch
		if !strings.EqualFold(owner, repo.owner) {
			pr.HeadRepo = owner + "/" + repo.name
		}
	}
	if in.Body != nil {
		pr.Body = *in.Body
	}
	for _, open := range repo.prs {
		if open.State == "open" && open.Head == pr.Head && open.HeadRepo == pr.HeadRepo && open.Base == pr.Base {
			g.Validation(fmt.Sprintf("A pull request already exists for %s:%s.", repo.owner, pr.Head)).write(w)
			return
		}
	}
	pr.Number = len(repo.prs) + 1
	pr.NodeID = nodeID(repo, pr.Number)
	pr.HeadSHA = repo.sha(pr.Head)
	repo.prs = append(repo.prs, pr)
	w.Header().Set("Location", fmt.Sprintf("%s/repos/%s/pulls/%d", g.URL, repo.full(), pr.Number))
	writeJSON(w, http.StatusCreated, g.renderPR(repo, pr, true))
}

// updatePull answers PATCH /repos/{owner}/{repo}/pulls/{number}: title,
// body, state, base.
func (g *GitHub) updatePull(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Title, Body, State, Base *string
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Problems parsing JSON"})
		return
	}
	g.smu.Lock()
	defer g.smu.Unlock()
	repo, pr := g.lookup(w, r, true)
	if pr == nil {
		return
	}
	for dst, src := range map[*string]*string{&pr.Title: in.Title, &pr.Body: in.Body, &pr.State: in.State, &pr.Base: in.Base} {
		if src != nil {
			*dst = *src
		}
	}
	writeJSON(w, http.StatusOK, g.renderPR(repo, pr, true))
}

// addLabels answers POST .../issues/{number}/labels: a list of names, or
// {"labels": [...]}; answers every label of the issue.
func (g *GitHub) addLabels(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Problems parsing JSON"})
		return
	}
	var names []string
	if json.Unmarshal(raw, &names) != nil {
		var obj struct{ Labels []string }
		json.Unmarshal(raw, &obj)
		names = obj.Labels
	}
	g.smu.Lock()
	defer g.smu.Unlock()
	repo, pr := g.lookup(w, r, true)
	if pr == nil {
		return
	}
	pr.Labels = union(pr.Labels, names)
	writeJSON(w, http.StatusOK, g.renderLabels(repo, pr.Labels))
}

// addAssignees answers POST .../issues/{number}/assignees; logins that are
// not users are ignored, as GitHub does.
func (g *GitHub) addAssignees(w http.ResponseWriter, r *http.Request) {
	var in struct{ Assignees []string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Problems parsing JSON"})
		return
	}
	g.smu.Lock()
	defer g.smu.Unlock()
	repo, pr := g.lookup(w, r, true)
	if pr == nil {
		return
	}
	var known []string
	for _, a := range in.Assignees {
		if g.users[strings.ToLower(a)] {
			known = append(known, a)
		}
	}
	pr.Assignees = union(pr.Assignees, known)
	writeJSON(w, http.StatusCreated, g.renderIssue(repo, pr))
}

// requestReviewers answers POST .../pulls/{number}/requested_reviewers; a
// login that is not a user is refused (422), as GitHub does.
func (g *GitHub) requestReviewers(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Reviewers     []string `json:"reviewers"`
		TeamReviewers []string `json:"team_reviewers"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Problems parsing JSON"})
		return
	}
	g.smu.Lock()
	defer g.smu.Unlock()
	repo, pr := g.lookup(w, r, true)
	if pr == nil {
		return
	}
	for _, rv := range in.Reviewers {
		if !g.users[strings.ToLower(rv)] {
			g.Validation(fmt.Sprintf("Reviews may only be requested from collaborators. One or more of the users or teams you specified is not a collaborator of the %s repository.", repo.full())).write(w)
			return
		}
	}
	pr.Reviewers = union(pr.Reviewers, in.Reviewers)
	pr.TeamReviewers = union(pr.TeamReviewers, in.TeamReviewers)
	writeJSON(w, http.StatusCreated, g.renderPR(repo, pr, true))
}

func union(have, add []string) []string {
	for _, a := range add {
		if !slices.Contains(have, a) {
			have = append(have, a)
		}
	}
	return have
}
