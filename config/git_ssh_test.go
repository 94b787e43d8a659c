package config

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

func TestGitSSHCredentialValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    GitCredential
		want []string // all in the message; nil: valid
	}{
		{"ssh url", GitCredential{Prefix: "ssh://git@git.example.com/org/", SSHKeyFile: "/k", KnownHostsFile: "/kh"}, nil},
		{"ssh url with port and passphrase", GitCredential{Prefix: "ssh://git@git.example.com:2222/", SSHKeyFile: "/k", SSHKeyPassphraseFile: "/p", KnownHostsFile: "/kh"}, nil},
		{"scp-like", GitCredential{Prefix: "git@github.com:org/", SSHKeyFile: "/k", KnownHostsFile: "/kh"}, nil},
		{"scp-like without user", GitCredential{Prefix: "github.com:org/", SSHKeyFile: "/k", KnownHostsFile: "/kh"}, nil},
		{"https", GitCredential{Prefix: "https://g/", PasswordEnv: "T"}, nil},

		{"ssh without key", GitCredential{Prefix: "ssh://git@g/", KnownHostsFile: "/kh"},
			[]string{"git.credentials[0].sshKeyFile", `invalid value ""`, "private key", "ssh://git@g/"}},
		{"ssh without known_hosts", GitCredential{Prefix: "git@g:org/", SSHKeyFile: "/k"},
			[]string{"git.credentials[0].knownHostsFile", `invalid value ""`, "known_hosts", "required", "always checked"}},
		{"ssh with a password file", GitCredential{Prefix: "ssh://git@g/", SSHKeyFile: "/k", KnownHostsFile: "/kh", PasswordFile: "/pw"},
			[]string{"git.credentials[0].passwordFile", `"/pw"`, "sshKeyFile and knownHostsFile"}},
		{"ssh with a password variable", GitCredential{Prefix: "ssh://git@g/", SSHKeyFile: "/k", KnownHostsFile: "/kh", PasswordEnv: "T"},
			[]string{"git.credentials[0].passwordEnv", `"T"`, "not passwordFile, passwordEnv"}},
		{"ssh with a username", GitCredential{Prefix: "ssh://g/", SSHKeyFile: "/k", KnownHostsFile: "/kh", Username: "bob"},
			[]string{"git.credentials[0].username", `"bob"`, "the user is the URL's"}},
		{"https with a key", GitCredential{Prefix: "https://g/", PasswordEnv: "T", SSHKeyFile: "/k"},
			[]string{"git.credentials[0].sshKeyFile", `"/k"`, "exactly one of passwordFile and passwordEnv", "not sshKeyFile"}},
		{"https with known_hosts", GitCredential{Prefix: "https://g/", PasswordEnv: "T", KnownHostsFile: "/kh"},
			[]string{"git.credentials[0].knownHostsFile", `"/kh"`}},
		{"https with a passphrase", GitCredential{Prefix: "https://g/", PasswordEnv: "T", SSHKeyPassphraseFile: "/p"},
			[]string{"git.credentials[0].sshKeyPassphraseFile", `"/p"`}},
		{"https without a secret", GitCredential{Prefix: "https://g/"},
			[]string{"git.credentials[0]", "exactly one of passwordFile and passwordEnv"}},
		{"no scheme", GitCredential{Prefix: "git.example.com/org/", SSHKeyFile: "/k", KnownHostsFile: "/kh"},
			[]string{"git.credentials[0].prefix", `"git.example.com/org/"`, "https://", "ssh://git@git.example.com/org/", "git@git.example.com:org/"}},
		{"another scheme", GitCredential{Prefix: "git://g/", SSHKeyFile: "/k", KnownHostsFile: "/kh"},
			[]string{"git.credentials[0].prefix", `"git://g/"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := GitConfig{Credentials: []GitCredential{tc.c}}.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ie *resolve.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v is not an InputError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// The configuration file's spelling of the ssh keys.
func TestGitSSHCredentialFromFile(t *testing.T) {
	c, err := load(t, nil, map[string]string{ConfigEnv: writeFile(t, "config.yaml",
		"git:\n  credentials:\n  - {prefix: 'git@git.example.com:', sshKeyFile: /k, sshKeyPassphraseFile: /p, knownHostsFile: /kh}\n")})
	if err != nil {
		t.Fatal(err)
	}
	want := GitCredential{Prefix: "git@git.example.com:", SSHKeyFile: "/k", SSHKeyPassphraseFile: "/p", KnownHostsFile: "/kh"}
	if len(c.Git.Credentials) != 1 || c.Git.Credentials[0] != want {
		t.Errorf("credentials %+v", c.Git.Credentials)
	}
	_, err = load(t, nil, map[string]string{ConfigEnv: writeFile(t, "config.yaml",
		"git:\n  credentials:\n  - {prefix: 'ssh://git@g/', sshKeyFile: /k}\n")})
	if err == nil || !strings.Contains(err.Error(), "git.credentials[0].knownHostsFile") {
		t.Errorf("no known_hosts: %v", err)
	}
}

// newKey makes an ed25519 key pair (passphrase "" for none) and returns the
// private key's file. When ssh-keygen fails the test is skipped, unless sshd
// is required (gittest.RequireSSHDEnv=1 or CI set): then it fails.
func newKey(t *testing.T, passphrase string) string {
	t.Helper()
	k := filepath.Join(t.TempDir(), "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "test", "-f", k).CombinedOutput(); err != nil {
		gittest.RequireOrSkip(t, gittest.RequireSSHDEnv, strings.TrimSpace(fmt.Sprintf("ssh-keygen (Debian package openssh-client): %v %s", err, out)))
	}
	return k
}

func TestGitAuthFor(t *testing.T) {
	key := newKey(t, "")
	locked := newKey(t, "correct horse")
	kh := writeFile(t, "known_hosts", "[git.example.com]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
	g := GitConfig{Credentials: []GitCredential{
		{Prefix: "ssh://git.example.com:2222/", SSHKeyFile: key, KnownHostsFile: kh},
		{Prefix: "ssh://deploy@git.example.com:2222/", SSHKeyFile: key, KnownHostsFile: kh},
		{Prefix: "git@git.example.com:locked/", SSHKeyFile: locked, SSHKeyPassphraseFile: writeFile(t, "pass", "correct horse\n"), KnownHostsFile: kh},
		{Prefix: "git@git.example.com:wrong/", SSHKeyFile: locked, SSHKeyPassphraseFile: writeFile(t, "pass", "wrong horse\n"), KnownHostsFile: kh},
		{Prefix: "git@git.example.com:nopass/", SSHKeyFile: locked, KnownHostsFile: kh},
		{Prefix: "git@git.example.com:nokh/", SSHKeyFile: key, KnownHostsFile: filepath.Join(t.TempDir(), "absent")},
		{Prefix: "git@git.example.com:notakey/", SSHKeyFile: kh, KnownHostsFile: kh},
		{Prefix: "https://git.example.com/", PasswordEnv: "GIT_AUTH_FOR_TOKEN"},
	}}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GIT_AUTH_FOR_TOKEN", "tok")

	for url, user := range map[string]string{
		"ssh://git.example.com:2222/apps.git":      "git", // no user in the URL
		"ssh://deploy@git.example.com:2222/a.git":  "deploy",
		"git@git.example.com:locked/apps.git":      "git",
		"https://git.example.com/org/apps.git":     "git",
		"https://unmatched.example.com/x/apps.git": "",
	} {
		a, err := g.AuthFor(url)
		if err != nil {
			t.Errorf("%s: %v", url, err)
			continue
		}
		switch a := a.(type) {
		case nil:
			if user != "" {
				t.Errorf("%s: no credentials", url)
			}
		case *gitssh.PublicKeys:
			if a.User != user || a.HostKeyCallback == nil {
				t.Errorf("%s: user %q, host key callback set %v", url, a.User, a.HostKeyCallback != nil)
			}
		default:
			if !strings.HasPrefix(url, "https://") {
				t.Errorf("%s: %T", url, a)
			}
		}
	}
	// the known_hosts key types are offered for the host and port it names
	a, _ := g.AuthFor("ssh://git.example.com:2222/apps.git")
	if algs := a.(*gitssh.PublicKeys).HostKeyAlgorithms; len(algs) != 1 || algs[0] != "ssh-ed25519" {
		t.Errorf("host key algorithms %q", algs)
	}
	if _, _, _, err := g.CredentialFor("git@git.example.com:locked/apps.git"); err == nil {
		t.Error("CredentialFor gave a password for an ssh credential")
	}

	material := append(gittest.KeyMaterial(t, key), gittest.KeyMaterial(t, locked)...)
	for url, want := range map[string][]string{
		"git@git.example.com:wrong/apps.git":   {"git.credentials[3].sshKeyFile", locked, "not a usable private key", "check the passphrase in git.credentials[3].sshKeyPassphraseFile"},
		"git@git.example.com:nopass/apps.git":  {"git.credentials[4].sshKeyFile", locked, "if the key has a passphrase"},
		"git@git.example.com:nokh/apps.git":    {"git.credentials[5].knownHostsFile", "absent", "no such file"},
		"git@git.example.com:notakey/apps.git": {"git.credentials[6].sshKeyFile", "not a usable private key"},
	} {
		_, err := g.AuthFor(url)
		if err == nil {
			t.Errorf("%s: no error", url)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", url, err, w)
			}
		}
		for _, m := range append(material, "correct horse", "wrong horse") {
			if strings.Contains(err.Error(), m) {
				t.Errorf("%s: error %q holds a secret", url, err)
			}
		}
	}
}
