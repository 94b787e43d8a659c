package compose

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

// sshChange pins web in apps/web's pins file of the repository at url, from
// tag old ("" for none).
func sshChange(t *testing.T, url, old, tag string) pin.Change {
	target, err := pin.ParseTarget("", nil)
	if err != nil {
		t.Fatal(err)
	}
	base := ""
	if old != "" {
		base = "ghcr.io/org/web:" + old
	}
	return pin.Change{RepoURL: url, Edit: pin.Edit{
		App: "web", Dir: "apps/web", Target: target,
		Pins: []pin.Pin{{Alias: "web", Image: "ghcr.io/org/web", Reference: "ghcr.io/org/web:" + tag, Tag: tag, Policy: "semver"}},
		Base: map[string]string{"web": base},
	}}
}

// The daemon's writer, built from the configuration, clones, commits and pushes
// over SSH to a real OpenSSH server with the key and known_hosts of an ssh
// credential; a known_hosts with another host key stops it before anything is
// pushed, with a message that says so and holds no key; the files are read at
// each push, so fixing known_hosts is enough for the next one.
func TestPinWriterOverSSH(t *testing.T) {
	s := gittest.New(t)
	s.Init(t, "apps.git", map[string]string{"apps/web/kustomization.yaml": "resources: []\n"})
	x := gittest.NewSSH(t, s)
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, []byte(x.KnownHostsLine(x.OtherHostKey(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	url := x.URL("apps.git")
	prefix := strings.TrimSuffix(url, "apps.git")
	c := config.Config{Git: config.GitConfig{
		Author:      "SSH Bot <ssh-bot@example.com>",
		Credentials: []config.GitCredential{{Prefix: prefix, SSHKeyFile: x.KeyFile, KnownHostsFile: kh}},
	}}
	if err := c.Git.Validate(); err != nil {
		t.Fatal(err)
	}
	w := NewPinWriter(c, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), pin.WithRetry(2, time.Millisecond))
	ctx := context.Background()
	initial := s.Head(t, "apps.git", "main")

	// another host key in known_hosts
	t0 := time.Now()
	_, err := w.Write(ctx, []pin.Change{sshChange(t, url, "", "1.0.0")})
	t.Logf("refused in %v", time.Since(t0))
	if err == nil {
		t.Fatal("pushed to a server whose host key is not in known_hosts")
	}
	for _, want := range []string{"host key verification failed", "127.0.0.1", "ssh-ed25519", "SHA256:", "git.credentials[0].knownHostsFile", kh, "key mismatch"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	for _, m := range gittest.KeyMaterial(t, x.KeyFile) {
		if strings.Contains(err.Error(), m) {
			t.Errorf("error %q holds the private key", err)
		}
	}
	if len(x.Commands()) != 0 || s.Head(t, "apps.git", "main") != initial {
		t.Errorf("the server was used: commands %q, tip %s", x.Commands(), s.Head(t, "apps.git", "main"))
	}

	// the right known_hosts, read at the next push: clone, commit, push
	if err := os.WriteFile(kh, []byte(x.KnownHostsLine(x.HostKey)), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := w.Write(ctx, []pin.Change{sshChange(t, url, "", "1.0.0")})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pushed || res.Commit != s.Head(t, "apps.git", "main") || res.Attempts != 1 {
		t.Fatalf("result %+v, tip %s", res, s.Head(t, "apps.git", "main"))
	}
	if got := s.File(t, "apps.git", "main", "apps/web/"+pin.PinsFile); !strings.Contains(got, "ghcr.io/org/web:1.0.0") {
		t.Errorf("pins file:\n%s", got)
	}
	if got := s.Show(t, "apps.git", res.Commit, "-s", "--format=%an <%ae>|%P"); strings.TrimSpace(got) != "SSH Bot <ssh-bot@example.com>|"+initial {
		t.Errorf("commit %q", got)
	}
	if x.Pushes("apps.git") != 1 {
		t.Errorf("commands over SSH: %q", x.Commands())
	}
	s.Fsck(t, "apps.git")
	s.NoForcePush(t, "apps.git", "main")

	// a second pin on top of the first: fetch and fast-forward over SSH
	res, err = w.Write(ctx, []pin.Change{sshChange(t, url, "1.0.0", "1.1.0")})
	if err != nil || !res.Pushed {
		t.Fatalf("second write: %+v %v", res, err)
	}
	if n := len(s.Log(t, "apps.git", "main")); n != 3 || x.Pushes("apps.git") != 2 {
		t.Errorf("%d commits, %d pushes", n, x.Pushes("apps.git"))
	}
	s.NoForcePush(t, "apps.git", "main")
}
