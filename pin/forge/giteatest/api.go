package giteatest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
)

// apiTimeout bounds one helper request to Gitea.
const apiTimeout = time.Minute

var apiClient = &http.Client{Timeout: apiTimeout}

// APIError is Gitea's refusal of a helper's request.
type APIError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.Method, e.Path, e.Status, e.Body)
}

// call sends one API request (path below /api/v1) as the admin, with the
// token, or with basic auth when basic is set, and decodes a JSON answer into
// out (nil: discarded). An answer of 400 or more is an *APIError.
func (g *Gitea) call(ctx context.Context, method, path string, body, out any, basic bool) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.URL+"/api/v1"+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if basic {
		req.SetBasicAuth(g.User, g.Password)
	} else {
		req.Header.Set("Authorization", "token "+g.Token)
	}
	resp, err := apiClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		return &APIError{Method: method, Path: path, Status: resp.StatusCode, Body: strings.TrimSpace(string(data))}
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode %q: %w", method, path, data, err)
		}
	}
	return nil
}

// API sends one request to Gitea's API (path below /api/v1, e.g.
// "/repos/o/r/pulls") with the admin's token, body as JSON, and decodes the
// answer into out (nil: discarded). An answer of 400 or more fails the test.
func (g *Gitea) API(t testing.TB, method, path string, body, out any) {
	t.Helper()
	if err := g.call(t.Context(), method, path, body, out, false); err != nil {
		t.Fatalf("giteatest: %v", err)
	}
}

// RepoURL is the repository's git URL without credentials,
// http://127.0.0.1:PORT/OWNER/NAME.git (repo is owner/name).
func (g *Gitea) RepoURL(repo string) string { return g.URL + "/" + repo + ".git" }

// GitURL is the repository's git URL with the admin's basic-auth credentials
// in it, for a git CLI.
func (g *Gitea) GitURL(repo string) string {
	u, _ := url.Parse(g.RepoURL(repo))
	u.User = url.UserPassword(g.User, g.Password)
	return u.String()
}

// CreateRepo creates a repository of the admin user named name plus a
// suffix unique within this Gitea (so that tests sharing it, or run again with
// -count, do not collide), with main as its default branch and one commit on
// main holding files (path -> content; none: a README.md). It returns the
// repository's owner/name.
func (g *Gitea) CreateRepo(t testing.TB, name string, files map[string]string) string {
	t.Helper()
	name = fmt.Sprintf("%s-%d", name, g.repos.Add(1))
	g.API(t, http.MethodPost, "/user/repos", map[string]any{
		"name": name, "default_branch": "main", "private": false, "auto_init": false,
	}, nil)
	repo := g.User + "/" + name
	if len(files) == 0 {
		files = map[string]string{"README.md": name + "\n"}
	}
	g.commitFiles(t, repo, "main", "", "initial commit", files, nil)
	return repo
}

// CreateBranch commits files (path -> content, created or replaced) on a new
// branch made from from's tip, as a person pushing a branch would. Without
// files the branch is from's tip itself (POST .../branches, no commit: much
// cheaper than a commit, which runs Gitea's hooks).
func (g *Gitea) CreateBranch(t testing.TB, repo, branch, from string, files map[string]string) {
	t.Helper()
	if len(files) == 0 {
		g.API(t, http.MethodPost, "/repos/"+repo+"/branches",
			map[string]any{"new_branch_name": branch, "old_branch_name": from}, nil)
		return
	}
	g.commitFiles(t, repo, from, branch, "change on "+branch, files, g.filesAt(t, repo, from))
}

// CreateBranches makes branches at from's tip in one git push (go-git over
// HTTP): Gitea runs its hooks once for them all, where CreateBranch runs them
// once a branch.
func (g *Gitea) CreateBranches(t testing.TB, repo, from string, branches ...string) {
	t.Helper()
	auth := &githttp.BasicAuth{Username: g.User, Password: g.Password}
	r, err := git.Init(memory.NewStorage(), nil)
	if err == nil {
		_, err = r.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{g.RepoURL(repo)}})
	}
	src := config.RefSpec("+refs/heads/" + from + ":refs/remotes/origin/" + from)
	if err == nil {
		err = r.FetchContext(t.Context(), &git.FetchOptions{RefSpecs: []config.RefSpec{src}, Auth: auth, Depth: 1})
	}
	if err != nil {
		t.Fatalf("giteatest: fetch %s of %s: %v", from, repo, err)
	}
	specs := make([]config.RefSpec, 0, len(branches))
	for _, b := range branches {
		specs = append(specs, config.RefSpec("refs/remotes/origin/"+from+":refs/heads/"+b))
	}
	if err := r.PushContext(t.Context(), &git.PushOptions{RefSpecs: specs, Auth: auth}); err != nil {
		t.Fatalf("giteatest: push %v to %s: %v", branches, repo, err)
	}
}

// CommitFiles commits files (path -> content, created or replaced) on branch.
func (g *Gitea) CommitFiles(t testing.TB, repo, branch string, files map[string]string) {
	t.Helper()
	g.commitFiles(t, repo, branch, "", "change on "+branch, files, g.filesAt(t, repo, branch))
}

// commitFiles makes one commit through POST /repos/{o}/{r}/contents: on
// branch, or on newBranch made from branch when newBranch is set. existing
// are the blobs at branch's tip (path -> blob SHA): those files are updated.
func (g *Gitea) commitFiles(t testing.TB, repo, branch, newBranch, msg string, files, existing map[string]string) {
	t.Helper()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	ops := make([]map[string]any, 0, len(paths))
	for _, p := range paths {
		op := map[string]any{"operation": "create", "path": p, "content": base64.StdEncoding.EncodeToString([]byte(files[p]))}
		if sha, ok := existing[p]; ok {
			op["operation"], op["sha"] = "update", sha
		}
		ops = append(ops, op)
	}
	body := map[string]any{"branch": branch, "message": msg, "files": ops}
	if newBranch != "" {
		body["new_branch"] = newBranch
	}
	g.API(t, http.MethodPost, "/repos/"+repo+"/contents", body, nil)
}

// filesAt lists the files at branch's tip: path -> blob SHA.
func (g *Gitea) filesAt(t testing.TB, repo, branch string) map[string]string {
	t.Helper()
	var tree struct {
		Tree []struct {
			Path string `json:"path"`
			Type string `json:"type"`
			SHA  string `json:"sha"`
		} `json:"tree"`
		Truncated bool `json:"truncated"`
	}
	g.API(t, http.MethodGet, "/repos/"+repo+"/git/trees/"+url.PathEscape(branch)+"?recursive=true&per_page=10000", nil, &tree)
	if tree.Truncated {
		t.Fatalf("giteatest: the tree of %s at %s is too large for one answer", repo, branch)
	}
	out := map[string]string{}
	for _, e := range tree.Tree {
		if e.Type == "blob" {
			out[e.Path] = e.SHA
		}
	}
	return out
}

// BranchSHA is the commit at branch's tip.
func (g *Gitea) BranchSHA(t testing.TB, repo, branch string) string {
	t.Helper()
	var b struct {
		Commit struct {
			ID string `json:"id"`
		} `json:"commit"`
	}
	g.API(t, http.MethodGet, "/repos/"+repo+"/branches/"+url.PathEscape(branch), nil, &b)
	return b.Commit.ID
}

// ProtectBranch forbids direct pushes to branch (a branch protection rule
// with push disabled): changes reach it through pull requests only.
func (g *Gitea) ProtectBranch(t testing.TB, repo, branch string) {
	t.Helper()
	g.API(t, http.MethodPost, "/repos/"+repo+"/branch_protections",
		map[string]any{"rule_name": branch, "enable_push": false}, nil)
}

// CreateUser creates a user (not an admin) named login, and returns its
// password.
func (g *Gitea) CreateUser(t testing.TB, login string) string {
	t.Helper()
	pw := "pw-" + randomHex(12)
	g.API(t, http.MethodPost, "/admin/users", map[string]any{
		"username": login, "email": login + "@example.invalid", "password": pw, "must_change_password": false,
	}, nil)
	return pw
}

// AddCollaborator gives login write access to repo (so that it may be
// assigned and asked to review).
func (g *Gitea) AddCollaborator(t testing.TB, repo, login string) {
	t.Helper()
	g.API(t, http.MethodPut, "/repos/"+repo+"/collaborators/"+url.PathEscape(login),
		map[string]any{"permission": "write"}, nil)
}

// CreateLabel creates a label of repo and returns its ID.
func (g *Gitea) CreateLabel(t testing.TB, repo, name string) int64 {
	t.Helper()
	var l struct {
		ID int64 `json:"id"`
	}
	g.API(t, http.MethodPost, "/repos/"+repo+"/labels", map[string]any{"name": name, "color": "#00aabb"}, &l)
	return l.ID
}
