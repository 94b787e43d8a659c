package argocde2e

// The lab's Gitea: the forge where the sidecar opens pull requests of pins. It
// mirrors the main module's pin/forge/giteatest (app.ini on loopback, an admin
// made with Gitea's CLI, a token with every scope), which this module cannot
// import: the main module's Kubernetes versions differ from Argo CD's here.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// GiteaBuild builds the lab's Gitea, from the repository root.
const GiteaBuild = "bash e2e/build/build.sh gitea"

// Gitea is the lab's forge: `gitea web` on 127.0.0.1, its state in the run dir,
// no webhook to Argo CD (Argo CD polls it, every 600 s in the lab).
type Gitea struct {
	URL  string // http://127.0.0.1:PORT, no trailing slash; repositories at URL/OWNER/NAME.git
	User string // the admin, owner of the repositories the tests create
	// TokenFile holds the admin's API token (every scope): the sidecar's forge
	// tokenFile and its git password for Gitea.
	TokenFile string

	lab      *Lab
	dir, bin string
	proc     *Proc
	token    string
}

// giteaPaths are the binary and its templates/options (build.sh builds it
// without bindata).
func giteaPaths(p Paths) (bin, static string) {
	return filepath.Join(p.Bin, "gitea"), filepath.Join(p.Cache, "gitea-static")
}

// startGitea starts `gitea web` and writes the sidecar's configuration naming it
// (git.credentials and git.forges with TokenFile), without waiting: readyGitea
// waits for its API and makes the admin and its token, which the sidecar reads
// at its first write.
func (l *Lab) startGitea() error {
	bin, static := giteaPaths(l.Paths)
	g := &Gitea{lab: l, User: "e2e", bin: bin, dir: filepath.Join(l.Dir, "gitea"), TokenFile: filepath.Join(l.Dir, "pki", "gitea-token")}
	for _, d := range []string{"custom", "data", "home", "tmp"} {
		if err := os.MkdirAll(filepath.Join(g.dir, d), 0o700); err != nil {
			return err
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	g.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := os.WriteFile(g.config(), []byte(giteaIni(g.dir, static, port)), 0o600); err != nil {
		return err
	}
	if g.proc, err = l.start("gitea", g.env(), append([]string{bin}, g.args("web")...)...); err != nil {
		return err
	}
	l.Gitea = g
	cfg := fmt.Sprintf(`git:
  credentials:
    - {prefix: "%[1]s/", username: %[2]s, passwordFile: %[3]s}
  forges:
    - {prefix: "%[1]s/", kind: gitea, api: "%[1]s", tokenFile: %[3]s}
`, g.URL, g.User, g.TokenFile)
	return os.WriteFile(l.sidecarConfig(), []byte(cfg), 0o644)
}

// sidecarConfig is the sidecar's IMAGE_RESOLVER_CONFIG (its git: section).
func (l *Lab) sidecarConfig() string { return filepath.Join(l.Dir, "sidecar-config.yaml") }

// readyGitea waits for Gitea's API and makes the admin user and its token
// (Gitea's CLI, as giteatest does), written to TokenFile.
func (l *Lab) readyGitea() error {
	g := l.Gitea
	if err := waitFor(90*time.Second, "gitea /api/v1/version", g.proc, httpOK(g.URL+"/api/v1/version")); err != nil {
		return err
	}
	pw := "pw-" + randomHex(12)
	if _, err := g.cli("admin", "user", "create", "--admin", "--username", g.User, "--password", pw,
		"--email", g.User+"@example.invalid", "--must-change-password=false"); err != nil {
		return fmt.Errorf("gitea admin user create: %w", err)
	}
	out, err := g.cli("admin", "user", "generate-access-token", "--username", g.User, "--token-name", "e2e", "--scopes", "all", "--raw")
	if err != nil {
		return fmt.Errorf("gitea admin user generate-access-token: %w", err)
	}
	fields := strings.Fields(out)
	if len(fields) == 0 {
		return fmt.Errorf("gitea admin user generate-access-token printed no token")
	}
	g.token = fields[len(fields)-1] // after Gitea's warning about running as root
	return os.WriteFile(g.TokenFile, []byte(g.token+"\n"), 0o600)
}

func (g *Gitea) config() string { return filepath.Join(g.dir, "app.ini") }

func (g *Gitea) args(cmd ...string) []string {
	return append(cmd, "--work-path", g.dir, "--custom-path", filepath.Join(g.dir, "custom"), "--config", g.config())
}

// env is Gitea's whole environment: PATH (git), HOME and TMPDIR in its dir.
func (g *Gitea) env() []string {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + filepath.Join(g.dir, "home"), "TMPDIR=" + filepath.Join(g.dir, "tmp"), "LC_ALL=C"}
	if u := os.Getenv("USER"); u != "" { // Gitea's fallback when the uid has no passwd entry
		env = append(env, "USER="+u)
	}
	return env
}

// cli runs a Gitea CLI command against the running instance's database. Its
// output may hold secrets: it is returned, never logged.
func (g *Gitea) cli(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, g.bin, g.args(args...)...)
	cmd.Dir, cmd.Env = g.dir, g.env()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: %s", err, lastLines(errb.String(), 5))
	}
	return out.String(), nil
}

// giteaIni is the configuration: everything on 127.0.0.1 and inside dir.
func giteaIni(dir, static string, port int) string {
	root := ""
	if os.Geteuid() == 0 { // Gitea refuses to run as root without it (CI runs as root)
		root = "I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true"
	}
	jwt := make([]byte, 32)
	_, _ = rand.Read(jwt)
	return fmt.Sprintf(`APP_NAME = argocd-e2e
RUN_MODE = prod
WORK_PATH = %[1]s
%[2]s

[server]
PROTOCOL = http
DOMAIN = 127.0.0.1
HTTP_ADDR = 127.0.0.1
HTTP_PORT = %[3]d
ROOT_URL = http://127.0.0.1:%[3]d/
LOCAL_ROOT_URL = http://127.0.0.1:%[3]d/
STATIC_ROOT_PATH = %[4]s
APP_DATA_PATH = %[1]s/data
DISABLE_SSH = true
START_SSH_SERVER = false
OFFLINE_MODE = true
LFS_START_SERVER = false

[database]
DB_TYPE = sqlite3
PATH = %[1]s/data/gitea.db
SQLITE_JOURNAL_MODE = WAL

[repository]
ROOT = %[1]s/data/repos
DEFAULT_BRANCH = main

[indexer]
ISSUE_INDEXER_TYPE = db

[security]
INSTALL_LOCK = true
SECRET_KEY = %[5]s
INTERNAL_TOKEN = %[6]s

[oauth2]
JWT_SECRET = %[7]s

[service]
DISABLE_REGISTRATION = true

[mailer]
ENABLED = false

[log]
MODE = console
LEVEL = info
`, dir, root, port, static, randomHex(32), randomHex(40), base64.RawURLEncoding.EncodeToString(jwt))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ---------------------------------------------------------------------------------
// Gitea's REST API and git, as a person with the admin's token uses them

var giteaClient = &http.Client{Timeout: time.Minute}

// API sends one request (path below /api/v1) with the admin's token and decodes
// a JSON answer into out (nil: discarded). An answer of 400 or more is an error
// with Gitea's message.
func (g *Gitea) API(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, g.URL+"/api/v1"+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "token "+g.token)
	resp, err := giteaClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode %q: %w", method, path, data, err)
		}
	}
	return nil
}

// RepoURL is repo's (owner/name) git URL, without credentials: what an
// Application's repoURL names.
func (g *Gitea) RepoURL(repo string) string { return g.URL + "/" + repo + ".git" }

// Git runs git with the lab's environment, authenticated to Gitea as the admin
// by an http.extraHeader passed in the environment (so that no command line,
// log or remote URL carries the token).
func (g *Gitea) Git(args ...string) (string, error) {
	auth := base64.StdEncoding.EncodeToString([]byte(g.User + ":" + g.token))
	r := g.lab.run([]string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0=Authorization: Basic " + auth,
		"GIT_TERMINAL_PROMPT=0"}, "", append([]string{"git"}, args...)...)
	if r.Code != 0 {
		return r.Stdout, fmt.Errorf("%s", r)
	}
	return r.Stdout, nil
}

// CreateRepo creates the admin's public repository name holding the directory
// src's files in one commit on main, pushed with git from work (a working copy
// the test may go on using). It returns owner/name.
func (g *Gitea) CreateRepo(name, src, work string) (string, error) {
	if err := g.API(http.MethodPost, "/user/repos", map[string]any{"name": name, "default_branch": "main", "private": false}, nil); err != nil {
		return "", err
	}
	repo := g.User + "/" + name
	if err := copyDir(src, work); err != nil {
		return "", err
	}
	for _, c := range [][]string{
		{"-C", work, "init", "-q", "-b", "main"},
		{"-C", work, "add", "-A"},
		{"-C", work, "-c", "user.name=e2e", "-c", "user.email=e2e@127.0.0.1", "commit", "-q", "-m", "apps"},
		{"-C", work, "remote", "add", "origin", g.RepoURL(repo)},
		{"-C", work, "push", "-q", "origin", "main"},
	} {
		if _, err := g.Git(c...); err != nil {
			return "", err
		}
	}
	// Gitea notes the first push in its database asynchronously; until then its
	// API takes the repository for empty (and v1.27.3's branch API panics).
	return repo, waitFor(time.Minute, repo+" not empty", g.proc, func() error {
		var r struct {
			Empty bool `json:"empty"`
		}
		if err := g.API(http.MethodGet, "/repos/"+repo, nil, &r); err != nil {
			return err
		}
		if r.Empty {
			return ErrNotYet
		}
		return nil
	})
}

// Tip is the commit branch of the repository of the working copy work's origin
// is at, as git sees it (Gitea's branch API follows pushes asynchronously).
func (g *Gitea) Tip(work, branch string) (string, error) {
	out, err := g.Git("-C", work, "ls-remote", "origin", "refs/heads/"+branch)
	if f := strings.Fields(out); err == nil && len(f) == 2 {
		return f[0], nil
	}
	return "", fmt.Errorf("git ls-remote origin refs/heads/%s in %s: %q %v", branch, work, out, err)
}

// GiteaPR is a pull request as Gitea's API shows it, the parts the tests check.
type GiteaPR struct {
	Number int    `json:"number"`
	Title  string `json:"title"`
	Body   string `json:"body"`
	State  string `json:"state"`
	Merged bool   `json:"merged"`
	// MergeCommit is the merge commit's SHA once merged.
	MergeCommit string `json:"merge_commit_sha"`
	Mergeable   bool   `json:"mergeable"`
	Head        struct {
		Ref string `json:"ref"`
		SHA string `json:"sha"`
	} `json:"head"`
	Base struct {
		Ref string `json:"ref"`
	} `json:"base"`
}

// PullRequests lists repo's pull requests in state (open, closed or all).
func (g *Gitea) PullRequests(repo, state string) ([]GiteaPR, error) {
	var prs []GiteaPR
	err := g.API(http.MethodGet, "/repos/"+repo+"/pulls?state="+state+"&limit=50", nil, &prs)
	return prs, err
}

// PullRequest is repo's pull request number n.
func (g *Gitea) PullRequest(repo string, n int) (GiteaPR, error) {
	var pr GiteaPR
	err := g.API(http.MethodGet, fmt.Sprintf("/repos/%s/pulls/%d", repo, n), nil, &pr)
	return pr, err
}

// Merge merges pull request n with a merge commit, as a reviewer clicking
// "Create merge commit" does, once Gitea has found it mergeable. Gitea answers
// 405 "Please try again later" while it checks a head pushed just before (its
// mergeable field may still be the previous head's): that is asked again.
func (g *Gitea) Merge(repo string, n int) error {
	var final error
	err := waitFor(time.Minute, fmt.Sprintf("pull request #%d merged", n), g.proc, func() error {
		pr, err := g.PullRequest(repo, n)
		if err != nil || !pr.Mergeable {
			return fmt.Errorf("mergeable %v: %v", pr.Mergeable, err)
		}
		err = g.API(http.MethodPost, fmt.Sprintf("/repos/%s/pulls/%d/merge", repo, n), map[string]any{"Do": "merge"}, nil)
		if err != nil && strings.Contains(err.Error(), "Please try again later") {
			return err
		}
		final = err
		return nil
	})
	if err != nil {
		return err
	}
	return final
}
