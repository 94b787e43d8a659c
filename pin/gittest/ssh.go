package gittest

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testio"
)

// SSHD is the OpenSSH server NewSSH runs (Debian package openssh-server).
const SSHD = "/usr/sbin/sshd"

var sshd = SSHD // a test of NewSSH's skip sets another

// RequireSSHDEnv names the variable that, set to 1 (as CI does), makes NewSSH
// fail a test instead of skipping it when sshd is missing. A set CI variable
// does the same.
const RequireSSHDEnv = "IMAGE_RESOLVER_REQUIRE_SSHD"

// SSH serves a Server's bare repositories over SSH: an unprivileged OpenSSH
// server of the test's own on a loopback port, with a host key of its own and
// one authorized client key. The key is forced to a command that only runs
// git-upload-pack or git-receive-pack on a repository of the Server, so a
// client reaches nothing else.
type SSH struct {
	// User is the account clients log in as: the user running the test (sshd
	// without privileges can only authenticate that user).
	User string
	// Addr is 127.0.0.1:port.
	Addr string
	// KeyFile is the client's private key (ed25519, OpenSSH format, no
	// passphrase); its public half is the one authorized key.
	KeyFile string
	// KnownHostsFile holds the one line "[127.0.0.1]:port <host key>".
	KnownHostsFile string
	// HostKey is the server's public host key line ("ssh-ed25519 AAAA...").
	HostKey string

	s      *Server
	dir    string
	log    string // one line per command run: "<service> <path>"
	cmd    *exec.Cmd
	exited chan error
	out    testio.SyncBuffer // sshd's log (-e)
	once   sync.Once
}

// NewSSH starts an SSH server for s's repositories, stopped when the test ends.
// Without sshd it skips the test, unless RequireSSHDEnv is 1 or CI is set: then
// it fails it (RequireOrSkip).
func NewSSH(t testing.TB, s *Server) *SSH {
	t.Helper()
	if _, err := os.Stat(sshd); err != nil {
		RequireOrSkip(t, RequireSSHDEnv, fmt.Sprintf("gittest: no %s (Debian package openssh-server)", sshd))
	}
	keygen, err := exec.LookPath("ssh-keygen")
	if err != nil {
		t.Fatalf("gittest: sshd without ssh-keygen: %v", err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatalf("gittest: current user: %v", err)
	}
	if os.Geteuid() == 0 {
		// sshd started by root wants its privilege separation directory (made
		// by systemd's unit, which does not run here).
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Fatalf("gittest: %v", err)
		}
	}
	x := &SSH{User: u.Username, s: s, dir: t.TempDir()}
	x.log = filepath.Join(x.dir, "commands.log")
	hostKey := filepath.Join(x.dir, "host_ed25519")
	x.KeyFile = filepath.Join(x.dir, "client_ed25519")
	for _, k := range []string{hostKey, x.KeyFile} {
		if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", "gittest", "-f", k).CombinedOutput(); err != nil {
			t.Fatalf("gittest: ssh-keygen: %v: %s", err, out)
		}
	}
	pub, err := os.ReadFile(x.KeyFile + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	hostPub, err := os.ReadFile(hostKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	x.HostKey = publicKeyOnly(string(hostPub))
	serve := filepath.Join(x.dir, "serve")
	if err := os.WriteFile(serve, []byte(x.serveScript()), 0o755); err != nil {
		t.Fatal(err)
	}
	authorized := fmt.Sprintf("command=\"%s\",no-port-forwarding,no-X11-forwarding,no-agent-forwarding,no-pty %s\n", serve, publicKeyOnly(string(pub)))
	if err := os.WriteFile(filepath.Join(x.dir, "authorized_keys"), []byte(authorized), 0o600); err != nil {
		t.Fatal(err)
	}

	// a free port, then sshd on it; another process may take the port in
	// between, so a few tries
	var last error
	for try := 0; try < 5; try++ {
		if last = x.start(t, hostKey); last == nil {
			break
		}
	}
	if last != nil {
		t.Fatalf("gittest: sshd: %v\n%s", last, x.out.String())
	}
	t.Cleanup(func() {
		x.Close()
		if t.Failed() {
			t.Logf("gittest: sshd said:\n%s", x.out.String())
		}
	})
	x.KnownHostsFile = filepath.Join(x.dir, "known_hosts")
	if err := os.WriteFile(x.KnownHostsFile, []byte(x.KnownHostsLine(x.HostKey)), 0o644); err != nil {
		t.Fatal(err)
	}
	return x
}

// publicKeyOnly returns "type base64" of an OpenSSH public key line.
func publicKeyOnly(line string) string {
	f := strings.Fields(line)
	if len(f) < 2 {
		return strings.TrimSpace(line)
	}
	return f[0] + " " + f[1]
}

// KnownHostsLine is a known_hosts line giving this server's address the
// public key key ("ssh-ed25519 AAAA..."): with x.HostKey the right one, with
// another one a known_hosts that does not match.
func (x *SSH) KnownHostsLine(key string) string {
	host, port, _ := net.SplitHostPort(x.Addr)
	return fmt.Sprintf("[%s]:%s %s\n", host, port, key)
}

// OtherHostKey generates a fresh ed25519 host public key ("ssh-ed25519
// AAAA...") that is not the server's.
func (x *SSH) OtherHostKey(t testing.TB) string {
	t.Helper()
	k := filepath.Join(t.TempDir(), "other_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "other", "-f", k).CombinedOutput(); err != nil {
		t.Fatalf("gittest: ssh-keygen: %v: %s", err, out)
	}
	b, err := os.ReadFile(k + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return publicKeyOnly(string(b))
}

// KeyMaterial returns the lines of a private key file that carry the key, for
// a test to check that none of them is in a message.
func KeyMaterial(t testing.TB, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "-----") {
			out = append(out, l)
		}
	}
	return out
}

// serveScript is the authorized key's forced command: it runs git-upload-pack
// or git-receive-pack on a repository under the Server's root, named by the
// client's command (`git-upload-pack '/apps.git'`), and refuses anything else.
func (x *SSH) serveScript() string {
	var env strings.Builder
	for _, e := range append([]string{"PATH=" + os.Getenv("PATH")}, x.s.gitEnv()...) {
		k, v, _ := strings.Cut(e, "=")
		fmt.Fprintf(&env, "export %s=%s\n", k, shellQuote(v))
	}
	return `#!/bin/sh
set -f
` + env.String() + `root=` + shellQuote(x.s.root) + `
log=` + shellQuote(x.log) + `
cmd=$SSH_ORIGINAL_COMMAND
case "$cmd" in
git-upload-pack\ *) svc=git-upload-pack ;;
git-receive-pack\ *) svc=git-receive-pack ;;
*) echo "gittest: only git-upload-pack and git-receive-pack are served, not: $cmd" >&2; exit 1 ;;
esac
path=${cmd#"$svc "}
path=${path#\'}
path=${path%\'}
path=${path#/}
case "$path" in
''|*..*|*[!A-Za-z0-9._/-]*) echo "gittest: no repository $path" >&2; exit 1 ;;
esac
[ -d "$root/$path" ] || { echo "gittest: no repository $path" >&2; exit 1; }
echo "$svc /$path" >> "$log"
exec "$svc" "$root/$path"
`
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// start runs sshd on a free loopback port and waits for its banner.
func (x *SSH) start(t testing.TB, hostKey string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	x.Addr = ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(x.Addr)
	conf := filepath.Join(x.dir, "sshd_config")
	cfg := strings.Join([]string{
		"Port " + port,
		"ListenAddress 127.0.0.1",
		"HostKey " + hostKey,
		"PidFile " + filepath.Join(x.dir, "sshd.pid"),
		"AuthorizedKeysFile " + filepath.Join(x.dir, "authorized_keys"),
		"AllowUsers " + x.User,
		"PermitRootLogin forced-commands-only",
		"StrictModes no",
		"UsePAM no",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"HostbasedAuthentication no",
		"AllowTcpForwarding no",
		"X11Forwarding no",
		"PermitTTY no",
		"PrintMotd no",
		"LogLevel VERBOSE",
		"",
	}, "\n")
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		return err
	}
	cmd := exec.Command(sshd, "-D", "-e", "-f", conf)
	cmd.Stdout, cmd.Stderr = &x.out, &x.out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", x.Addr, time.Second); err == nil {
			c.SetDeadline(time.Now().Add(5 * time.Second))
			banner, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(banner, "SSH-2.0-") {
				x.cmd, x.exited = cmd, exited
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	<-exited
	return fmt.Errorf("no SSH banner on %s in 10s", x.Addr)
}

// Close stops sshd. It is safe to call more than once.
func (x *SSH) Close() {
	x.once.Do(func() {
		if x.cmd != nil {
			x.cmd.Process.Kill()
			<-x.exited
		}
	})
}

// URL is the ssh:// URL of repository name (ssh://user@127.0.0.1:port/name).
func (x *SSH) URL(name string) string { return "ssh://" + x.User + "@" + x.Addr + "/" + name }

// Commands returns what clients ran, in order: "git-upload-pack /apps.git"
// (a fetch), "git-receive-pack /apps.git" (a push).
func (x *SSH) Commands() []string {
	b, err := os.ReadFile(x.log)
	if err != nil {
		return nil
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\n")
}

// Pushes counts the git-receive-pack sessions on repository name.
func (x *SSH) Pushes(name string) int {
	n := 0
	for _, c := range x.Commands() {
		if c == "git-receive-pack /"+name {
			n++
		}
	}
	return n
}

// Log returns sshd's log.
func (x *SSH) Log() string { return x.out.String() }
