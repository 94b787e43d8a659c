package config

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

func TestGitSigningKeyValidation(t *testing.T) {
	k := gittest.NewOpenPGPKey(t, "", "correct horse "+t.Name())
	private := writeFile(t, "private.asc", k.Private)
	locked := writeFile(t, "locked.asc", k.Locked)
	public := writeFile(t, "public.asc", k.Public)
	pass := writeFile(t, "pass", k.Passphrase+"\n")
	wrong := writeFile(t, "wrong", "wrong horse\n")
	absent := filepath.Join(t.TempDir(), "absent")
	for _, tc := range []struct {
		name      string
		key, pass string
		want      []string // all in the message; nil: valid
	}{
		{"none", "", "", nil},
		{"private", private, "", nil},
		{"locked with its passphrase", locked, pass, nil},
		{"passphrase without a key", "", pass, []string{"git.signingKeyPassphraseFile", pass, "only with git.signingKeyFile"}},
		{"no key file", absent, "", []string{"git.signingKeyFile", absent, "no such file"}},
		{"no passphrase file", locked, absent, []string{"git.signingKeyPassphraseFile", absent, "no such file"}},
		{"public key", public, "", []string{"git.signingKeyFile " + public, "public key, not a private key"}},
		{"locked without a passphrase", locked, "", []string{"git.signingKeyFile " + locked, "protected by a passphrase", "git.signingKeyPassphraseFile"}},
		{"locked with a wrong passphrase", locked, wrong, []string{"git.signingKeyFile " + locked, "cannot be decrypted", "wrong passphrase", "git.signingKeyPassphraseFile " + wrong}},
		{"not a key", pass, "", []string{"git.signingKeyFile " + pass, "not an ASCII-armored OpenPGP private key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Git = GitConfig{SigningKeyFile: tc.key, SigningKeyPassphraseFile: tc.pass}
			// Config.Validate is what the daemon checks at start
			err := c.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("valid")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(tc.name, "passphrase") != errors.Is(err, pin.ErrKeyPassphrase) && tc.key != "" && tc.key != absent && tc.pass != absent {
				t.Errorf("errors.Is(%v, pin.ErrKeyPassphrase) = %v", err, errors.Is(err, pin.ErrKeyPassphrase))
			}
			k.AssertNoKeyMaterial(t, err)
		})
	}

	// the configuration file's keys
	g, err := parseGit("test.yaml", json.RawMessage(`{"signingKeyFile":`+quote(locked)+`,"signingKeyPassphraseFile":`+quote(pass)+`}`))
	if err != nil || g.SigningKeyFile != locked || g.SigningKeyPassphraseFile != pass {
		t.Fatalf("parseGit: %+v, %v", g, err)
	}
	if _, err := parseGit("test.yaml", json.RawMessage(`{"signingKeyFile":`+quote(public)+`}`)); err == nil || !strings.Contains(err.Error(), "config test.yaml: git.signingKeyFile "+public) {
		t.Errorf("parseGit of a public key: %v", err)
	}
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }
