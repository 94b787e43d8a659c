package pin_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/transport"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

// sshAuth is go-git's public key auth from keyFile, checking the host key
// against knownHosts only.
func sshAuth(t *testing.T, user, keyFile, knownHosts string) pin.WriterOption {
	t.Helper()
	return pin.WithAuth(func(string) (transport.AuthMethod, error) {
		keys, err := gitssh.NewPublicKeysFromFile(user, keyFile, "")
		if err != nil {
			return nil, err
		}
		keys.HostKeyCallback, err = gitssh.NewKnownHostsCallback(knownHosts)
		return keys, err
	})
}

// The writer clones, commits and pushes over SSH as over HTTP: the same
// commit, a fast-forward, and nothing pushed when nothing changes. A key the
// server does not know is refused with a message that holds no key.
func TestWriteOverSSH(t *testing.T) {
	f := newFixture(t)
	x := gittest.NewSSH(t, f.s)
	f.url = x.URL(repoName)
	w := f.writer(sshAuth(t, x.User, x.KeyFile, x.KnownHostsFile))
	ctx := context.Background()
	initial := f.s.Head(t, repoName, "main")

	res, err := w.Write(ctx, []pin.Change{f.change("", "web", "web", "1.2.3", "1.3.0")})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pushed || res.Branch != "main" || res.Attempts != 1 || res.Commit != f.s.Head(t, repoName, "main") {
		t.Fatalf("result %+v", res)
	}
	if got := f.s.File(t, repoName, "main", "apps/web/pins.txt"); got != "web=ghcr.io/org/web:1.3.0\n" {
		t.Errorf("pins.txt = %q", got)
	}
	if got := strings.TrimSpace(f.s.Show(t, repoName, res.Commit, "-s", "--format=%an <%ae>|%P")); got != "Pin Bot <pinbot@example.com>|"+initial {
		t.Errorf("commit %q", got)
	}
	if x.Pushes(repoName) != 1 || f.s.Pushes(repoName) != 0 {
		t.Errorf("pushes: %d over SSH, %d over HTTP (commands %q)", x.Pushes(repoName), f.s.Pushes(repoName), x.Commands())
	}
	res, err = w.Write(ctx, []pin.Change{f.change("", "web", "web", "1.2.3", "1.3.0")})
	if err != nil || res.Pushed || x.Pushes(repoName) != 1 {
		t.Errorf("the same pins again: %+v %v, %d pushes", res, err, x.Pushes(repoName))
	}
	f.s.Fsck(t, repoName)
	f.s.NoForcePush(t, repoName, "main")

	// a key that is not authorized
	stranger := filepath.Join(t.TempDir(), "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", stranger).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	tip := f.s.Head(t, repoName, "main")
	commands := len(x.Commands())
	w = f.writer(sshAuth(t, x.User, stranger, x.KnownHostsFile), pin.WithRetry(1, 0))
	_, err = w.Write(ctx, []pin.Change{f.change("", "web", "web", "1.3.0", "1.4.0")})
	t.Logf("stranger's key: %v", err)
	if err == nil || !strings.Contains(err.Error(), f.url) || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Fatalf("a key the server does not know: %v", err)
	}
	b, _ := os.ReadFile(stranger)
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "-----") && strings.Contains(err.Error(), l) {
			t.Errorf("error holds the private key: %v", err)
		}
	}
	if f.s.Head(t, repoName, "main") != tip || len(x.Commands()) != commands {
		t.Errorf("the refused key reached git: commands %q", x.Commands()[commands:])
	}
}
