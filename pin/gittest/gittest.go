// Package gittest serves real git repositories over smart HTTP for tests: `git
// http-backend` (the git CLI's own server) run as CGI behind net/http on
// 127.0.0.1, with optional HTTP Basic authentication, bare repositories made by the
// git CLI with fixed authors and dates (stable hashes), and helpers that act as "a
// person" (commits pushed by the git CLI) and that inspect what clients did: the
// history, the files at a branch tip, the requests served, and whether any update
// of a branch was not a fast-forward (a force push). NewSSH serves the same
// repositories over SSH; NewOpenPGPKey and VerifyCommitSignature make and check
// signed commits.
//
// A test that lacks a tool it needs (git, sshd, gpg) is skipped on a developer's
// machine and fails in CI (RequireOrSkip).
//
// The git CLI runs with HOME set to a temporary directory and no system or global
// configuration, so the machine's git settings do not leak into tests.
package gittest

import (
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testio"
)

// Fixed identities and dates of the commits the helpers make, so that Init's
// hashes do not change between runs.
const (
	InitAuthor   = "gittest <gittest@127.0.0.1>"
	PersonName   = "A Person"
	PersonEmail  = "person@127.0.0.1"
	InitDate     = "2026-01-01T00:00:00Z"
	PersonDate   = "2026-01-02T00:00:00Z"
	DefaultRealm = "gittest"
)

// Option configures a Server.
type Option func(*Server)

// WithBasicAuth requires HTTP Basic credentials on every request (fetches and
// pushes alike); without them, or with others, the answer is 401 with
// `WWW-Authenticate: Basic realm="gittest"`.
func WithBasicAuth(user, pass string) Option {
	return func(s *Server) { s.user, s.pass = user, pass }
}

// Request is one HTTP request the server answered. The Authorization header's
// value is never stored.
type Request struct {
	Method string
	Path   string // e.g. /apps.git/git-receive-pack
	// Service is git-upload-pack (fetch) or git-receive-pack (push), from the
	// path or the info/refs query.
	Service  string
	Status   int
	At       time.Time     // when it arrived
	Duration time.Duration // how long it took to answer (a BeforeReceive hook included)
}

// Server serves the bare repositories under a temporary directory at
// URL/<name>.
type Server struct {
	URL string // http://127.0.0.1:port

	user, pass string
	root       string
	home       string
	gitExec    string
	backend    *cgi.Handler
	srv        *httptest.Server
	stderr     testio.SyncBuffer // git http-backend's standard error

	mu            sync.Mutex
	requests      []Request
	beforeReceive []func()
}

// New starts a Server that is closed when the test ends. Without a git CLI with
// git-http-backend it skips the test, unless CI is set: then it fails it
// (RequireOrSkip).
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		RequireOrSkip(t, "", fmt.Sprintf("gittest: no git CLI (Debian package git): %v", err))
	}
	execPath := strings.TrimSpace(string(out))
	backend := filepath.Join(execPath, "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		RequireOrSkip(t, "", fmt.Sprintf("gittest: no git-http-backend in %s (Debian package git)", execPath))
	}
	s := &Server{root: t.TempDir(), home: t.TempDir(), gitExec: execPath}
	for _, o := range opts {
		o(s)
	}
	s.backend = &cgi.Handler{
		Path: backend,
		Dir:  s.root,
		Env: append(s.gitEnv(),
			"GIT_PROJECT_ROOT="+s.root,
			"GIT_HTTP_EXPORT_ALL=1",
			"REMOTE_USER=gittest",
			"GIT_COMMITTER_NAME=gittest",
			"GIT_COMMITTER_EMAIL=gittest@127.0.0.1",
		),
		InheritEnv: []string{"PATH"},
		Stderr:     &s.stderr,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("gittest: listen: %v", err)
	}
	s.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: s}}
	s.srv.Start()
	s.URL = s.srv.URL
	t.Cleanup(func() {
		s.Close()
		if t.Failed() {
			if e := s.Stderr(); e != "" {
				t.Logf("gittest: git http-backend said:\n%s", e)
			}
		}
	})
	return s
}

// Stderr returns what git http-backend wrote to its standard error (e.g.
// "error: cannot lock ref 'refs/heads/main': is at X but expected Y" for a push
// based on a stale tip). It is logged when the test fails.
func (s *Server) Stderr() string { return s.stderr.String() }

// Close shuts the server down. It is safe to call more than once.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// gitEnv is the environment of every git process: no user or system
// configuration, no prompts.
func (s *Server) gitEnv() []string {
	return []string{
		"HOME=" + s.home,
		"XDG_CONFIG_HOME=" + s.home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=",
		"LC_ALL=C",
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// ServeHTTP checks the credentials, runs a BeforeReceive hook for a push, and
// hands the request to git http-backend.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	req := Request{Method: r.Method, Path: r.URL.Path, Service: r.URL.Query().Get("service"), At: time.Now()}
	if strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
		req.Service = "git-upload-pack"
	} else if strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
		req.Service = "git-receive-pack"
	}
	defer func() {
		req.Status = sw.status
		req.Duration = time.Since(req.At)
		s.mu.Lock()
		s.requests = append(s.requests, req)
		s.mu.Unlock()
	}()
	if s.user != "" || s.pass != "" {
		u, p, ok := r.BasicAuth()
		if !ok || u != s.user || p != s.pass {
			sw.Header().Set("WWW-Authenticate", `Basic realm="`+DefaultRealm+`"`)
			http.Error(sw, "authentication required", http.StatusUnauthorized)
			return
		}
	}
	if r.Method == http.MethodPost && req.Service == "git-receive-pack" {
		s.mu.Lock()
		var hook func()
		if len(s.beforeReceive) > 0 {
			hook = s.beforeReceive[0]
			s.beforeReceive = s.beforeReceive[1:]
		}
		s.mu.Unlock()
		if hook != nil {
			// In a goroutine of its own, so that a hook that fails its test
			// (t.Fatal ends the goroutine it runs in) still lets the push be
			// served.
			done := make(chan struct{})
			go func() {
				defer close(done)
				hook()
			}()
			<-done
		}
	}
	s.backend.ServeHTTP(sw, r)
}

// BeforeReceive makes the server call fn once, when the next push
// (git-receive-pack POST: the client has read the branch tips and sends its
// update) arrives, before serving it: what fn does (e.g. Commit, "a person's"
// push) lands between that client's fetch and its push. Several calls queue
// hooks for the following pushes, in order. Pushes made by Commit do not go
// through HTTP and do not take a hook.
func (s *Server) BeforeReceive(fn func()) {
	s.mu.Lock()
	s.beforeReceive = append(s.beforeReceive, fn)
	s.mu.Unlock()
}

// Requests returns the requests answered so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Pushes counts the push requests (git-receive-pack POSTs) that reached the git
// backend for repository name (authenticated; any outcome).
func (s *Server) Pushes(name string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Method == http.MethodPost && r.Service == "git-receive-pack" && r.Path == "/"+name+"/git-receive-pack" && r.Status != http.StatusUnauthorized {
			n++
		}
	}
	return n
}

// RepoURL is the URL clients use for repository name.
func (s *Server) RepoURL(name string) string { return s.URL + "/" + name }

// Dir is the bare repository's directory.
func (s *Server) Dir(name string) string { return filepath.Join(s.root, filepath.FromSlash(name)) }
