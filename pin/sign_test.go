package pin_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

// testKey is an OpenPGP key made for a test, armored: the public key, the
// private key, and the private key protected by passphrase.
type testKey struct {
	public, private, locked string
	passphrase              string
}

func newTestKey(t testing.TB) testKey {
	t.Helper()
	k := gittest.NewOpenPGPKey(t, "test", "correct horse battery")
	return testKey{public: k.Public, private: k.Private, locked: k.Locked, passphrase: k.Passphrase}
}

// material is the key's armored lines (not its BEGIN/END lines): none may be
// in an error.
func (k testKey) material() []string {
	var out []string
	for _, a := range []string{k.public, k.private, k.locked} {
		for _, l := range strings.Split(a, "\n") {
			if l = strings.TrimSpace(l); len(l) > 8 && !strings.HasPrefix(l, "-----") {
				out = append(out, l)
			}
		}
	}
	return append(out, k.passphrase)
}

func (k testKey) assertNoMaterial(t *testing.T, err error) {
	t.Helper()
	for _, m := range k.material() {
		if strings.Contains(err.Error(), m) {
			t.Errorf("error %q holds key material %q", err, m)
		}
	}
}

func TestNewOpenPGPSigner(t *testing.T) {
	k := newTestKey(t)
	other := newTestKey(t)
	for _, tc := range []struct {
		name       string
		key        string
		passphrase []byte
		want       string // "" for a signer
	}{
		{"private", k.private, nil, ""},
		{"private, passphrase ignored", k.private, []byte("whatever"), ""},
		{"locked with its passphrase", k.locked, []byte(k.passphrase), ""},
		{"locked without a passphrase", k.locked, nil, "protected by a passphrase, and none was given"},
		{"locked with a wrong passphrase", k.locked, []byte("wrong horse"), "cannot be decrypted with the passphrase given (wrong passphrase?)"},
		{"public", k.public, nil, "is an OpenPGP public key, not a private key"},
		{"two keys", oneBlock(t, k.private, other.private), nil, "holds 2 OpenPGP keys, want exactly one"},
		{"not a key", "hello\n", nil, "not an ASCII-armored OpenPGP private key"},
		{"empty", "", nil, "not an ASCII-armored OpenPGP private key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := pin.NewOpenPGPSigner([]byte(tc.key), tc.passphrase)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				sig, err := s.Sign(strings.NewReader("tree x\n"))
				if err != nil || !strings.HasPrefix(string(sig), "-----BEGIN PGP SIGNATURE-----") {
					t.Fatalf("signature %q, %v", sig, err)
				}
				if _, err := openpgp.CheckArmoredDetachedSignature(mustKeyRing(t, k.public), strings.NewReader("tree x\n"), bytes.NewReader(sig), nil); err != nil {
					t.Errorf("signature does not verify: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			k.assertNoMaterial(t, err)
			other.assertNoMaterial(t, err)
		})
	}
}

// oneBlock armors the keys of armored blocks in one block, as gpg
// --export-secret-keys --armor does with several keys.
func oneBlock(t testing.TB, blocks ...string) string {
	t.Helper()
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PrivateKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range blocks {
		blk, err := armor.Decode(strings.NewReader(a))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, blk.Body); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func mustKeyRing(t testing.TB, armored string) openpgp.EntityList {
	t.Helper()
	kr, err := openpgp.ReadArmoredKeyRing(strings.NewReader(armored))
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// A signed pin commit, pushed to a real git server: the signer is given the
// commit's encoding without the signature, byte for byte what git cat-file
// shows without the gpgsig header; the commit read back from the bare
// repository verifies with go-git against the public key, and with git
// verify-commit (a subtest skipped without gpg, failed in CI).
func TestWriteSignsCommits(t *testing.T) {
	k := newTestKey(t)
	s, err := pin.NewOpenPGPSigner([]byte(k.locked), []byte(k.passphrase))
	if err != nil {
		t.Fatal(err)
	}
	var signed [][]byte
	f := newFixture(t)
	w := f.writer(pin.WithSigner(pin.SignerFunc(func(m io.Reader) ([]byte, error) {
		b, err := io.ReadAll(m)
		if err != nil {
			return nil, err
		}
		signed = append(signed, b)
		return s.Sign(bytes.NewReader(b))
	})))
	res, err := w.Write(context.Background(), []pin.Change{f.change("", "web", "web", "1.2.3", "1.3.0")})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pushed || res.Commit != f.s.Head(t, repoName, "main") || len(signed) != 1 {
		t.Fatalf("result %+v, signed %d times", res, len(signed))
	}
	raw := f.s.Git(t, repoName, "cat-file", "commit", res.Commit)
	if !strings.Contains(raw, "\ngpgsig -----BEGIN PGP SIGNATURE-----\n") {
		t.Fatalf("commit has no gpgsig header:\n%s", raw)
	}
	if got := stripGPGSig(raw); got != string(signed[0]) {
		t.Errorf("signed %q\ngit's commit without gpgsig %q", signed[0], got)
	}
	f.s.Fsck(t, repoName)

	repo, err := git.PlainOpen(f.s.Dir(repoName))
	if err != nil {
		t.Fatal(err)
	}
	c, err := repo.CommitObject(plumbing.NewHash(res.Commit))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Verify(k.public); err != nil {
		t.Errorf("go-git: the commit does not verify: %v", err)
	}
	if _, err := c.Verify(newTestKey(t).public); err == nil {
		t.Errorf("go-git: the commit verifies with another key")
	}
	t.Run("git verify-commit", func(t *testing.T) {
		gittest.VerifyCommitSignature(t, f.s.Dir(repoName), res.Commit, k.public)
	})
}

// stripGPGSig drops the gpgsig header (and its continuation lines) of a raw
// commit, as git does before verifying.
func stripGPGSig(raw string) string {
	head, msg, _ := strings.Cut(raw, "\n\n")
	var keep []string
	in := false
	for _, l := range strings.Split(head, "\n") {
		switch {
		case strings.HasPrefix(l, "gpgsig "):
			in = true
		case in && strings.HasPrefix(l, " "):
		default:
			in = false
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n") + "\n\n" + msg
}

// A signer that fails stops the write before anything is pushed; its error is
// the write's, and it is not retried.
func TestWriteSignerFailure(t *testing.T) {
	f := newFixture(t)
	initial := f.s.Head(t, repoName, "main")
	boom := errors.New("the key is gone")
	calls := 0
	w := f.writer(pin.WithSigner(pin.SignerFunc(func(io.Reader) ([]byte, error) { calls++; return nil, boom })))
	_, err := w.Write(context.Background(), []pin.Change{f.change("", "web", "web", "1.2.3", "1.3.0")})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "sign the commit") {
		t.Fatalf("error %v", err)
	}
	if calls != 1 || f.s.Pushes(repoName) != 0 || f.s.Head(t, repoName, "main") != initial {
		t.Errorf("signer called %d times, %d pushes, tip %s", calls, f.s.Pushes(repoName), f.s.Head(t, repoName, "main"))
	}
}
