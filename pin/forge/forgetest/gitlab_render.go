package forgetest

import (
	"fmt"
	"strings"
)

// The GitLab server's answers: the samples, with the fields that hold state
// overwritten (all others stay as documented).

// renderMR is mr as List project merge requests (single: Create MR, Update
// MR, Merge a merge request) answers it.
func (l *GitLab) renderMR(p *glProject, mr *MR, single bool) map[string]any {
	m := l.mr.object()
	if single {
		m = l.mr.merged(l.mrSingle)
		if refs, ok := m["diff_refs"].(map[string]any); ok {
			refs["head_sha"] = mr.SHA
			refs["base_sha"] = p.sha(mr.TargetBranch)
			refs["start_sha"] = p.sha(mr.TargetBranch)
		}
	}
	source := p.id
	if mr.SourceProject != "" {
		source = p.id + 100000 // a fork: another project
	}
	m["id"] = p.id*100000 + int64(mr.IID)
	m["iid"] = mr.IID
	m["project_id"] = p.id
	m["title"] = mr.Title
	m["description"] = mr.Description
	m["state"] = mr.State
	m["target_branch"] = mr.TargetBranch
	m["source_branch"] = mr.SourceBranch
	m["source_project_id"] = source
	m["target_project_id"] = p.id
	m["labels"] = append([]string{}, mr.Labels...)
	m["assignees"] = l.renderUsers(mr.Assignees)
	m["assignee"] = nil
	if len(mr.Assignees) > 0 {
		m["assignee"] = l.renderUsers(mr.Assignees[:1])[0]
	}
	m["reviewers"] = l.renderUsers(mr.Reviewers)
	m["merge_when_pipeline_succeeds"] = mr.AutoMerge
	m["sha"] = mr.SHA
	m["should_remove_source_branch"] = mr.RemoveSourceBranch
	m["web_url"] = fmt.Sprintf("%s/%s/-/merge_requests/%d", l.URL, p.path, mr.IID)
	m["references"] = map[string]any{"short": fmt.Sprintf("!%d", mr.IID), "relative": fmt.Sprintf("!%d", mr.IID), "full": fmt.Sprintf("%s!%d", p.path, mr.IID)}
	m["detailed_merge_status"] = map[bool]string{true: "mergeable", false: "not_open"}[mr.State == "opened"]
	m["merged_at"], m["closed_at"], m["merge_commit_sha"] = nil, nil, nil
	switch mr.State {
	case "merged":
		m["merged_at"] = sampleTime
		m["merge_commit_sha"] = p.sha("merge/" + mr.SourceBranch)
	case "closed":
		m["closed_at"] = sampleTime
	}
	return m
}

func (l *GitLab) renderUser(u glUser) map[string]any {
	m := l.user.object()
	m["id"] = u.id
	m["username"] = u.username
	m["name"] = u.username
	m["web_url"] = l.URL + "/" + u.username
	return m
}

// renderUsers renders usernames; l.smu held.
func (l *GitLab) renderUsers(names []string) []any {
	out := make([]any, 0, len(names))
	for _, n := range names {
		for _, u := range l.users {
			if strings.EqualFold(u.username, n) {
				out = append(out, l.renderUser(u))
			}
		}
	}
	return out
}
