package pin

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge"
)

// ensure makes each group's pull request carry its pins, with at most one
// request per group: a new branch's pull request is opened; an existing
// branch's is updated when its pins changed, by the number this writer knows
// (it opened or listed it before), else the open pull requests are listed once
// for all such groups. prParallelism requests at a time.
func (p *prTarget) ensure(ctx context.Context, base string, groups []*prGroup) ([]PullRequestResult, *attemptError) {
	if len(groups) == 0 {
		return nil, nil
	}
	byHead := map[string]forge.PullRequest{}
	if p.needListing(groups) {
		open, err := p.forge.Forge.OpenPullRequests(ctx, p.forge.Repo, BranchPrefix)
		if err != nil {
			return nil, p.forgeFailed("list the open pull requests", err)
		}
		for _, pr := range open {
			if pr.Base == base {
				byHead[pr.Head] = pr
			}
		}
	}
	results := make([]PullRequestResult, len(groups))
	errs := make([]error, len(groups))
	sem := make(chan struct{}, prParallelism)
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = p.ensureOne(ctx, base, g, byHead)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return results, p.forgeFailed("open or update a pull request", err)
		}
	}
	return results, nil
}

// needListing says whether a group's branch exists with no pull request
// number known to this writer: only the forge can say whether one is open.
func (p *prTarget) needListing(groups []*prGroup) bool {
	for _, g := range groups {
		if n, _ := p.w.prs.number(p.remote.url, g.branch); !g.tip.IsZero() && n == 0 {
			return true
		}
	}
	return false
}

// ensureOne opens or updates one group's pull request. A branch that already
// carried these pins, with no open pull request, was closed or merged by a
// person: it is not opened again (unless this writer pushed it and failed to
// open its pull request).
func (p *prTarget) ensureOne(ctx context.Context, base string, g *prGroup, byHead map[string]forge.PullRequest) (PullRequestResult, error) {
	res := PullRequestResult{Group: g.name, Branch: g.branch, Base: base, Apps: g.apps, Commit: g.commit.String()}
	spec, err := p.spec(base, g)
	if err != nil {
		return res, err
	}
	pending := p.w.prs.isPending(p.remote.url, g.branch, g.commit)
	listed, isOpen := byHead[g.branch]
	known, said := p.w.prs.number(p.remote.url, g.branch)
	var pr forge.PullRequest
	switch {
	case isOpen && listed.Title == spec.Title && strings.TrimSpace(listed.Body) == strings.TrimSpace(spec.Body):
		res.Action, pr = PRUnchanged, listed
	case isOpen:
		res.Action = PRUpdated
		pr, err = p.update(ctx, listed.Number, spec)
	case known != 0 && !g.tip.IsZero() && !pending && said == specSum(spec):
		res.Action, pr.Number = PRUnchanged, known
	case known != 0 && !g.tip.IsZero() && (g.pushed || !pending):
		// a newer pin (pushed here, or by another replica whose update this
		// writer has not seen): the same pull request, updated
		res.Action = PRUpdated
		if pr, err = p.update(ctx, known, spec); err == nil && pr.State != forge.StateOpen {
			res.Action = PRCreated // closed since: a newer pin opens a new one
			pr, err = p.forge.Forge.Create(ctx, p.forge.Repo, spec)
		}
	case !g.pushed && !pending:
		res.Action = PRNotReopened
		return res, nil
	default:
		res.Action = PRCreated
		pr, err = p.createOrAdopt(ctx, spec, &res)
	}
	if err != nil && pr.Number == 0 {
		return res, err
	}
	if err != nil {
		// opened, and a later step (labels, assignees, reviewers, auto-merge)
		// failed: the pull request stands; asking again would open another
		p.w.log.Warn("pins pull request opened without all its settings", "repository", p.remote.shown, "branch", g.branch,
			"number", pr.Number, "error", err.Error())
	}
	p.w.prs.opened(p.remote.url, g.branch, pr.Number, specSum(spec))
	res.Number, res.URL = pr.Number, pr.URL
	return res, nil
}

// createOrAdopt opens spec's pull request; when the forge says one is open
// already from that branch (another replica opened it a moment ago), that one
// is adopted and updated if it differs.
func (p *prTarget) createOrAdopt(ctx context.Context, spec forge.Spec, res *PullRequestResult) (forge.PullRequest, error) {
	pr, err := p.forge.Forge.Create(ctx, p.forge.Repo, spec)
	if err == nil || !errors.Is(err, forge.ErrInvalid) {
		return pr, err
	}
	open, lerr := p.forge.Forge.OpenPullRequests(ctx, p.forge.Repo, spec.Head)
	if lerr != nil {
		return pr, err
	}
	for _, o := range open {
		if o.Head != spec.Head || o.Base != spec.Base {
			continue
		}
		if o.Title == spec.Title && strings.TrimSpace(o.Body) == strings.TrimSpace(spec.Body) {
			res.Action = PRUnchanged
			return o, nil
		}
		res.Action = PRUpdated
		return p.update(ctx, o.Number, spec)
	}
	return pr, err
}

// update edits pull request number to carry spec. A 409 there is another
// replica editing the same pull request at that moment (Gitea: "the issue is
// already changed"): an editConflict, which the next attempt reads again.
func (p *prTarget) update(ctx context.Context, number int, spec forge.Spec) (forge.PullRequest, error) {
	pr, err := p.forge.Forge.Update(ctx, p.forge.Repo, number, spec)
	var fe *forge.Error
	if errors.As(err, &fe) && fe.Status == http.StatusConflict {
		err = editConflict{err}
	}
	return pr, err
}

// editConflict is a forge's 409 on an update of a pull request (see update).
type editConflict struct{ error }

func (e editConflict) Unwrap() error { return e.error }

// forgeFailed is a failed attempt for a forge's refusal: retried when the
// forge may answer later (after its Retry-After) or another replica's edit
// crossed ours, else permanent.
func (p *prTarget) forgeFailed(what string, err error) *attemptError {
	kind := kindPermanent
	if forge.Retryable(err) || errors.As(err, new(editConflict)) {
		kind = kindTransient
	}
	msg := p.remote.scrub(fmt.Sprintf("git repository %s: %s on %s: %v", p.remote.shown, what, p.forge.Forge.Kind(), err))
	return &attemptError{kind: kind, err: &gitError{msg: msg, is: []error{ErrForge, err}}, retryAfter: forge.RetryAfter(err)}
}

// ErrForge: the forge refused or failed a pull request's request (errors.As
// with *forge.Error gives its answer).
var ErrForge = errors.New("forge request failed")

// maxKnownPRs bounds the pull request numbers a writer remembers.
const maxKnownPRs = 100000

// knownPRs is what a writer knows of its pull requests, by repository and
// branch: the number of the one it opened or listed and a sum of the title
// and body it last gave it, and the commits it pushed whose pull request is
// not open yet.
type knownPRs struct {
	mu     sync.Mutex
	prs    map[string]knownPR
	toOpen map[string]plumbing.Hash
}

type knownPR struct {
	number int
	spec   [sha256.Size]byte
}

// specSum identifies a pull request's title and body.
func specSum(s forge.Spec) [sha256.Size]byte {
	return sha256.Sum256([]byte(s.Title + "\x00" + strings.TrimSpace(s.Body)))
}

func (k *knownPRs) number(repo, branch string) (int, [sha256.Size]byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	pr := k.prs[repo+"\x00"+branch]
	return pr.number, pr.spec
}

// markPushed records that this writer pushed commit to branch: its pull
// request is this writer's to open, in this attempt or the next.
func (k *knownPRs) markPushed(repo, branch string, commit plumbing.Hash) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.toOpen == nil {
		k.toOpen = map[string]plumbing.Hash{}
	}
	k.toOpen[repo+"\x00"+branch] = commit
}

// isPending reports whether the pull request of branch at commit is still to
// be opened by this writer (it pushed that commit: now, or in an earlier
// attempt whose pull request failed).
func (k *knownPRs) isPending(repo, branch string, commit plumbing.Hash) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.toOpen[repo+"\x00"+branch] == commit
}

// opened records branch's open pull request and the title and body it has.
func (k *knownPRs) opened(repo, branch string, number int, spec [sha256.Size]byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := repo + "\x00" + branch
	delete(k.toOpen, key)
	if k.prs == nil || len(k.prs) >= maxKnownPRs {
		k.prs = map[string]knownPR{}
	}
	k.prs[key] = knownPR{number: number, spec: spec}
}
