package gittest

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// recorder is a testing.TB that records failures instead of failing the test.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

// run calls f with the recorder in a goroutine of its own (Fatalf ends it).
func (r *recorder) run(f func(tb testing.TB)) []string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errors...)
}

// cli runs the git CLI in dir with the server's environment.
func cli(t *testing.T, s *Server, dir string, args ...string) string {
	t.Helper()
	out, err := s.run(dir, identityEnv("cli", "cli@127.0.0.1", PersonDate), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestServer(t *testing.T) {
	s := New(t, WithBasicAuth("alice", "s3cret"))
	url := s.Init(t, "apps.git", map[string]string{"a/one.txt": "1\n", "two.txt": "2\n"})
	if url != s.URL+"/apps.git" {
		t.Fatalf("url %s", url)
	}
	// stable hashes: same files, same initial commit
	s2 := New(t)
	s2.Init(t, "apps.git", map[string]string{"a/one.txt": "1\n", "two.txt": "2\n"})
	if h1, h2 := s.Head(t, "apps.git", "main"), s2.Head(t, "apps.git", "main"); h1 != h2 || h1 == "" {
		t.Errorf("initial commits differ: %s, %s", h1, h2)
	}

	// without credentials: 401 with a Basic challenge
	resp, err := http.Get(url + "/info/refs?service=git-upload-pack")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
		t.Errorf("anonymous: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	work := filepath.Join(t.TempDir(), "w")
	if _, err := s.run(t.TempDir(), nil, "clone", "-q", strings.Replace(url, "http://", "http://alice:wrong@", 1), work); err == nil {
		t.Errorf("clone with a wrong password worked")
	}

	// clone and push over HTTP with credentials; a hook runs before the push
	authed := strings.Replace(url, "http://", "http://alice:s3cret@", 1)
	cli(t, s, t.TempDir(), "clone", "-q", authed, work)
	if got := strings.TrimSpace(cli(t, s, work, "show", "HEAD:a/one.txt")); got != "1" {
		t.Errorf("a/one.txt = %q", got)
	}
	hooked := false
	s.BeforeReceive(func() {
		hooked = true
		s.Commit(t, "apps.git", "main", map[string]string{"person.txt": "p\n"}, "a person's commit")
	})
	cli(t, s, work, "commit", "-q", "--allow-empty", "-m", "over http")
	if _, err := s.run(work, nil, "push", "-q", "origin", "main"); err == nil {
		t.Errorf("a push based on a stale tip was accepted")
	}
	if !hooked {
		t.Errorf("BeforeReceive hook not called")
	}
	cli(t, s, work, "pull", "-q", "--rebase", "origin", "main")
	cli(t, s, work, "push", "-q", "origin", "main")
	if got := s.Log(t, "apps.git", "main"); strings.Join(got, "|") != "over http|a person's commit|initial" {
		t.Errorf("log %q", got)
	}
	if s.Pushes("apps.git") != 2 {
		t.Errorf("pushes %d, want 2 (the stale one and the rebased one)", s.Pushes("apps.git"))
	}
	if got := s.File(t, "apps.git", "main", "person.txt"); got != "p\n" {
		t.Errorf("person.txt %q", got)
	}
	s.Fsck(t, "apps.git")
	s.NoForcePush(t, "apps.git", "main")

	// a force push is caught
	cli(t, s, work, "commit", "-q", "--amend", "--allow-empty", "-m", "rewritten")
	cli(t, s, work, "push", "-q", "--force", "origin", "main")
	errs := (&recorder{TB: t}).run(func(tb testing.TB) { s.NoForcePush(tb, "apps.git", "main") })
	if len(errs) != 1 || !strings.Contains(errs[0], "force push") {
		t.Errorf("NoForcePush after a force push: %q", errs)
	}

	// a deleted and re-created branch is caught
	s.Branch(t, "apps.git", "pins", "main")
	s.NoForcePush(t, "apps.git", "pins")
	s.Git(t, "apps.git", "update-ref", "-d", "refs/heads/pins")
	s.Branch(t, "apps.git", "pins", "main~1")
	errs = (&recorder{TB: t}).run(func(tb testing.TB) { s.NoForcePush(tb, "apps.git", "pins") })
	if len(errs) == 0 {
		t.Errorf("NoForcePush missed a deleted branch")
	}
}

func TestMain(m *testing.M) {
	if _, err := exec.LookPath("git"); err != nil {
		fmt.Println("skip: no git")
		return
	}
	m.Run()
}
