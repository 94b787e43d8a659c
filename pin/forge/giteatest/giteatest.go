// Package giteatest runs a real Gitea for tests: one `gitea web` process on a
// free port of 127.0.0.1, its state (SQLite, repositories, logs) in a temporary
// directory, OFFLINE_MODE, no SSH, no mailer, no registration, an admin user and
// an API token with every scope. Helpers act through Gitea's REST API as a
// person would (repositories with files, branches, labels, users, branch
// protection, listing and merging pull requests), and Proxy counts the API
// requests a client under test makes.
//
// The binary is e2e/build/build.sh's (`bash e2e/build/build.sh gitea`):
// $IMAGE_RESOLVER_GITEA, else $E2E_CACHE/bin/gitea, else
// <repository root>/.cache/e2e/bin/gitea; Gitea's templates and options are
// read from gitea-static beside its bin/ directory ($IMAGE_RESOLVER_GITEA_STATIC
// overrides). Without the binary a test is skipped on a developer's machine and
// fails in CI (gittest.RequireOrSkip).
//
// Start gives a test its own Gitea (3-7 s to start on a busy 2-core machine:
// the SQLite migration, then the admin user). Shared gives
// every test of a package one Gitea, started at the first use and stopped by
// Main, which the package's TestMain must call; tests that share it make their
// own repositories.
package giteatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

// Environment variables that say where Gitea is.
const (
	// BinEnv names the gitea binary to run (default: E2E_CACHE's bin/gitea).
	BinEnv = "IMAGE_RESOLVER_GITEA"
	// StaticEnv names the directory holding Gitea's templates/ and options/
	// (default: gitea-static beside the binary's directory).
	StaticEnv = "IMAGE_RESOLVER_GITEA_STATIC"
	// CacheEnv is e2e/build/build.sh's output directory (default
	// <repository root>/.cache/e2e).
	CacheEnv = "E2E_CACHE"
	// BuildCommand builds the binary, run from the repository root.
	BuildCommand = "bash e2e/build/build.sh gitea"
)

// startTimeout bounds how long Gitea may take to answer its API after start
// (a cold SQLite migration on a loaded machine takes a few seconds).
const startTimeout = 90 * time.Second

// Gitea is one running `gitea web`.
type Gitea struct {
	// URL is Gitea's own address, http://127.0.0.1:PORT (no trailing slash):
	// its API is at URL/api/v1, repositories at URL/OWNER/NAME.git.
	URL string
	// User and Password are the admin user's login; repositories the helpers
	// create belong to User.
	User, Password string
	// Token is an API token of User with every scope (`Authorization: token
	// ...`).
	Token string
	// Dir holds Gitea's state: app.ini, data/ (SQLite, repositories), gitea.log.
	Dir string
	// Started is how long the start took, to the API answering with the admin
	// user and token made.
	Started time.Duration

	bin     string
	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error
	stop    sync.Once
	repos   atomic.Int64
}

// Start runs a Gitea of the test's own, stopped (its process group killed)
// when the test ends.
func Start(t testing.TB) *Gitea {
	t.Helper()
	bin, static := binary(t)
	g, err := start(bin, static, t.TempDir())
	if err != nil {
		t.Fatalf("giteatest: %v", err)
	}
	t.Cleanup(g.Stop)
	t.Logf("giteatest: Gitea at %s started in %s", g.URL, g.Started.Round(time.Millisecond))
	return g
}

var shared struct {
	mu     sync.Mutex
	inMain bool
	g      *Gitea
	err    error
	dir    string
}

// Shared returns the test process's one Gitea, starting it at the first call
// (later calls cost nothing). The package's TestMain must run the tests with
// Main, which stops it; tests sharing it must not rely on what others did, so
// each makes its own repositories (names unique within the package).
func Shared(t testing.TB) *Gitea {
	t.Helper()
	bin, static := binary(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		t.Fatal("giteatest.Shared: the package's TestMain must call giteatest.Main(m), which stops the shared Gitea")
	}
	if shared.g == nil && shared.err == nil {
		shared.dir, shared.err = os.MkdirTemp("", "giteatest-")
		if shared.err == nil {
			shared.g, shared.err = start(bin, static, shared.dir)
		}
		if shared.err == nil {
			t.Logf("giteatest: shared Gitea at %s started in %s", shared.g.URL, shared.g.Started.Round(time.Millisecond))
		}
	}
	if shared.err != nil {
		t.Fatalf("giteatest: shared Gitea: %v", shared.err)
	}
	return shared.g
}

// Main runs the tests (m.Run), stops the Gitea Shared started, removes its
// directory, and exits with the tests' code. Call it from TestMain.
func Main(m *testing.M) {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	if shared.g != nil {
		shared.g.Stop()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	shared.mu.Unlock()
	os.Exit(code)
}

// binary finds the gitea binary and its static directory, or ends the test.
func binary(t testing.TB) (bin, static string) {
	t.Helper()
	bin = os.Getenv(BinEnv)
	if bin == "" {
		cache := os.Getenv(CacheEnv)
		if cache == "" {
			root, err := repoRoot()
			if err != nil {
				t.Fatalf("giteatest: %v", err)
			}
			cache = filepath.Join(root, ".cache", "e2e")
		}
		bin = filepath.Join(cache, "bin", "gitea")
	}
	static = os.Getenv(StaticEnv)
	if static == "" {
		static = filepath.Join(filepath.Dir(filepath.Dir(bin)), "gitea-static")
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		gittest.RequireOrSkip(t, "", fmt.Sprintf("giteatest: no gitea binary at %s (build it with `%s`, or set %s)", bin, BuildCommand, BinEnv))
	}
	if _, err := os.Stat(filepath.Join(static, "options")); err != nil {
		gittest.RequireOrSkip(t, "", fmt.Sprintf("giteatest: no Gitea options/ in %s (build it with `%s`, or set %s)", static, BuildCommand, StaticEnv))
	}
	if _, err := exec.LookPath("git"); err != nil {
		gittest.RequireOrSkip(t, "", "giteatest: Gitea needs the git CLI (Debian package git)")
	}
	return bin, static
}

// repoRoot is the checkout holding the test's package: the nearest directory
// above the working directory with e2e/build/build.sh.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "e2e", "build", "build.sh")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no e2e/build/build.sh in %s or above: set %s or %s", wd, CacheEnv, BinEnv)
		}
	}
}

// start runs Gitea with its state in dir, waits for its API, and makes the
// admin user and its token. A port taken between choosing and binding it is
// retried.
func start(bin, static, dir string) (*Gitea, error) {
	t0 := time.Now()
	var err error
	for range 5 {
		g := &Gitea{bin: bin, Dir: dir, User: "giteatest", Password: "pw-" + randomHex(12)}
		if err = g.run(static); err == nil {
			g.Started = time.Since(t0)
			return g, nil
		}
		g.Stop()
		if !strings.Contains(err.Error(), "address already in use") {
			return nil, err
		}
	}
	return nil, err
}

func (g *Gitea) run(static string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	g.URL = "http://127.0.0.1:" + strconv.Itoa(port)
	for _, d := range []string{"custom", "data", "home", "tmp", "log"} {
		if err := os.MkdirAll(filepath.Join(g.Dir, d), 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(g.config(), []byte(g.appIni(port, static)), 0o600); err != nil {
		return err
	}
	logFile, err := os.OpenFile(g.logPath(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	g.cmd = exec.Command(g.bin, g.args("web")...)
	g.cmd.Dir, g.cmd.Env = g.Dir, g.env()
	g.cmd.Stdout, g.cmd.Stderr = logFile, logFile
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := g.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", g.bin, err)
	}
	g.exited = make(chan struct{})
	go func() { g.exitErr = g.cmd.Wait(); close(g.exited) }()
	if err := g.waitReady(); err != nil {
		return err
	}
	return g.makeAdmin()
}

func (g *Gitea) config() string  { return filepath.Join(g.Dir, "app.ini") }
func (g *Gitea) logPath() string { return filepath.Join(g.Dir, "gitea.log") }

func (g *Gitea) args(cmd ...string) []string {
	return append(cmd, "--work-path", g.Dir, "--custom-path", filepath.Join(g.Dir, "custom"), "--config", g.config())
}

// env is Gitea's whole environment: no GIT_* or proxy variables of the test's,
// HOME and TMPDIR inside Dir.
func (g *Gitea) env() []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + filepath.Join(g.Dir, "home"),
		"TMPDIR=" + filepath.Join(g.Dir, "tmp"),
		"LC_ALL=C",
	}
	if u := os.Getenv("USER"); u != "" { // Gitea's fallback when the uid has no passwd entry
		env = append(env, "USER="+u)
	}
	return env
}

// appIni is the configuration: everything on 127.0.0.1 and inside Dir.
func (g *Gitea) appIni(port int, static string) string {
	root := ""
	if os.Geteuid() == 0 { // Gitea refuses to run as root without it (CI runs as root)
		root = "I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true"
	}
	jwt := make([]byte, 32)
	_, _ = rand.Read(jwt)
	return fmt.Sprintf(`APP_NAME = giteatest
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
ALLOWED_HOST_LIST = loopback

[oauth2]
JWT_SECRET = %[7]s

[service]
DISABLE_REGISTRATION = true

[mailer]
ENABLED = false

[log]
MODE = console
LEVEL = info
ROOT_PATH = %[1]s/log
`, g.Dir, root, port, static, randomHex(32), randomHex(40), base64.RawURLEncoding.EncodeToString(jwt))
}

// waitReady polls GET /api/v1/version until it answers 200, Gitea exits, or
// startTimeout passes.
func (g *Gitea) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-g.exited:
			return fmt.Errorf("gitea exited (%v) before answering; its log:\n%s", g.exitErr, g.LogTail(30))
		default:
		}
		if resp, err := client.Get(g.URL + "/api/v1/version"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("gitea did not answer %s/api/v1/version within %s; its log:\n%s", g.URL, startTimeout, g.LogTail(30))
}

// makeAdmin creates the admin user with Gitea's CLI (the API needs a user to
// start with) and its token through the API (basic auth).
func (g *Gitea) makeAdmin() error {
	cmd := exec.Command(g.bin, g.args("admin", "user", "create", "--admin", "--username", g.User,
		"--password", g.Password, "--email", g.User+"@example.invalid", "--must-change-password=false")...)
	cmd.Dir, cmd.Env = g.Dir, g.env()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runBounded(cmd, time.Minute); err != nil {
		return fmt.Errorf("gitea admin user create: %w: %s", err, strings.ReplaceAll(out.String(), g.Password, "[password]"))
	}
	var tok struct {
		SHA1 string `json:"sha1"`
	}
	body := map[string]any{"name": "giteatest", "scopes": []string{"all"}}
	if err := g.call(context.Background(), http.MethodPost, "/users/"+g.User+"/tokens", body, &tok, true); err != nil {
		return fmt.Errorf("create the admin's token: %w", err)
	}
	if tok.SHA1 == "" {
		return errors.New("create the admin's token: no sha1 in the answer")
	}
	g.Token = tok.SHA1
	return nil
}

// runBounded runs cmd, killing it after limit.
func runBounded(cmd *exec.Cmd, limit time.Duration) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	timer := time.AfterFunc(limit, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	return cmd.Wait()
}

// Stop ends Gitea: SIGTERM to its process group, SIGKILL after 10 s, then
// SIGKILL to whatever of the group is left (git children). Safe to call more
// than once.
func (g *Gitea) Stop() {
	g.stop.Do(func() {
		if g.cmd == nil || g.cmd.Process == nil {
			return
		}
		pgid := g.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-g.exited:
		case <-time.After(10 * time.Second):
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-g.exited
	})
}

// Running reports whether the gitea process is alive.
func (g *Gitea) Running() bool {
	if g.exited == nil {
		return false
	}
	select {
	case <-g.exited:
		return false
	default:
		return true
	}
}

// Pid is the gitea process's id (its process group's too).
func (g *Gitea) Pid() int { return g.cmd.Process.Pid }

// LogTail returns the last n lines of Gitea's log (its standard output and
// error).
func (g *Gitea) LogTail(n int) string {
	b, _ := os.ReadFile(g.logPath())
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}
