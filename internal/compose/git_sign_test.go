package compose

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

// The daemon's writer, built from the configuration, signs each pin commit with
// the key of signingKeyFile (decrypted with signingKeyPassphraseFile) and pushes
// it to a real git server: the commit read back from the bare repository
// verifies with go-git and with git verify-commit (a subtest skipped without
// gpg, failed in CI). The key is read at each commit: a rotated key signs the
// next one, and a key that has become unusable fails the write, with nothing
// pushed and no key material in the error.
func TestPinWriterSignsCommits(t *testing.T) {
	s := gittest.New(t, gittest.WithBasicAuth("pinbot", "s3cret-token"))
	url := s.Init(t, "apps.git", map[string]string{"apps/web/kustomization.yaml": "resources: []\n"})
	k := gittest.NewOpenPGPKey(t, "", "correct horse "+t.Name())
	dir := t.TempDir()
	keyFile, passFile, tokenFile := filepath.Join(dir, "key.asc"), filepath.Join(dir, "pass"), filepath.Join(dir, "token")
	put := func(p, content string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	put(keyFile, k.Locked)
	put(passFile, k.Passphrase+"\n")
	put(tokenFile, "s3cret-token\n")
	c := config.DefaultConfig()
	c.Git = config.GitConfig{
		Author:                   "Pin Bot <pinbot@example.com>",
		Credentials:              []config.GitCredential{{Prefix: strings.TrimSuffix(url, "apps.git"), Username: "pinbot", PasswordFile: tokenFile}},
		SigningKeyFile:           keyFile,
		SigningKeyPassphraseFile: passFile,
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	w := NewPinWriter(c, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), pin.WithRetry(2, time.Millisecond))
	ctx := context.Background()
	repo, err := git.PlainOpen(s.Dir("apps.git"))
	if err != nil {
		t.Fatal(err)
	}
	verify := func(commit, public string) error {
		t.Helper()
		co, err := repo.CommitObject(plumbing.NewHash(commit))
		if err != nil {
			t.Fatal(err)
		}
		_, err = co.Verify(public)
		return err
	}

	res, err := w.Write(ctx, []pin.Change{sshChange(t, url, "", "1.0.0")})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pushed || res.Commit != s.Head(t, "apps.git", "main") {
		t.Fatalf("result %+v", res)
	}
	if err := verify(res.Commit, k.Public); err != nil {
		t.Errorf("go-git: pin commit does not verify: %v", err)
	}
	t.Run("git verify-commit", func(t *testing.T) {
		gittest.VerifyCommitSignature(t, s.Dir("apps.git"), res.Commit, k.Public)
	})
	s.Fsck(t, "apps.git")

	// a rotated key (unprotected now), read at the next commit
	k2 := gittest.NewOpenPGPKey(t, "", "correct horse "+t.Name())
	put(keyFile, k2.Private)
	res, err = w.Write(ctx, []pin.Change{sshChange(t, url, "1.0.0", "1.1.0")})
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(res.Commit, k2.Public); err != nil {
		t.Errorf("go-git: commit after the rotation does not verify with the new key: %v", err)
	}
	if err := verify(res.Commit, k.Public); err == nil {
		t.Errorf("commit after the rotation verifies with the old key")
	}

	// a key that cannot sign: no commit pushed
	tip := s.Head(t, "apps.git", "main")
	put(keyFile, k2.Public)
	_, err = w.Write(ctx, []pin.Change{sshChange(t, url, "1.1.0", "1.2.0")})
	if err == nil {
		t.Fatal("pushed with a public key as the signing key")
	}
	for _, want := range []string{"sign the commit", "git.signingKeyFile " + keyFile, "public key, not a private key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	k.AssertNoKeyMaterial(t, err)
	k2.AssertNoKeyMaterial(t, err)
	if s.Head(t, "apps.git", "main") != tip {
		t.Errorf("pushed: tip %s, was %s", s.Head(t, "apps.git", "main"), tip)
	}
}
