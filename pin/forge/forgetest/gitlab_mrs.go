package forgetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// lookup finds the project (and merge request) of r's path; it answers 404
// itself and returns nil when absent. l.smu held.
func (l *GitLab) lookup(w http.ResponseWriter, r *http.Request, wantMR bool) (*glProject, *MR) {
	p := l.project(r.PathValue("id"), false)
	if p == nil {
		failure(l.notFound, 0, nil).write(w)
		return nil, nil
	}
	if !wantMR {
		return p, nil
	}
	iid, _ := strconv.Atoi(r.PathValue("iid"))
	for _, mr := range p.mrs {
		if mr.IID == iid {
			return p, mr
		}
	}
	f := failure(l.notFound, 0, nil)
	f.Body = []byte(`{"message":"404 Not found"}`)
	f.write(w)
	return nil, nil
}

// listMRs answers GET /projects/:id/merge_requests: state (opened, closed,
// locked, merged, all; default all), newest first, a page with the
// X-Page/X-Next-Page/X-Total headers and Link.
func (l *GitLab) listMRs(w http.ResponseWriter, r *http.Request) {
	l.smu.Lock()
	defer l.smu.Unlock()
	p, _ := l.lookup(w, r, false)
	if p == nil {
		return
	}
	state := r.URL.Query().Get("state")
	var match []*MR
	for _, mr := range slices.Backward(p.mrs) {
		if state == "" || state == "all" || mr.State == state {
			match = append(match, mr)
		}
	}
	pg := l.paginate(r, len(match))
	out := make([]any, 0, pg.to-pg.from)
	for _, mr := range match[pg.from:pg.to] {
		out = append(out, l.renderMR(p, mr, false))
	}
	h := w.Header()
	h.Set("X-Page", strconv.Itoa(pg.number))
	h.Set("X-Per-Page", strconv.Itoa(pg.perPage))
	h.Set("X-Total", strconv.Itoa(pg.total))
	h.Set("X-Total-Pages", strconv.Itoa(pg.pages))
	h.Set("X-Next-Page", "")
	h.Set("X-Prev-Page", "")
	if pg.number < pg.pages {
		h.Set("X-Next-Page", strconv.Itoa(pg.number+1))
	}
	if pg.number > 1 {
		h.Set("X-Prev-Page", strconv.Itoa(pg.number-1))
	}
	if link := pg.link(r); link != "" {
		h.Set("Link", link)
	}
	writeJSON(w, http.StatusOK, out)
}

// mrInput is what Create MR and Update MR read.
type mrInput struct {
	SourceBranch       *string         `json:"source_branch"`
	TargetBranch       *string         `json:"target_branch"`
	Title              *string         `json:"title"`
	Description        *string         `json:"description"`
	Labels             json.RawMessage `json:"labels"`
	AssigneeID         *int64          `json:"assignee_id"`
	AssigneeIDs        []int64         `json:"assignee_ids"`
	ReviewerIDs        []int64         `json:"reviewer_ids"`
	RemoveSourceBranch *bool           `json:"remove_source_branch"`
	StateEvent         *string         `json:"state_event"`
}

// labels reads labels: "a,b" or ["a", "b"].
func (in mrInput) labels() []string {
	var list []string
	if json.Unmarshal(in.Labels, &list) == nil {
		return list
	}
	var s string
	json.Unmarshal(in.Labels, &s)
	for _, l := range strings.Split(s, ",") {
		if l = strings.TrimSpace(l); l != "" {
			list = append(list, l)
		}
	}
	return list
}

// createMR answers POST /projects/:id/merge_requests.
func (l *GitLab) createMR(w http.ResponseWriter, r *http.Request) {
	var in mrInput
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the body is not JSON"})
		return
	}
	l.smu.Lock()
	defer l.smu.Unlock()
	p, _ := l.lookup(w, r, false)
	if p == nil {
		return
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"source_branch", in.SourceBranch}, {"target_branch", in.TargetBranch}, {"title", in.Title}} {
		if f.v == nil || *f.v == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": f.name + " is missing"})
			return
		}
	}
	for _, mr := range p.mrs {
		if mr.State == "opened" && mr.SourceProject == "" && mr.SourceBranch == *in.SourceBranch {
			f := failure(l.conflict, 0, nil)
			f.Body = fmt.Appendf(nil, `{"message":["Another open merge request already exists for this source branch: !%d"]}`, mr.IID)
			f.write(w)
			return
		}
	}
	mr := &MR{IID: len(p.mrs) + 1, Title: *in.Title, SourceBranch: *in.SourceBranch, TargetBranch: *in.TargetBranch, State: "opened"}
	if in.Description != nil {
		mr.Description = *in.Description
	}
	mr.SHA = p.sha(mr.SourceBranch)
	mr.RemoveSourceBranch = in.RemoveSourceBranch != nil && *in.RemoveSourceBranch
	mr.Labels = in.labels()
	if in.AssigneeID != nil {
		in.AssigneeIDs = append(in.AssigneeIDs, *in.AssigneeID)
	}
	mr.Assignees, mr.Reviewers = l.usernames(in.AssigneeIDs), l.usernames(in.ReviewerIDs)
	p.mrs = append(p.mrs, mr)
	writeJSON(w, http.StatusCreated, l.renderMR(p, mr, true))
}

// usernames are the users of ids (unknown IDs are left out); l.smu held.
func (l *GitLab) usernames(ids []int64) []string {
	var out []string
	for _, id := range ids {
		if u := l.username(id); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// updateMR answers PUT /projects/:id/merge_requests/:iid.
func (l *GitLab) updateMR(w http.ResponseWriter, r *http.Request) {
	var in mrInput
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the body is not JSON"})
		return
	}
	l.smu.Lock()
	defer l.smu.Unlock()
	p, mr := l.lookup(w, r, true)
	if mr == nil {
		return
	}
	if in.Title != nil {
		mr.Title = *in.Title
	}
	if in.Description != nil {
		mr.Description = *in.Description
	}
	if in.TargetBranch != nil {
		mr.TargetBranch = *in.TargetBranch
	}
	if in.Labels != nil {
		mr.Labels = in.labels()
	}
	if in.StateEvent != nil {
		mr.State = map[string]string{"close": "closed", "reopen": "opened"}[*in.StateEvent]
	}
	writeJSON(w, http.StatusOK, l.renderMR(p, mr, true))
}

// mergeMR answers PUT /projects/:id/merge_requests/:iid/merge: with
// auto_merge or merge_when_pipeline_succeeds it is set to merge when the
// pipeline succeeds; else merged now. 405 when it is not open.
func (l *GitLab) mergeMR(w http.ResponseWriter, r *http.Request) {
	var in struct {
		AutoMerge *bool `json:"auto_merge"`
		MWPS      *bool `json:"merge_when_pipeline_succeeds"`
	}
	json.NewDecoder(r.Body).Decode(&in)
	l.smu.Lock()
	defer l.smu.Unlock()
	p, mr := l.lookup(w, r, true)
	if mr == nil {
		return
	}
	if mr.State != "opened" {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"message": "405 Method Not Allowed"})
		return
	}
	if (in.AutoMerge != nil && *in.AutoMerge) || (in.MWPS != nil && *in.MWPS) {
		mr.AutoMerge = true
	} else {
		mr.State = "merged"
	}
	writeJSON(w, http.StatusOK, l.renderMR(p, mr, true))
}

// listUsers answers GET /users: ?username= finds one (case-insensitively).
func (l *GitLab) listUsers(w http.ResponseWriter, r *http.Request) {
	l.smu.Lock()
	defer l.smu.Unlock()
	name := r.URL.Query().Get("username")
	out := []any{}
	for _, u := range l.users {
		if name == "" || strings.EqualFold(u.username, name) {
			out = append(out, l.renderUser(u))
		}
	}
	writeJSON(w, http.StatusOK, out)
}
