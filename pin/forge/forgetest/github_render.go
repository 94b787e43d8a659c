package forgetest

import (
	"fmt"
	"strings"
)

// The GitHub server's answers: the samples, with the fields that hold state
// overwritten (all others stay as documented).

const sampleTime = "2011-01-26T19:01:12Z"

// renderPR is pr as List pull requests (single: Create/Update) answers it.
func (g *GitHub) renderPR(repo *ghRepo, pr *PR, single bool) map[string]any {
	m := g.pull.object()
	if single {
		m = g.pull.merged(g.pullCreated)
		m["merged"] = pr.Merged
		m["maintainer_can_modify"] = pr.MaintainerCanModify
	}
	api := fmt.Sprintf("%s/repos/%s", g.URL, repo.full())
	web := fmt.Sprintf("%s/%s", g.URL, repo.full())
	m["url"] = fmt.Sprintf("%s/pulls/%d", api, pr.Number)
	m["id"] = repo.id*100000 + int64(pr.Number)
	m["node_id"] = pr.NodeID
	m["html_url"] = fmt.Sprintf("%s/pull/%d", web, pr.Number)
	m["diff_url"] = fmt.Sprintf("%s/pull/%d.diff", web, pr.Number)
	m["patch_url"] = fmt.Sprintf("%s/pull/%d.patch", web, pr.Number)
	m["issue_url"] = fmt.Sprintf("%s/issues/%d", api, pr.Number)
	m["number"] = pr.Number
	m["state"] = pr.State
	m["title"] = pr.Title
	m["body"] = pr.Body
	m["active_lock_reason"] = nil
	m["labels"] = g.renderLabels(repo, pr.Labels)
	m["assignees"] = g.renderUsers(pr.Assignees)
	m["assignee"] = nil
	if len(pr.Assignees) > 0 {
		m["assignee"] = g.renderUser(pr.Assignees[0])
	}
	m["requested_reviewers"] = g.renderUsers(pr.Reviewers)
	m["requested_teams"] = g.renderTeams(m["requested_teams"], pr.TeamReviewers)
	m["head"] = g.renderRef(m["head"], repo, pr.headRepo(repo), pr.Head, pr.HeadSHA)
	m["base"] = g.renderRef(m["base"], repo, repo.full(), pr.Base, repo.sha(pr.Base))
	m["closed_at"], m["merged_at"], m["merge_commit_sha"] = nil, nil, nil
	if pr.State == "closed" {
		m["closed_at"] = sampleTime
	}
	if pr.Merged {
		m["merged_at"] = sampleTime
		m["merge_commit_sha"] = repo.sha("merge/" + pr.Head)
	}
	m["auto_merge"] = nil
	if pr.AutoMerge {
		m["auto_merge"] = map[string]any{"enabled_by": g.renderUser(repo.owner), "merge_method": "merge", "commit_title": "", "commit_message": ""}
	}
	return m
}

// headRepo is the full name of pr's head repository ("" deleted fork).
func (pr *PR) headRepo(repo *ghRepo) string {
	switch pr.HeadRepo {
	case "":
		return repo.full()
	case "-":
		return ""
	}
	return pr.HeadRepo
}

// renderRef is a head or base: branch of repository full ("" deleted).
func (g *GitHub) renderRef(tmpl any, repo *ghRepo, full, branch, sha string) map[string]any {
	m, _ := tmpl.(map[string]any)
	owner, _, _ := strings.Cut(full, "/")
	if full == "" {
		owner = "ghost"
	}
	m["label"] = owner + ":" + branch
	m["ref"] = branch
	m["sha"] = sha
	m["user"] = g.renderUser(owner)
	if full == "" {
		m["repo"] = nil
		return m
	}
	r, _ := m["repo"].(map[string]any)
	id := repo.id
	if !strings.EqualFold(full, repo.full()) {
		id = int64(userID(full)) + 1_000_000 // a fork: another repository
	}
	_, name, _ := strings.Cut(full, "/")
	r["id"] = id
	r["node_id"] = fmt.Sprintf("R_%d", id)
	r["name"] = name
	r["full_name"] = full
	r["owner"] = g.renderUser(owner)
	r["html_url"] = g.URL + "/" + full
	r["url"] = g.URL + "/repos/" + full
	r["fork"] = id != repo.id
	return m
}

func (g *GitHub) renderUser(login string) map[string]any {
	m := g.user.object()
	m["login"] = login
	m["id"] = userID(login)
	m["node_id"] = fmt.Sprintf("U_%d", userID(login))
	m["url"] = g.URL + "/users/" + login
	m["html_url"] = g.URL + "/" + login
	return m
}

func (g *GitHub) renderUsers(logins []string) []any {
	out := make([]any, 0, len(logins))
	for _, l := range logins {
		out = append(out, g.renderUser(l))
	}
	return out
}

// renderTeams renders slugs from the sample's first team.
func (g *GitHub) renderTeams(tmpl any, slugs []string) []any {
	out := make([]any, 0, len(slugs))
	for _, s := range slugs {
		list, _ := tmpl.([]any)
		t := map[string]any{}
		if len(list) > 0 {
			src, _ := list[0].(map[string]any)
			for k, v := range src {
				t[k] = v
			}
		}
		t["name"], t["slug"] = s, s
		out = append(out, t)
	}
	return out
}

func (g *GitHub) renderLabels(repo *ghRepo, names []string) []any {
	out := make([]any, 0, len(names))
	for _, n := range names {
		m := g.label.object()
		m["id"] = userID("label:" + n)
		m["node_id"] = fmt.Sprintf("LA_%d", userID("label:"+n))
		m["url"] = fmt.Sprintf("%s/repos/%s/labels/%s", g.URL, repo.full(), n)
		m["name"] = n
		m["default"] = false
		out = append(out, m)
	}
	return out
}

// renderIssue is pr as the issues API answers it.
func (g *GitHub) renderIssue(repo *ghRepo, pr *PR) map[string]any {
	m := g.issue.object()
	api := fmt.Sprintf("%s/repos/%s", g.URL, repo.full())
	m["id"] = repo.id*100000 + int64(pr.Number)
	m["url"] = fmt.Sprintf("%s/issues/%d", api, pr.Number)
	m["html_url"] = fmt.Sprintf("%s/%s/pull/%d", g.URL, repo.full(), pr.Number)
	m["number"] = pr.Number
	m["state"] = pr.State
	m["title"] = pr.Title
	m["body"] = pr.Body
	m["locked"] = false
	m["labels"] = g.renderLabels(repo, pr.Labels)
	m["assignees"] = g.renderUsers(pr.Assignees)
	m["assignee"] = nil
	if len(pr.Assignees) > 0 {
		m["assignee"] = g.renderUser(pr.Assignees[0])
	}
	m["pull_request"] = map[string]any{
		"url":      fmt.Sprintf("%s/pulls/%d", api, pr.Number),
		"html_url": fmt.Sprintf("%s/%s/pull/%d", g.URL, repo.full(), pr.Number),
	}
	return m
}
