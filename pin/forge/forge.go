// Package forge opens and updates the pull requests (GitLab: merge requests) that
// carry pins when an app's pin-push is pull-request: one small interface, Forge,
// and one file per forge (GitHub through google/go-github, GitLab through
// gitlab-org/api/client-go, Gitea and Forgejo through code.gitea.io/sdk/gitea).
//
// A Forge never prints its token: errors carry the forge's answer (status and
// message) with the token scrubbed, and what the caller may do about it
// (errors.Is with ErrUnauthorized, ErrForbidden, ErrNotFound, ErrInvalid,
// ErrRateLimited; Retryable and RetryAfter).
package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Kinds of forge, as the configuration's git.forges[].kind spells them.
const (
	KindGitHub = "github"
	KindGitLab = "gitlab"
	KindGitea  = "gitea" // Forgejo too
)

// KindsAccepted describes the accepted kinds, for messages.
const KindsAccepted = "github, gitlab or gitea (Forgejo is gitea)"

// PR states.
const (
	StateOpen   = "open"
	StateClosed = "closed"
	StateMerged = "merged"
)

// PullRequest is a pull request (GitLab: merge request) as the forge reports it.
type PullRequest struct {
	// Number is the pull request's number (GitLab: the merge request's iid).
	Number int
	// URL is its web page.
	URL string
	// Head and Base are the branches it merges from and into.
	Head, Base string
	// HeadSHA is the head branch's commit the forge knows.
	HeadSHA string
	Title   string
	Body    string
	// State is StateOpen, StateClosed or StateMerged.
	State string
}

// Spec is the pull request the resolver wants: opened when none is open for
// Head, else the open one is updated to it.
type Spec struct {
	Head, Base  string
	Title, Body string
	// Labels, Reviewers and Assignees are names (labels; user logins); a forge
	// that takes IDs looks them up. Set when the pull request is opened.
	Labels, Reviewers, Assignees []string
	// AutoMerge asks the forge to merge once its checks pass (GitHub auto-merge,
	// GitLab merge when the pipeline succeeds, Gitea merge when checks succeed).
	AutoMerge bool
}

// Forge opens and updates pull requests of repositories on one forge. repo is
// the repository's path as the forge's API spells it: owner/name (GitLab:
// group/subgroup/name).
type Forge interface {
	// Kind is KindGitHub, KindGitLab or KindGitea.
	Kind() string
	// OpenPullRequests lists the open pull requests of repo whose head branch
	// is in repo itself (not a fork) and starts with headPrefix, every page.
	OpenPullRequests(ctx context.Context, repo, headPrefix string) ([]PullRequest, error)
	// Create opens a pull request from spec.Head into spec.Base, with the
	// labels, reviewers and assignees named, and auto-merge when asked.
	Create(ctx context.Context, repo string, spec Spec) (PullRequest, error)
	// Update sets the title and body of the open pull request number.
	Update(ctx context.Context, repo string, number int, spec Spec) (PullRequest, error)
}

// Errors a Forge's answers can be tested for with errors.Is.
var (
	ErrUnauthorized = errors.New("the forge refused the token (401)")
	ErrForbidden    = errors.New("the token may not do this (403)")
	ErrNotFound     = errors.New("not found on the forge (404)")
	ErrInvalid      = errors.New("the forge refused the request as invalid (422)")
	ErrRateLimited  = errors.New("rate limited by the forge")
)

// Error is a forge's refusal: what was asked, and the forge's answer.
type Error struct {
	Kind   string // KindGitHub, ...
	Op     string // e.g. "create pull request"
	Repo   string
	Status int    // the HTTP status (0: no answer)
	Detail string // the forge's message, the token scrubbed, bounded
	// RetryAfter is how long the forge asked to wait (Retry-After, or the
	// rate limit's reset), 0 when it said nothing.
	RetryAfter time.Duration
	Err        error // the cause (a sentinel above, or a transport error)
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %s of %s", e.Kind, e.Op, e.Repo)
	if e.Status != 0 {
		msg += fmt.Sprintf(": HTTP %d", e.Status)
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Status == 0 && e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable says whether asking again later may succeed: rate limits, 5xx,
// and no answer at all; never 401, 403 (not a rate limit), 404 or 422.
func Retryable(err error) bool {
	var fe *Error
	if !errors.As(err, &fe) {
		return false
	}
	return errors.Is(err, ErrRateLimited) || fe.Status == 0 || fe.Status >= http.StatusInternalServerError
}

// RetryAfter is how long the forge asked to wait before asking again (0: it
// said nothing).
func RetryAfter(err error) time.Duration {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.RetryAfter
	}
	return 0
}
