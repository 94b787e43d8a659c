package pin

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// gitError is an error whose message was built (and scrubbed of credentials)
// here; Unwrap gives the sentinel or context error it stands for, never the
// underlying library error whose text may hold a URL with credentials.
type gitError struct {
	msg string
	is  []error
}

func (e *gitError) Error() string   { return e.msg }
func (e *gitError) Unwrap() []error { return e.is }

// errKind says what a failed attempt means for the next one.
type errKind int

const (
	kindPermanent errKind = iota // stop: retrying cannot help
	kindRejected                 // the branch moved since it was fetched: fetch again and retry
	kindTransient                // network, server: retry after a pause
)

// attemptError is a failed attempt.
type attemptError struct {
	kind   errKind
	local  bool   // a failure of the content (a file, a pin, the message), not of git: no push was tried
	branch string // the branch, once resolved
	err    error
	// retryAfter is the least pause before the next attempt (a forge's
	// Retry-After), 0 when none was asked.
	retryAfter time.Duration
}

// remote is one repository and the credentials for it.
type remote struct {
	url      string // as given
	shown    string // url without credentials, for messages and logs
	auth     transport.AuthMethod
	hasCreds bool     // auth, or credentials in the URL
	secrets  []string // credentials to scrub from library messages
}

func newRemote(repoURL string, auth transport.AuthMethod) *remote {
	r := &remote{url: repoURL, shown: redactURL(repoURL), auth: auth, hasCreds: auth != nil}
	if u, err := url.Parse(repoURL); err == nil && u.User != nil {
		r.hasCreds = true
		if p, ok := u.User.Password(); ok {
			r.secrets = append(r.secrets, p, url.QueryEscape(p), url.PathEscape(p))
		}
	}
	switch a := auth.(type) {
	case *githttp.BasicAuth:
		if a != nil {
			r.secrets = append(r.secrets, a.Password)
		}
	case *githttp.TokenAuth:
		if a != nil {
			r.secrets = append(r.secrets, a.Token)
		}
	}
	return r
}

// redactURL drops the password of a URL's user information.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}

// scrub removes every credential of the remote from a library's message.
func (r *remote) scrub(s string) string {
	for _, secret := range r.secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "xxxxx")
		}
	}
	if r.shown != r.url {
		s = strings.ReplaceAll(s, r.url, r.shown)
	}
	return s
}

// describe turns a library error met while doing what into a message naming the
// repository, scrubbed, with the sentinel it stands for.
func (r *remote) describe(what string, err error) *attemptError {
	var is error
	kind := kindTransient
	var msg string
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		is, kind = err, kindPermanent
		msg = fmt.Sprintf("git repository %s: %s: %v", r.shown, what, err)
	case errors.Is(err, transport.ErrAuthenticationRequired):
		is, kind = ErrCredentials, kindPermanent
		if !r.hasCreds {
			msg = fmt.Sprintf("git repository %s requires credentials and none are configured for it (%s)", r.shown, what)
		} else {
			msg = fmt.Sprintf("git repository %s refused the credentials configured for it: authentication failed (%s)", r.shown, what)
		}
	case errors.Is(err, transport.ErrAuthorizationFailed):
		is, kind = ErrCredentials, kindPermanent
		msg = fmt.Sprintf("git repository %s refused access with the credentials configured for it (%s): they may lack read or write permission", r.shown, what)
	case errors.Is(err, transport.ErrRepositoryNotFound):
		kind = kindPermanent
		msg = fmt.Sprintf("git repository %s not found (%s): check the app's repository URL and that the credentials may read it", r.shown, what)
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
		is, kind = ErrBranchNotFound, kindPermanent
		msg = fmt.Sprintf("git repository %s is empty: it has no branch to commit pins to", r.shown)
	case strings.Contains(err.Error(), "host key verification failed") || strings.Contains(err.Error(), "ssh: unable to authenticate"):
		// ssh refusals (golang.org/x/crypto/ssh gives no sentinel): retrying the same
		// key or known_hosts cannot help.
		is, kind = ErrCredentials, kindPermanent
		msg = fmt.Sprintf("git repository %s: %s: %v", r.shown, what, err)
	default:
		msg = fmt.Sprintf("git repository %s: %s: %v", r.shown, what, err)
	}
	return &attemptError{kind: kind, err: &gitError{msg: r.scrub(msg), is: errs(is)}}
}
