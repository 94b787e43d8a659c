package gittest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// sshGit runs the git CLI as a client of x with ssh options of its own (key,
// known_hosts, strict host key checking) and returns its output and error.
func sshGit(t *testing.T, x *SSH, knownHosts, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(append([]string{"PATH=" + os.Getenv("PATH")}, x.s.gitEnv()...),
		"GIT_SSH_COMMAND=ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile="+knownHosts+" -i "+x.KeyFile)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestSSHServesTheRepositoriesToTheGitCLI(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("no ssh client")
	}
	s := New(t)
	s.Init(t, "apps.git", map[string]string{"a.txt": "a\n"})
	x := NewSSH(t, s)
	work := filepath.Join(t.TempDir(), "w")

	if out, err := sshGit(t, x, x.KnownHostsFile, t.TempDir(), "clone", "-q", x.URL("apps.git"), work); err != nil {
		t.Fatalf("clone: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(work, "b.txt"), []byte("b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"add", "b.txt"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "b"}, {"push", "-q", "origin", "main"}} {
		if out, err := sshGit(t, x, x.KnownHostsFile, work, args...); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if got := s.File(t, "apps.git", "main", "b.txt"); got != "b\n" {
		t.Errorf("b.txt after the push over SSH: %q", got)
	}
	if got, want := x.Commands(), []string{"git-upload-pack /apps.git", "git-receive-pack /apps.git"}; !slices.Equal(got, want) {
		t.Errorf("commands %q, want %q", got, want)
	}
	if x.Pushes("apps.git") != 1 {
		t.Errorf("pushes %d", x.Pushes("apps.git"))
	}

	// the forced command: no shell, no repository outside the root
	cmd := exec.Command("ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "UserKnownHostsFile="+x.KnownHostsFile,
		"-i", x.KeyFile, "-p", strings.Split(x.Addr, ":")[1], x.User+"@127.0.0.1", "id")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "only git-upload-pack and git-receive-pack") {
		t.Errorf("a shell command was not refused: %v\n%s", err, out)
	}
	if out, err := sshGit(t, x, x.KnownHostsFile, t.TempDir(), "clone", "-q", x.URL("../etc"), "e"); err == nil {
		t.Errorf("a path outside the root was served:\n%s", out)
	}

	// another host key in known_hosts: the client refuses the server
	other := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(other, []byte(x.KnownHostsLine(x.OtherHostKey(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := sshGit(t, x, other, t.TempDir(), "clone", "-q", x.URL("apps.git"), "c")
	if err == nil || !strings.Contains(out, "HOST IDENTIFICATION HAS CHANGED") {
		t.Errorf("clone with another host key: %v\n%s", err, out)
	}
}

// outcomeTB records whether a test was skipped or failed, and ends its
// goroutine as testing.T does.
type outcomeTB struct {
	testing.TB
	skipped, failed bool
}

func (o *outcomeTB) Helper() {}
func (o *outcomeTB) Skipf(string, ...any) {
	o.skipped = true
	runtime.Goexit()
}
func (o *outcomeTB) Fatalf(string, ...any) {
	o.failed = true
	runtime.Goexit()
}

// Without sshd, a test is skipped on a developer's machine and fails in CI.
func TestNewSSHWithoutSSHD(t *testing.T) {
	old := sshd
	sshd = filepath.Join(t.TempDir(), "no-sshd")
	t.Cleanup(func() { sshd = old })
	for _, tc := range []struct {
		require, ci string
		skip        bool
	}{{"", "", true}, {"1", "", false}, {"", "true", false}, {"0", "", true}} {
		t.Setenv(RequireSSHDEnv, tc.require)
		t.Setenv("CI", tc.ci)
		o := &outcomeTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			NewSSH(o, nil)
		}()
		<-done
		if o.skipped != tc.skip || o.failed == tc.skip {
			t.Errorf("%s=%q CI=%q: skipped %v, failed %v", RequireSSHDEnv, tc.require, tc.ci, o.skipped, o.failed)
		}
	}
}
