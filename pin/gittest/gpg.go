package gittest

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// OpenPGPKey is an OpenPGP signing key made for a test, armored.
type OpenPGPKey struct {
	Public, Private string
	// Locked is Private protected by Passphrase.
	Locked, Passphrase string
}

// NewOpenPGPKey makes an EdDSA key (gpg 2.2 knows it) for "Pin Bot (comment)
// <pinbot@example.com>" (no comment when ""), whose Locked form is protected by
// passphrase.
func NewOpenPGPKey(t testing.TB, comment, passphrase string) OpenPGPKey {
	t.Helper()
	cfg := &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA}
	e, err := openpgp.NewEntity("Pin Bot", comment, "pinbot@example.com", cfg)
	if err != nil {
		t.Fatal(err)
	}
	arm := func(blockType string, write func(io.Writer) error) string {
		var b bytes.Buffer
		w, err := armor.Encode(&b, blockType, nil)
		if err == nil {
			err = write(w)
		}
		if err == nil {
			err = w.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	k := OpenPGPKey{Passphrase: passphrase}
	k.Public = arm(openpgp.PublicKeyType, e.Serialize)
	k.Private = arm(openpgp.PrivateKeyType, func(w io.Writer) error { return e.SerializePrivate(w, cfg) })
	if err := e.EncryptPrivateKeys([]byte(passphrase), cfg); err != nil {
		t.Fatal(err)
	}
	k.Locked = arm(openpgp.PrivateKeyType, func(w io.Writer) error { return e.SerializePrivateWithoutSigning(w, cfg) })
	return k
}

// AssertNoKeyMaterial fails the test when err holds a line of the armored keys
// or the passphrase.
func (k OpenPGPKey) AssertNoKeyMaterial(t testing.TB, err error) {
	t.Helper()
	for _, a := range []string{k.Public, k.Private, k.Locked} {
		for _, l := range strings.Split(a, "\n") {
			if l = strings.TrimSpace(l); len(l) > 8 && !strings.HasPrefix(l, "-----") && strings.Contains(err.Error(), l) {
				t.Errorf("error %q holds key material %q", err, l)
			}
		}
	}
	if strings.Contains(err.Error(), k.Passphrase) {
		t.Errorf("error %q holds the passphrase", err)
	}
}

// VerifyCommitSignature runs git verify-commit on commit in the repository at
// dir, with publicKey the only key of a fresh GNUPGHOME, and fails the test
// unless gpg reports a good signature. Without gpg (Debian package gnupg) it
// calls RequireOrSkip: the test fails in CI and is skipped on a developer's
// machine, so call it in a subtest of its own where the rest of a test should
// still run there.
func VerifyCommitSignature(t testing.TB, dir, commit, publicKey string) {
	t.Helper()
	if _, err := exec.LookPath("gpg"); err != nil {
		RequireOrSkip(t, "", "gittest: no gpg (Debian package gnupg): git verify-commit cannot check the signature")
	}
	home, err := os.MkdirTemp("", "gpg") // short: gpg's socket paths are bounded
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command("gpgconf", "--homedir", home, "--kill", "all").Run()
		_ = os.RemoveAll(home)
	})
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GNUPGHOME="+home)
	imp := exec.Command("gpg", "--batch", "--import")
	imp.Env, imp.Stdin = env, strings.NewReader(publicKey)
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("gpg --import: %v\n%s", err, out)
	}
	v := exec.Command("git", "-C", dir, "verify-commit", "--raw", commit)
	v.Env = env
	out, err := v.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "GOODSIG") {
		t.Fatalf("git verify-commit: %v\n%s", err, out)
	}
	t.Logf("git verify-commit:\n%s", out)
}
