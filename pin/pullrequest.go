package pin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge"
)

// BranchPrefix starts the name of every branch the resolver owns: the head
// branches of its pull requests. No other branch is ever force-pushed.
const BranchPrefix = "image-resolver/"

// Pull request actions (PullRequestResult.Action).
const (
	PRCreated     = "created"             // opened
	PRUpdated     = "updated"             // the open one's branch, title or body changed
	PRUnchanged   = "unchanged"           // the open one already carries these pins
	PRNotReopened = "closed-not-reopened" // closed or merged by a person with these very pins: not opened again
)

// prParallelism bounds the forge requests of one write made at once.
const prParallelism = 4

// ForgeRepo is where a repository's pull requests are opened, and how.
type ForgeRepo struct {
	Forge forge.Forge
	// Repo is the repository's path on the forge (owner/name).
	Repo string
	// Labels, Reviewers and Assignees are set on the pull requests opened.
	Labels, Reviewers, Assignees []string
	// AutoMerge asks the forge to merge once its checks pass.
	AutoMerge bool
}

// WithForges sets how pull requests reach a repository's forge (pin-push
// pull-request): forgeFor returns the forge of repoURL, or an error naming the
// repository when none is configured. It is called at every write.
func WithForges(forgeFor func(repoURL string) (ForgeRepo, error)) WriterOption {
	return func(w *Writer) { w.forgeFor = forgeFor }
}

// PullRequestResult is one pull request a PushPullRequest write opened,
// updated or left alone.
type PullRequestResult struct {
	// Group is the app (pin-pr-group app) or "repository".
	Group string
	// Branch is the resolver's branch the pull request merges; Base the branch
	// it merges into.
	Branch, Base string
	// Apps are the apps whose pins it carries.
	Apps []string
	// Action is PRCreated, PRUpdated, PRUnchanged or PRNotReopened.
	Action string
	Number int
	URL    string
	// Commit is the head branch's commit; BaseCommit the base tip it was
	// checked against (a merge moves the base from there).
	Commit, BaseCommit string
}

// groupBranch names the branch of a pull request group: image-resolver/<app>,
// or image-resolver/repository-<base> for GroupRepository.
func groupBranch(group, app, base string) (string, error) {
	name := BranchPrefix + app
	if group == GroupRepository {
		name = BranchPrefix + "repository-" + strings.ReplaceAll(base, "/", "-")
	}
	if err := checkBranchName(name); err != nil {
		return "", fmt.Errorf("pull request branch for app %q: %w", app, err)
	}
	return name, nil
}

// prGroup is one pull request's worth of edits, and what an attempt made of it.
type prGroup struct {
	name, branch string
	edits        []Edit
	apps         []string
	applied      []appliedPin
	tip          plumbing.Hash // the branch's tip before the attempt (zero: none)
	commit       plumbing.Hash // the branch's tip the pull request is to carry
	pushed       bool          // the attempt (re)built and pushed the branch
}

// prTarget is what one attempt of a pull-request write works on.
type prTarget struct {
	*target
	// ctx is the write's: the forge requests of an attempt are bounded by
	// their own budget (forgeBudget), not the attempt's git timeout.
	ctx   context.Context
	w     *Writer
	group string // GroupApp or GroupRepository
	forge ForgeRepo
}

func (w *Writer) newPRTarget(ctx context.Context, t *target, key queueKey) (*prTarget, error) {
	if w.forgeFor == nil {
		return nil, fmt.Errorf("git repository %s: pin-push %s needs a forge to open pull requests on, and the sidecar has none configured (git.forges: [{prefix, kind, api, tokenFile}])",
			t.remote.shown, PushPullRequest)
	}
	fr, err := w.forgeFor(key.repo)
	if err != nil {
		return nil, fmt.Errorf("git repository %s: pin-push %s: %w", t.remote.shown, PushPullRequest, err)
	}
	return &prTarget{target: t, ctx: ctx, w: w, group: key.group, forge: fr}, nil
}

// run makes one attempt: for each group, the base branch's tip with the
// group's pins, pushed to the group's branch when its pins changed (forced,
// with a lease on the tip seen), then one listing of the open pull requests
// and one request per group whose pull request is to be opened or updated.
func (p *prTarget) run(ctx context.Context, now time.Time) (_ *attempt, aerr *attemptError) {
	repo, rem, done, aerr := p.open()
	if aerr != nil {
		return nil, aerr
	}
	defer done()
	tips, def, aerr := p.tips(ctx, rem)
	if aerr != nil {
		return nil, aerr
	}
	base := p.branch
	if base == defaultBranch {
		base = def
	}
	if base == "" || tips[base].IsZero() {
		return nil, &attemptError{kind: kindPermanent, err: &gitError{is: []error{ErrBranchNotFound},
			msg: fmt.Sprintf("git repository %s has no branch %q to open pull requests against", p.remote.shown, p.branch)}}
	}
	out := &attempt{branch: base}
	defer func() {
		if aerr != nil {
			aerr.branch = base
		}
	}()
	baseTip, aerr := p.fetch(ctx, repo, base)
	if aerr != nil {
		return nil, aerr
	}
	groups, aerr := p.build(ctx, repo, base, baseTip, tips, now, out)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := p.pushBranches(ctx, repo, rem, groups); aerr != nil {
		return nil, aerr
	}
	ectx, cancel := context.WithTimeout(p.ctx, forgeBudget(len(groups)))
	defer cancel()
	out.prs, aerr = p.ensure(ectx, base, groups)
	for i := range out.prs {
		out.prs[i].BaseCommit = baseTip.String()
	}
	return out, aerr
}

// forgeBudget bounds the forge requests of an attempt with n pull requests:
// each request has forge.DefaultTimeout, prParallelism at a time.
func forgeBudget(n int) time.Duration {
	return forge.DefaultTimeout * time.Duration(2+(n+prParallelism-1)/prParallelism)
}

// pushedOurs records the branches this writer's push created or moved (all
// pushed groups when tips is nil, else those at our commit in tips): their
// pull requests are this writer's to open, in this attempt or the next.
func (p *prTarget) pushedOurs(groups []*prGroup, tips map[string]plumbing.Hash) {
	for _, g := range groups {
		if g.pushed && (tips == nil || tips[g.branch] == g.commit) {
			p.w.prs.markPushed(p.remote.url, g.branch, g.commit)
		}
	}
}

// groups splits the edits into pull requests: one per app, or one for all.
func (p *prTarget) groups(base string) ([]*prGroup, *attemptError) {
	byName := map[string]*prGroup{}
	var out []*prGroup
	for _, e := range p.edits {
		name := e.App
		if p.group == GroupRepository {
			name = GroupRepository
		}
		g := byName[name]
		if g == nil {
			branch, err := groupBranch(p.group, e.App, base)
			if err != nil {
				return nil, &attemptError{kind: kindPermanent, local: true, err: err}
			}
			g = &prGroup{name: name, branch: branch}
			byName[name] = g
			out = append(out, g)
		}
		g.edits = append(g.edits, e)
		if len(g.apps) == 0 || g.apps[len(g.apps)-1] != e.App {
			g.apps = append(g.apps, e.App)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].branch < out[j].branch })
	return out, nil
}

// build makes each group's commit on the base tip, unless the group's branch
// already holds the very files (then its tip is kept), and notes in out the
// pins applied and left alone.
func (p *prTarget) build(ctx context.Context, repo *git.Repository, base string, baseTip plumbing.Hash, tips map[string]plumbing.Hash, now time.Time, out *attempt) ([]*prGroup, *attemptError) {
	groups, aerr := p.groups(base)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := p.fetchBranches(ctx, repo, groups, tips); aerr != nil {
		return nil, aerr
	}
	tree, aerr := p.baseTree(repo, baseCommit{from: base, tip: baseTip, exists: true})
	if aerr != nil {
		return nil, aerr
	}
	var kept []*prGroup
	for _, g := range groups {
		sub := *p.target
		sub.edits = g.edits
		sub.message = p.signedOff
		gout := &attempt{branch: base}
		changed, aerr := sub.applyEdits(repo.Storer, baseTip, tree, gout)
		if aerr != nil {
			return nil, aerr
		}
		out.conflicts = append(out.conflicts, gout.conflicts...)
		out.held, out.lifted = append(out.held, gout.held...), append(out.lifted, gout.lifted...)
		if len(changed) == 0 {
			continue // base holds these pins already (a merged pull request), or a person's edit won
		}
		g.applied, g.tip = gout.applied, tips[g.branch]
		out.applied = append(out.applied, gout.applied...)
		kept = append(kept, g)
		if !g.tip.IsZero() && holdsFiles(repo, g.tip, changed) {
			g.commit = g.tip
			continue
		}
		if aerr := sub.commit(repo.Storer, tree, changed, baseTip, now, gout); aerr != nil {
			return nil, aerr
		}
		if err := repo.Storer.SetReference(plumbing.NewHashReference(plumbing.NewBranchReferenceName(g.branch), gout.commit)); err != nil {
			return nil, &attemptError{kind: kindPermanent, local: true, err: err}
		}
		g.commit, g.pushed = gout.commit, true
	}
	return kept, nil
}

// signedOff is the commit message of a pull request branch: the writer's, with
// a trailer naming this writer, so that two replicas building the same pins at
// the same second make different commits and only one creates the branch
// (the other's push is refused, and it adopts the winner's pull request).
func (p *prTarget) signedOff(branch string, applied []appliedPin) (string, error) {
	msg, err := p.message(branch, applied)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(msg, "\n") + "\n\nImage-Resolver-Writer: " + p.w.id + "\n", nil
}

// holdsFiles reports whether commit tip carries exactly the changed files'
// contents, whatever base it was built on (a base that moved since does not
// make the resolver rebuild a branch whose pins did not change).
func holdsFiles(repo *git.Repository, tip plumbing.Hash, changed map[string][]byte) bool {
	c, err := repo.CommitObject(tip)
	if err != nil {
		return false
	}
	tree, err := c.Tree()
	if err != nil {
		return false
	}
	for path, want := range changed {
		got, err := readFile(repo.Storer, tree, path)
		if err != nil || string(got) != string(want) {
			return false
		}
	}
	return true
}

// fetchBranches fetches the tips of the groups' branches that exist (depth 1),
// in one fetch.
func (p *prTarget) fetchBranches(ctx context.Context, repo *git.Repository, groups []*prGroup, tips map[string]plumbing.Hash) *attemptError {
	var specs []gitconfig.RefSpec
	for _, g := range groups {
		if !tips[g.branch].IsZero() {
			ref := plumbing.NewBranchReferenceName(g.branch)
			specs = append(specs, gitconfig.RefSpec("+"+ref.String()+":"+plumbing.NewRemoteReferenceName("origin", g.branch).String()))
		}
	}
	if len(specs) == 0 {
		return nil
	}
	err := repo.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", RefSpecs: specs, Depth: 1, Auth: p.remote.auth, Tags: git.NoTags})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) && !errors.Is(err, git.NoMatchingRefSpecError{}) {
		return p.remote.describe("fetch the pull request branches", err)
	}
	return nil
}

// pushBranches pushes the rebuilt branches in one push: a new one created
// (never forced), an existing one forced with a lease on the tip seen (a
// branch another replica moved or created since is not overwritten: the
// attempt is rejected and made again).
func (p *prTarget) pushBranches(ctx context.Context, repo *git.Repository, rem *git.Remote, groups []*prGroup) *attemptError {
	opts := &git.PushOptions{RemoteName: "origin", Auth: p.remote.auth}
	for _, g := range groups {
		if !g.pushed {
			continue
		}
		ref := plumbing.NewBranchReferenceName(g.branch).String()
		if g.tip.IsZero() {
			// created, never forced: of two replicas creating it at once, one
			// wins; the other finds it and adopts its pull request
			opts.RefSpecs = append(opts.RefSpecs, gitconfig.RefSpec(ref+":"+ref))
			continue
		}
		opts.RefSpecs = append(opts.RefSpecs, gitconfig.RefSpec("+"+ref+":"+ref))
		opts.RequireRemoteRefs = append(opts.RequireRemoteRefs, gitconfig.RefSpec(g.tip.String()+":"+ref))
	}
	if len(opts.RefSpecs) == 0 {
		return nil
	}
	err := repo.PushContext(ctx, opts)
	if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
		p.pushedOurs(groups, nil)
		return nil
	}
	tips, _, lerr := p.tips(ctx, rem)
	if lerr != nil || ctx.Err() != nil {
		return p.remote.describe("push the pull request branches", err)
	}
	// A push of several branches is not atomic: those that took this
	// writer's commit are its own to open pull requests for, whatever the
	// others did (commits name their writer, so a tip equal to ours is ours).
	p.pushedOurs(groups, tips)
	landed := true
	for _, g := range groups {
		if g.pushed && tips[g.branch] != g.commit {
			landed = false
			if tips[g.branch] != g.tip {
				return &attemptError{kind: kindRejected, err: &gitError{msg: p.remote.scrub(fmt.Sprintf(
					"git repository %s: push to branch %q rejected: it moved from %s to %s since it was fetched (%v)",
					p.remote.shown, g.branch, short(g.tip), short(tips[g.branch]), err))}}
			}
		}
	}
	if landed {
		return nil
	}
	return p.remote.describe("push the pull request branches", err)
}

// succeededPR counts and logs a pull-request write's attempt that succeeded.
func (w *Writer) succeededPR(rem *remote, res Result, a *attempt) Result {
	res.PullRequests = a.prs
	for _, pr := range a.prs {
		w.metrics.pullRequests.WithLabelValues(pr.Action).Inc()
		w.log.Info("pins pull request "+pr.Action, "repository", rem.shown, "base", pr.Base, "branch", pr.Branch,
			"apps", pr.Apps, "number", pr.Number, "url", pr.URL, "commit", pr.Commit, "attempts", res.Attempts)
	}
	return res
}
