package gittest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The repositories a Server serves: setting them up and reading them back, with
// the git CLI.

// run runs git with the server's environment (plus env) in dir.
func (s *Server) run(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(append([]string{"PATH=" + os.Getenv("PATH")}, s.gitEnv()...), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Git runs git in repository name's bare directory and returns its output.
func (s *Server) Git(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := s.run(s.Dir(name), nil, args...)
	if err != nil {
		t.Fatalf("gittest: %v", err)
	}
	return out
}

func identityEnv(name, email, date string) []string {
	return []string{
		"GIT_AUTHOR_NAME=" + name, "GIT_AUTHOR_EMAIL=" + email, "GIT_AUTHOR_DATE=" + date,
		"GIT_COMMITTER_NAME=" + name, "GIT_COMMITTER_EMAIL=" + email, "GIT_COMMITTER_DATE=" + date,
	}
}

// writeFiles writes files (slash-separated paths) under dir.
func writeFiles(dir string, files map[string]string) error {
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Init creates the bare repository name (e.g. "apps.git") with one commit on
// main holding files (path -> content), made with a fixed author and date so its
// hash is stable, and returns the repository's URL. Every ref update of the
// repository is logged (core.logAllRefUpdates=always), for NoForcePush.
func (s *Server) Init(t testing.TB, name string, files map[string]string) string {
	t.Helper()
	bare := s.Dir(name)
	work := t.TempDir()
	steps := []struct {
		dir  string
		env  []string
		args []string
	}{
		{s.root, nil, []string{"init", "-q", "--bare", "-b", "main", bare}},
		{bare, nil, []string{"config", "http.receivepack", "true"}},
		{bare, nil, []string{"config", "core.logAllRefUpdates", "always"}},
		{bare, nil, []string{"config", "receive.autogc", "false"}}, // no gc process after every push
		{work, nil, []string{"init", "-q", "-b", "main"}},
	}
	for _, st := range steps {
		if _, err := s.run(st.dir, st.env, st.args...); err != nil {
			t.Fatalf("gittest: init %s: %v", name, err)
		}
	}
	// every ref update committed, deletions included (a deleted branch's reflog
	// goes with it), for NoForcePush
	hook := "#!/bin/sh\n[ \"$1\" = committed ] || exit 0\ncat >> '" + filepath.Join(bare, refUpdatesLog) + "'\n"
	if err := os.WriteFile(filepath.Join(bare, "hooks", "reference-transaction"), []byte(hook), 0o755); err != nil {
		t.Fatalf("gittest: init %s: %v", name, err)
	}
	if err := writeFiles(work, files); err != nil {
		t.Fatalf("gittest: init %s: %v", name, err)
	}
	env := identityEnv("gittest", "gittest@127.0.0.1", InitDate)
	for _, args := range [][]string{
		{"add", "-A"},
		{"commit", "-q", "--allow-empty", "-m", "initial"},
		{"push", "-q", bare, "main:refs/heads/main"},
	} {
		if _, err := s.run(work, env, args...); err != nil {
			t.Fatalf("gittest: init %s: %v", name, err)
		}
	}
	return s.RepoURL(name)
}

// Commit is "a person's" commit: files (path -> content; "" deletes the file)
// written on branch through a temporary clone, committed by PersonName with msg
// and pushed with the git CLI (straight to the bare repository: no HTTP, no
// BeforeReceive hook). It returns the new commit's hash. Safe to call from a
// BeforeReceive hook.
func (s *Server) Commit(t testing.TB, name, branch string, files map[string]string, msg string) string {
	t.Helper()
	h, err := s.commit(name, branch, files, msg)
	if err != nil {
		t.Fatalf("gittest: commit on %s %s: %v", name, branch, err)
	}
	return h
}

func (s *Server) commit(name, branch string, files map[string]string, msg string) (string, error) {
	work, err := os.MkdirTemp(s.home, "person-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	if _, err := s.run(s.home, nil, "clone", "-q", "--branch", branch, s.Dir(name), work); err != nil {
		return "", err
	}
	write := map[string]string{}
	for p, c := range files {
		if c == "" {
			if err := os.Remove(filepath.Join(work, filepath.FromSlash(p))); err != nil {
				return "", err
			}
			continue
		}
		write[p] = c
	}
	if err := writeFiles(work, write); err != nil {
		return "", err
	}
	env := identityEnv(PersonName, PersonEmail, PersonDate)
	for _, args := range [][]string{
		{"add", "-A"},
		{"commit", "-q", "--allow-empty", "-m", msg},
		{"push", "-q", "origin", "HEAD:refs/heads/" + branch},
	} {
		if _, err := s.run(work, env, args...); err != nil {
			return "", err
		}
	}
	out, err := s.run(work, nil, "rev-parse", "HEAD")
	return strings.TrimSpace(out), err
}

// Branch creates branch at from's tip.
func (s *Server) Branch(t testing.TB, name, branch, from string) {
	t.Helper()
	s.Git(t, name, "branch", branch, from)
}

// SetHead makes branch the repository's default branch (its HEAD).
func (s *Server) SetHead(t testing.TB, name, branch string) {
	t.Helper()
	s.Git(t, name, "symbolic-ref", "HEAD", "refs/heads/"+branch)
}

// Head returns branch's tip, "" when the branch does not exist.
func (s *Server) Head(t testing.TB, name, branch string) string {
	t.Helper()
	out, err := s.run(s.Dir(name), nil, "rev-parse", "-q", "--verify", "refs/heads/"+branch)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// Branches lists the repository's branches, sorted.
func (s *Server) Branches(t testing.TB, name string) []string {
	t.Helper()
	out := strings.Fields(s.Git(t, name, "for-each-ref", "--format=%(refname:short)", "refs/heads/"))
	sort.Strings(out)
	return out
}

// File returns path's content at branch's tip; it fails the test when the file
// does not exist.
func (s *Server) File(t testing.TB, name, branch, path string) string {
	t.Helper()
	return s.Git(t, name, "show", "refs/heads/"+branch+":"+path)
}

// HasFile says whether path exists at branch's tip.
func (s *Server) HasFile(t testing.TB, name, branch, path string) bool {
	t.Helper()
	_, err := s.run(s.Dir(name), nil, "cat-file", "-e", "refs/heads/"+branch+":"+path)
	return err == nil
}

// Log returns the subjects of branch's commits, newest first.
func (s *Server) Log(t testing.TB, name, branch string) []string {
	t.Helper()
	out := strings.TrimRight(s.Git(t, name, "log", "--format=%s", "refs/heads/"+branch), "\n")
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// Show returns git show's output for rev (e.g. the tip's author, date and
// message: s.Show(t, name, "main", "--format=%an <%ae>%n%B", "-s")).
func (s *Server) Show(t testing.TB, name, rev string, args ...string) string {
	t.Helper()
	return s.Git(t, name, append(append([]string{"show"}, args...), rev)...)
}

// Merges counts the merge commits in branch's history.
func (s *Server) Merges(t testing.TB, name, branch string) int {
	t.Helper()
	out := strings.TrimSpace(s.Git(t, name, "rev-list", "--count", "--min-parents=2", "refs/heads/"+branch))
	var n int
	fmt.Sscan(out, &n)
	return n
}

// Fsck checks the repository's objects (git fsck --strict): trees written by a
// client must be well formed (entries sorted, modes valid).
func (s *Server) Fsck(t testing.TB, name string) {
	t.Helper()
	if _, err := s.run(s.Dir(name), nil, "fsck", "--strict", "--no-progress", "--no-dangling"); err != nil {
		t.Errorf("gittest: %s: %v", name, err)
	}
}

// RefUpdate is one line of a branch's reflog: Old -> New.
type RefUpdate struct {
	Old, New string
	Message  string
}

// Reflog returns every update of branch, oldest first (the repository logs them
// all: core.logAllRefUpdates=always).
func (s *Server) Reflog(t testing.TB, name, branch string) []RefUpdate {
	t.Helper()
	f, err := os.Open(filepath.Join(s.Dir(name), "logs", "refs", "heads", filepath.FromSlash(branch)))
	if err != nil {
		t.Fatalf("gittest: reflog of %s %s: %v", name, branch, err)
	}
	defer f.Close()
	var out []RefUpdate
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		head, msg, _ := strings.Cut(line, "\t")
		fields := strings.Fields(head)
		if len(fields) < 2 {
			t.Fatalf("gittest: reflog of %s %s: bad line %q", name, branch, line)
		}
		out = append(out, RefUpdate{Old: fields[0], New: fields[1], Message: msg})
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("gittest: reflog of %s %s: %v", name, branch, err)
	}
	return out
}

// refUpdatesLog is the file in a bare repository where its reference-transaction
// hook appends every committed ref update ("<old> <new> <ref>").
const refUpdatesLog = "ref-updates.log"

// NoForcePush fails the test unless every update of branch was a fast-forward:
// each update's old value (in the branch's reflog) is the previous update's new
// value and an ancestor of its own new value (only the first update may create
// the branch), and the branch was never deleted (the repository's
// reference-transaction hook logs deletions, which take the reflog with them).
func (s *Server) NoForcePush(t testing.TB, name, branch string) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(s.Dir(name), refUpdatesLog)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 3 && f[2] == "refs/heads/"+branch && strings.Trim(f[1], "0") == "" {
				t.Errorf("gittest: %s %s: the branch was deleted (%s)", name, branch, line)
			}
		}
	}
	log := s.Reflog(t, name, branch)
	if len(log) == 0 {
		t.Fatalf("gittest: %s %s: empty reflog: nothing to check", name, branch)
	}
	zero := strings.Repeat("0", len(log[0].Old))
	prev := ""
	for i, u := range log {
		switch {
		case u.New == zero:
			t.Errorf("gittest: %s %s: update %d deleted the branch (%s)", name, branch, i, u.Message)
		case u.Old == zero:
			if i != 0 {
				t.Errorf("gittest: %s %s: update %d re-created the branch at %s (%s)", name, branch, i, u.New, u.Message)
			}
		default:
			if prev != "" && u.Old != prev {
				t.Errorf("gittest: %s %s: update %d moved the branch from %s, but it was at %s", name, branch, i, u.Old, prev)
			}
			if _, err := s.run(s.Dir(name), nil, "merge-base", "--is-ancestor", u.Old, u.New); err != nil {
				t.Errorf("gittest: %s %s: update %d (%s -> %s, %s) is not a fast-forward: a force push", name, branch, i, u.Old, u.New, u.Message)
			}
		}
		prev = u.New
	}
	if tip := s.Head(t, name, branch); tip != prev {
		t.Errorf("gittest: %s %s: tip %s is not the reflog's last value %s", name, branch, tip, prev)
	}
}
