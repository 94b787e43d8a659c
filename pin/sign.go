package pin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Signer signs pin commits. Sign is given the commit's encoding without its
// signature (the bytes git verifies a commit signature against) and returns the
// ASCII-armored detached signature, which goes in the commit's gpgsig header.
// It has the method of go-git's git.Signer, so any of those fits. Its errors
// must not carry key material.
type Signer interface {
	Sign(message io.Reader) ([]byte, error)
}

// SignerFunc is a Signer as a function.
type SignerFunc func(message io.Reader) ([]byte, error)

// Sign calls f.
func (f SignerFunc) Sign(message io.Reader) ([]byte, error) { return f(message) }

// WithSigner signs every pin commit with s (nil: commits are not signed, the
// default). A commit s cannot sign is not pushed: the write fails with s's error
// (as a failure of the content: it is not retried).
func WithSigner(s Signer) WriterOption {
	return func(w *Writer) { w.signer = s }
}

// ErrKeyPassphrase is (wrapped in) the error of NewOpenPGPSigner when the key is
// protected by a passphrase and none was given, or the one given is wrong.
var ErrKeyPassphrase = errors.New("passphrase")

// OpenPGPSigner signs with an OpenPGP private key, as git commit -S does with
// gpg: git verify-commit (with the public key in the keyring) and go-git's
// Commit.Verify accept its signatures.
type OpenPGPSigner struct{ key *openpgp.Entity }

// NewOpenPGPSigner reads one ASCII-armored OpenPGP private key (gpg
// --export-secret-keys --armor), decrypting it with passphrase when it is
// protected by one. A public key, several keys, a protected key without a
// passphrase or with a wrong one, and a key with no usable signing key are
// errors; they say which, never holding any of the key.
func NewOpenPGPSigner(armored, passphrase []byte) (*OpenPGPSigner, error) {
	keys, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(armored))
	if err != nil {
		return nil, fmt.Errorf("not an ASCII-armored OpenPGP private key: %v", err)
	}
	if len(keys) != 1 {
		return nil, fmt.Errorf("holds %d OpenPGP keys, want exactly one", len(keys))
	}
	e := keys[0]
	if !hasPrivateKey(e) {
		return nil, errors.New("is an OpenPGP public key, not a private key (export one with gpg --export-secret-keys --armor)")
	}
	if isEncrypted(e) {
		if passphrase == nil {
			return nil, fmt.Errorf("the OpenPGP private key is protected by a %w, and none was given", ErrKeyPassphrase)
		}
		if err := e.DecryptPrivateKeys(passphrase); err != nil {
			return nil, fmt.Errorf("the OpenPGP private key cannot be decrypted with the %w given (wrong passphrase?): %v", ErrKeyPassphrase, err)
		}
	}
	k, ok := e.SigningKey(time.Now())
	if !ok || k.PrivateKey == nil || k.PrivateKey.Dummy() || k.PrivateKey.Encrypted {
		return nil, fmt.Errorf("OpenPGP key %X has no usable private signing key (expired, revoked, not allowed to sign, or a stub of a key kept elsewhere)", e.PrimaryKey.Fingerprint)
	}
	return &OpenPGPSigner{key: e}, nil
}

func hasPrivateKey(e *openpgp.Entity) bool {
	if e.PrivateKey != nil {
		return true
	}
	for _, s := range e.Subkeys {
		if s.PrivateKey != nil {
			return true
		}
	}
	return false
}

func isEncrypted(e *openpgp.Entity) bool {
	if e.PrivateKey != nil && !e.PrivateKey.Dummy() && e.PrivateKey.Encrypted {
		return true
	}
	for _, s := range e.Subkeys {
		if s.PrivateKey != nil && !s.PrivateKey.Dummy() && s.PrivateKey.Encrypted {
			return true
		}
	}
	return false
}

// Fingerprint is the key's (primary key's) fingerprint, upper-case hex.
func (s *OpenPGPSigner) Fingerprint() string {
	return fmt.Sprintf("%X", s.key.PrimaryKey.Fingerprint)
}

// Sign returns the armored detached signature of message.
func (s *OpenPGPSigner) Sign(message io.Reader) ([]byte, error) {
	var b bytes.Buffer
	if err := openpgp.ArmoredDetachSign(&b, s.key, message, nil); err != nil {
		return nil, fmt.Errorf("OpenPGP key %s: %v", s.Fingerprint(), err)
	}
	return b.Bytes(), nil
}

// signCommit sets c's signature: s's signature of c's encoding without one.
func signCommit(c *object.Commit, s Signer) error {
	enc := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(enc); err != nil {
		return err
	}
	r, err := enc.Reader()
	if err != nil {
		return err
	}
	sig, err := s.Sign(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(sig)) == 0 {
		return errors.New("the signer gave no signature")
	}
	c.PGPSignature = string(sig)
	return nil
}
