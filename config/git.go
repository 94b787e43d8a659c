package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// GitConfig is how the daemon commits pins (pin-mode write and use): the git:
// section of the configuration file.
type GitConfig struct {
	// Author is "Name <email>"; it is also the committer.
	Author string `json:"author,omitempty"`
	// Message is a text/template for commit messages ("" for the built-in one).
	Message string `json:"message,omitempty"`
	// BatchWindow is how long changes for one repository and branch are gathered
	// into one commit.
	BatchWindow Duration `json:"batchWindow,omitempty"`
	// Credentials are per repository URL prefix; the longest matching prefix wins;
	// a repository none matches is tried without credentials, as git would.
	Credentials []GitCredential `json:"credentials,omitempty"`
	// SigningKeyFile is an ASCII-armored OpenPGP private key every pin commit is
	// signed with ("" for unsigned commits); SigningKeyPassphraseFile holds its
	// passphrase, if it has one. Both are read when the configuration is
	// validated (a key that cannot sign stops the daemon at start) and again at
	// each commit, so a rotated key is used at the next one.
	SigningKeyFile           string `json:"signingKeyFile,omitempty"`
	SigningKeyPassphraseFile string `json:"signingKeyPassphraseFile,omitempty"`
	// Forges are where pull requests of pins are opened (pin-push
	// pull-request), per repository URL prefix; the longest matching prefix
	// wins.
	Forges []GitForge `json:"forges,omitempty"`
	// MaxRepositoryBytes bounds what the pin writer fetches and holds of one
	// repository (git.maxRepositoryBytes, also an environment variable and a
	// flag); 0 is pin.DefaultMaxRepositoryBytes.
	MaxRepositoryBytes int64 `json:"-"`
}

const gitSection = "git."

// gitSettings are the git.* settings that are also environment variables and
// flags; in the file they are keys of the git: section beside the others.
func gitSettings() []Setting {
	maxRepo := sizeSetting(gitSection+"maxRepositoryBytes", "IMAGE_RESOLVER_GIT_MAX_REPOSITORY_BYTES", "git-max-repository-bytes",
		"bytes the pin writer fetches and holds of one repository at most (the packs a write transfers, and their objects inflated); past it the repository's pins are not pushed, with an error naming it",
		func(c *Config) *int64 { return &c.Git.MaxRepositoryBytes })
	maxRepo.get = func(c *Config) string { return FormatSize(c.Git.maxRepositoryBytes()) }
	return []Setting{maxRepo}
}

// maxRepositoryBytes is MaxRepositoryBytes, or its default when unset (a
// GitConfig built in code).
func (g GitConfig) maxRepositoryBytes() int64 {
	if g.MaxRepositoryBytes > 0 {
		return g.MaxRepositoryBytes
	}
	return pin.DefaultMaxRepositoryBytes
}

// parseGitSection reads the git: section: its settings (gitSettings) through
// Set, the rest strictly (parseGit).
func (c *Config) parseGitSection(source string, raw json.RawMessage) error {
	var sec map[string]json.RawMessage
	if err := json.Unmarshal(raw, &sec); err == nil {
		for _, s := range gitSettings() {
			k := strings.TrimPrefix(s.Key, gitSection)
			v, ok := sec[k]
			if !ok {
				continue
			}
			str, err := scalar(v)
			if err != nil {
				return &resolve.InputError{Field: source + ": " + s.Key, Value: string(v), Accepted: "a single value"}
			}
			if err := c.Set(s.Key, str, source+": "+s.Key); err != nil {
				return err
			}
			delete(sec, k)
		}
		if raw, err = json.Marshal(sec); err != nil {
			return fmt.Errorf("config %s: git: %w", source, err)
		}
	}
	g, err := parseGit(source, raw)
	if err != nil {
		return err
	}
	g.MaxRepositoryBytes = c.Git.MaxRepositoryBytes
	c.Git = g
	return nil
}

// GitCredential is the credential for the repositories under Prefix, read when a
// push needs it (so a rotated secret is used at the next push), never stored in
// the configuration itself. For an https:// (or http://) prefix: a username and a
// password (or token) read from a file or an environment variable. For an ssh
// prefix (ssh://git@host[:port]/path or scp-like git@host:path): a private key
// file (its passphrase, if any, in a file of its own) and a known_hosts file the
// server's host key must be in; there is no way to skip the host key check.
type GitCredential struct {
	Prefix       string `json:"prefix"`
	Username     string `json:"username,omitempty"`
	PasswordFile string `json:"passwordFile,omitempty"`
	PasswordEnv  string `json:"passwordEnv,omitempty"`

	SSHKeyFile           string `json:"sshKeyFile,omitempty"`
	SSHKeyPassphraseFile string `json:"sshKeyPassphraseFile,omitempty"`
	KnownHostsFile       string `json:"knownHostsFile,omitempty"`
}

// IsSSH says whether the prefix is an ssh one: ssh://... or scp-like
// [user@]host:path (no scheme, a colon before any slash).
func (c GitCredential) IsSSH() bool { return isSSHURL(c.Prefix) }

func isSSHURL(s string) bool {
	if strings.HasPrefix(s, "ssh://") {
		return true
	}
	if strings.Contains(s, "://") {
		return false
	}
	colon := strings.Index(s, ":")
	if colon <= 0 {
		return false
	}
	host := s[:colon]
	if at := strings.LastIndex(host, "@"); at >= 0 {
		host = host[at+1:]
	}
	return host != "" && !strings.ContainsAny(host, "/ ")
}

// Duration is a time.Duration written as a Go duration string in YAML.
type Duration time.Duration

// UnmarshalJSON reads "90s", "2m".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &resolve.InputError{Value: string(b), Accepted: durationAccepted}
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return &resolve.InputError{Value: s, Accepted: durationAccepted + ", not negative"}
	}
	*d = Duration(v)
	return nil
}

// DefaultGitAuthor commits pins when the configuration names no author.
const DefaultGitAuthor = "argocd-image-resolver <argocd-image-resolver@localhost>"

// parseGit reads the git: section strictly.
func parseGit(source string, raw json.RawMessage) (GitConfig, error) {
	var g GitConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil {
		return GitConfig{}, &FileError{Source: "config " + source, Key: "git", Err: err, Msg: fmt.Sprintf("%v (accepted keys: author, message, batchWindow, credentials: [{prefix, username, passwordFile | passwordEnv} for https, {prefix, sshKeyFile, sshKeyPassphraseFile, knownHostsFile} for ssh], signingKeyFile, signingKeyPassphraseFile, forges: [{prefix, kind, api, tokenFile, appID, installationID, privateKeyFile, labels, reviewers, assignees, autoMerge}], maxRepositoryBytes)", err)}
	}
	if err := g.Validate(); err != nil {
		return GitConfig{}, fmt.Errorf("config %s: %w", source, err)
	}
	return g, nil
}

// Validate checks the git section.
func (g GitConfig) Validate() error {
	if g.Author != "" {
		if _, err := mail.ParseAddress(g.Author); err != nil {
			return &resolve.InputError{Field: "git.author", Value: g.Author, Accepted: `"Name <email>"`, Err: err}
		}
	}
	if g.Message != "" {
		if err := pin.CheckMessage(g.Message); err != nil {
			return &resolve.InputError{Field: "git.message", Value: g.Message, Accepted: "a Go text/template", Err: err}
		}
	}
	for i, c := range g.Credentials {
		if err := c.validate(fmt.Sprintf("git.credentials[%d]", i)); err != nil {
			return err
		}
	}
	for i, f := range g.Forges {
		if err := f.validate(fmt.Sprintf("git.forges[%d]", i)); err != nil {
			return err
		}
	}
	if g.SigningKeyFile == "" && g.SigningKeyPassphraseFile != "" {
		return &resolve.InputError{Field: "git.signingKeyPassphraseFile", Value: g.SigningKeyPassphraseFile, Accepted: "a passphrase file only with git.signingKeyFile, the key it decrypts"}
	}
	if _, err := g.Signer(); err != nil {
		return err
	}
	return nil
}

// Signer returns the signer of pin commits, from the OpenPGP private key of
// SigningKeyFile decrypted with the passphrase of SigningKeyPassphraseFile
// (nil, nil when no key is configured). Both files are read now. Errors name
// the field and the file, never what the files hold.
func (g GitConfig) Signer() (*pin.OpenPGPSigner, error) {
	if g.SigningKeyFile == "" {
		return nil, nil
	}
	var passphrase []byte
	if g.SigningKeyPassphraseFile != "" {
		b, err := os.ReadFile(g.SigningKeyPassphraseFile)
		if err != nil {
			return nil, fmt.Errorf("git.signingKeyPassphraseFile: %w", err)
		}
		passphrase = []byte(strings.TrimRight(string(b), "\r\n"))
	}
	armored, err := os.ReadFile(g.SigningKeyFile)
	if err != nil {
		return nil, fmt.Errorf("git.signingKeyFile: %w", err)
	}
	s, err := pin.NewOpenPGPSigner(armored, passphrase)
	if err != nil {
		if !errors.Is(err, pin.ErrKeyPassphrase) {
			return nil, fmt.Errorf("git.signingKeyFile %s: %w", g.SigningKeyFile, err)
		}
		hint := "put the passphrase in a file named by git.signingKeyPassphraseFile"
		if g.SigningKeyPassphraseFile != "" {
			hint = "check the passphrase in git.signingKeyPassphraseFile " + g.SigningKeyPassphraseFile
		}
		return nil, fmt.Errorf("git.signingKeyFile %s: %w: %s", g.SigningKeyFile, err, hint)
	}
	return s, nil
}

func (c GitCredential) validate(f string) error {
	const (
		sshHow   = "an ssh:// or scp-like prefix takes sshKeyFile and knownHostsFile (sshKeyPassphraseFile if the key has one), not passwordFile, passwordEnv or username (the user is the URL's, git if it names none)"
		httpsHow = "an http(s):// prefix takes exactly one of passwordFile and passwordEnv (and a username), not sshKeyFile, sshKeyPassphraseFile or knownHostsFile"
	)
	if c.IsSSH() {
		switch {
		case c.PasswordFile != "":
			return &resolve.InputError{Field: f + ".passwordFile", Value: c.PasswordFile, Accepted: sshHow}
		case c.PasswordEnv != "":
			return &resolve.InputError{Field: f + ".passwordEnv", Value: c.PasswordEnv, Accepted: sshHow}
		case c.Username != "":
			return &resolve.InputError{Field: f + ".username", Value: c.Username, Accepted: sshHow}
		case c.SSHKeyFile == "":
			return &resolve.InputError{Field: f + ".sshKeyFile", Value: "", Accepted: "the path of the private key for " + c.Prefix}
		case c.KnownHostsFile == "":
			return &resolve.InputError{Field: f + ".knownHostsFile", Value: "", Accepted: "the path of a known_hosts file holding the host key of the server of " + c.Prefix + ": it is required, the host key is always checked"}
		}
		return nil
	}
	if !strings.HasPrefix(c.Prefix, "https://") && !strings.HasPrefix(c.Prefix, "http://") {
		return &resolve.InputError{Field: f + ".prefix", Value: c.Prefix, Accepted: "an http(s):// repository URL prefix, e.g. https://git.example.com/org/, or an ssh one, e.g. ssh://git@git.example.com/org/ or git@git.example.com:org/"}
	}
	switch {
	case c.SSHKeyFile != "":
		return &resolve.InputError{Field: f + ".sshKeyFile", Value: c.SSHKeyFile, Accepted: httpsHow}
	case c.SSHKeyPassphraseFile != "":
		return &resolve.InputError{Field: f + ".sshKeyPassphraseFile", Value: c.SSHKeyPassphraseFile, Accepted: httpsHow}
	case c.KnownHostsFile != "":
		return &resolve.InputError{Field: f + ".knownHostsFile", Value: c.KnownHostsFile, Accepted: httpsHow}
	case (c.PasswordFile == "") == (c.PasswordEnv == ""):
		return &resolve.InputError{Field: f, Value: c.Prefix, Accepted: "exactly one of passwordFile and passwordEnv"}
	}
	return nil
}

// GitAuthor returns the author's name and email.
func (g GitConfig) GitAuthor() (name, email string) {
	a := g.Author
	if a == "" {
		a = DefaultGitAuthor
	}
	addr, err := mail.ParseAddress(a)
	if err != nil {
		return "argocd-image-resolver", "argocd-image-resolver@localhost"
	}
	return addr.Name, addr.Address
}

// credentialFor returns the index of the credential with the longest prefix of
// repoURL, -1 for none.
func (g GitConfig) credentialFor(repoURL string) int {
	best := -1
	for i, c := range g.Credentials {
		if strings.HasPrefix(repoURL, c.Prefix) && (best < 0 || len(c.Prefix) > len(g.Credentials[best].Prefix)) {
			best = i
		}
	}
	return best
}

// CredentialFor returns the HTTPS username and password for repoURL (ok false
// when no prefix matches). The password is read now, so that a rotated secret is
// used at the next push; errors name the file or variable, never the value. An
// ssh credential is not one: see AuthFor.
func (g GitConfig) CredentialFor(repoURL string) (user, password string, ok bool, err error) {
	best := g.credentialFor(repoURL)
	if best < 0 {
		return "", "", false, nil
	}
	c := g.Credentials[best]
	if c.IsSSH() {
		return "", "", false, fmt.Errorf("git credentials for %s: an ssh credential has no username and password", c.Prefix)
	}
	if c.PasswordFile != "" {
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return "", "", false, fmt.Errorf("git credentials for %s: %w", c.Prefix, err)
		}
		password = strings.TrimSpace(string(b))
	} else {
		v, set := os.LookupEnv(c.PasswordEnv)
		if !set {
			return "", "", false, fmt.Errorf("git credentials for %s: environment variable %s is not set", c.Prefix, c.PasswordEnv)
		}
		password = strings.TrimSpace(v)
	}
	user = c.Username
	if user == "" {
		user = "git" // a token: hosts take any user name with it
	}
	return user, password, true, nil
}

// AuthFor returns the credentials the pin writer pushes to repoURL with, from
// the credential with the longest prefix of it (nil when none matches: the
// repository is tried without credentials). An https credential is HTTP Basic
// (see CredentialFor). An ssh one is the private key of sshKeyFile for the URL's
// user (git when it names none), and the server's host key must be in
// knownHostsFile: there is no fallback to the machine's known_hosts and no way to
// accept an unknown key. Every file is read now, so that a rotated key or
// known_hosts is used at the next push. Errors name the files, never their
// content.
func (g GitConfig) AuthFor(repoURL string) (transport.AuthMethod, error) {
	best := g.credentialFor(repoURL)
	if best < 0 {
		return nil, nil
	}
	c := g.Credentials[best]
	if !c.IsSSH() {
		user, password, _, err := g.CredentialFor(repoURL)
		if err != nil {
			return nil, err
		}
		return &githttp.BasicAuth{Username: user, Password: password}, nil
	}
	return c.sshAuth(fmt.Sprintf("git.credentials[%d]", best), repoURL)
}

func (c GitCredential) sshAuth(field, repoURL string) (transport.AuthMethod, error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("git credentials for %s: "+format, append([]any{c.Prefix}, a...)...)
	}
	ep, err := transport.NewEndpoint(repoURL)
	if err != nil || ep.Protocol != "ssh" {
		return nil, fail("repository URL %s is not an ssh URL (ssh://user@host[:port]/path or user@host:path)", repoURL)
	}
	user := ep.User
	if user == "" {
		user = "git"
	}
	port := ep.Port
	if port <= 0 {
		port = 22
	}
	hostPort := net.JoinHostPort(ep.Host, strconv.Itoa(port))

	var passphrase string
	if c.SSHKeyPassphraseFile != "" {
		b, err := os.ReadFile(c.SSHKeyPassphraseFile)
		if err != nil {
			return nil, fail("%s.sshKeyPassphraseFile: %w", field, err)
		}
		passphrase = strings.TrimRight(string(b), "\r\n")
	}
	pemBytes, err := os.ReadFile(c.SSHKeyFile)
	if err != nil {
		return nil, fail("%s.sshKeyFile: %w", field, err)
	}
	keys, err := gitssh.NewPublicKeys(user, pemBytes, passphrase)
	if err != nil {
		// the parser's message says what is wrong (no key, passphrase missing
		// or wrong); it never holds the key
		hint := "if the key has a passphrase, put it in a file named by sshKeyPassphraseFile"
		if c.SSHKeyPassphraseFile != "" {
			hint = "check the passphrase in " + field + ".sshKeyPassphraseFile " + c.SSHKeyPassphraseFile
		}
		return nil, fail("%s.sshKeyFile %s: not a usable private key (%v): %s", field, c.SSHKeyFile, err, hint)
	}
	// NewKnownHostsDb skips a file that does not exist: say so here instead
	if _, err := os.Stat(c.KnownHostsFile); err != nil {
		return nil, fail("%s.knownHostsFile: %w", field, err)
	}
	db, err := gitssh.NewKnownHostsDb(c.KnownHostsFile)
	if err != nil {
		return nil, fail("%s.knownHostsFile %s: %v", field, c.KnownHostsFile, err)
	}
	keys.HostKeyCallback = checkHostKey(db.HostKeyCallback(), field+".knownHostsFile", c.KnownHostsFile)
	// offer the server the key types known_hosts has for it, so that it
	// presents one of those rather than its first choice
	keys.HostKeyAlgorithms = db.HostKeyAlgorithms(hostPort)
	return keys, nil
}

// sshPublicKey is the part of golang.org/x/crypto/ssh.PublicKey the host key
// message needs (named so, not imported: the module depends on x/crypto through
// go-git only).
type sshPublicKey interface {
	Type() string
	Marshal() []byte
}

// checkHostKey wraps a known_hosts host key callback so that its refusal names
// the server, the key it presented, the known_hosts file and what to do.
func checkHostKey[K sshPublicKey, F ~func(string, net.Addr, K) error](cb F, field, file string) F {
	return func(host string, remote net.Addr, key K) error {
		err := cb(host, remote, key)
		if err == nil {
			return nil
		}
		sum := sha256.Sum256(key.Marshal())
		return fmt.Errorf("host key verification failed: %s presented the %s host key SHA256:%s, which %s %s does not hold for it (%w); the host key is always checked: if that key is the server's, add it to that file",
			host, key.Type(), base64.RawStdEncoding.EncodeToString(sum[:]), field, file, err)
	}
}
