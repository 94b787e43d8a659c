package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/mail"
	"os"
	"strings"
	"time"

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
}

// GitCredential is an HTTPS credential for the repositories under Prefix: a
// username and a password (or token) read from a file or an environment variable
// when a push needs it, never stored in the configuration itself.
type GitCredential struct {
	Prefix       string `json:"prefix"`
	Username     string `json:"username,omitempty"`
	PasswordFile string `json:"passwordFile,omitempty"`
	PasswordEnv  string `json:"passwordEnv,omitempty"`
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
		return GitConfig{}, fmt.Errorf("config %s: git: %w (accepted keys: author, message, batchWindow, credentials: [{prefix, username, passwordFile | passwordEnv}])", source, err)
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
		f := fmt.Sprintf("git.credentials[%d]", i)
		switch {
		case !strings.HasPrefix(c.Prefix, "https://") && !strings.HasPrefix(c.Prefix, "http://"):
			return &resolve.InputError{Field: f + ".prefix", Value: c.Prefix, Accepted: "an http(s):// repository URL prefix, e.g. https://git.example.com/org/"}
		case (c.PasswordFile == "") == (c.PasswordEnv == ""):
			return &resolve.InputError{Field: f, Value: c.Prefix, Accepted: "exactly one of passwordFile and passwordEnv"}
		}
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

// CredentialFor returns the username and password for repoURL (ok false when no
// prefix matches). The password is read now, so that a rotated secret is used at
// the next push; errors name the file or variable, never the value.
func (g GitConfig) CredentialFor(repoURL string) (user, password string, ok bool, err error) {
	best := -1
	for i, c := range g.Credentials {
		if strings.HasPrefix(repoURL, c.Prefix) && (best < 0 || len(c.Prefix) > len(g.Credentials[best].Prefix)) {
			best = i
		}
	}
	if best < 0 {
		return "", "", false, nil
	}
	c := g.Credentials[best]
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
