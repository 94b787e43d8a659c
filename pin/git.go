package pin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage"
)

// Errors a Write can be tested for with errors.Is. The messages of the errors
// returned name the repository and branch; they never carry a credential.
var (
	// ErrBranchNotFound: the branch to commit to does not exist (and the writer
	// may not create it), or the repository has no default branch.
	ErrBranchNotFound = errors.New("branch not found")
	// ErrCredentials: the repository asked for credentials and refused the ones
	// given, or none were configured for it.
	ErrCredentials = errors.New("credentials refused")
	// ErrPushRefused: the server refused the update itself (a protected branch,
	// a hook): retrying cannot help; pin-push pull-request may.
	ErrPushRefused = errors.New("push refused by the server")
	// ErrNotPushed: every attempt failed (the last reason is in the message).
	ErrNotPushed = errors.New("pins not pushed")
)

// maxFileSize bounds what is read of a file to edit (a values file or an overlay
// is a few KiB).
const maxFileSize = 8 << 20

// defaultBranch stands for "the remote's default branch" in a Change.
const defaultBranch = ""

// normalizeBranch returns the branch name Change.Branch means ("" for the
// remote's default branch).
func normalizeBranch(b string) string {
	b = strings.TrimSpace(b)
	if b == "HEAD" {
		return defaultBranch
	}
	return strings.TrimPrefix(b, "refs/heads/")
}

// target is what one attempt works on.
type target struct {
	remote *remote
	branch string // as asked: "" for the default branch
	create bool   // a missing branch may be created from the default branch
	edits  []Edit
	author object.Signature
	signer Signer // nil: the commit is not signed
	// maxBytes bounds what the attempt fetches and holds of the repository
	// (store.go).
	maxBytes int64
	// holdHistory is how many commits of the branch are read for a person's
	// revert of a pin (holds.go); 0: none.
	holdHistory int
	// message builds the commit message from what was applied.
	message func(branch string, applied []appliedPin) (string, error)
}

// appliedPin is a pin set by an attempt, with what it replaced.
type appliedPin struct {
	App, File string
	Pin       Pin
	Old       string
}

// conflictPin is a pin left alone because the file held another reference.
type conflictPin struct {
	App, File string
	Pin       Pin
	Theirs    string // the reference the file holds ("" when it holds no pin)
	Base      string // the reference ours replaced
}

// attempt is the outcome of one successful attempt.
type attempt struct {
	branch    string // the branch committed to (resolved)
	commit    plumbing.Hash
	applied   []appliedPin
	conflicts []conflictPin
	prs       []PullRequestResult // a pull-request write's pull requests
	held      []heldPin           // pins not applied: their reference is held
	lifted    []heldPin           // holds removed: their alias got another pin
}

// tips lists the repository's branches: name -> tip, and the default branch.
func (t *target) tips(ctx context.Context, rem *git.Remote) (map[string]plumbing.Hash, string, *attemptError) {
	refs, err := rem.ListContext(ctx, &git.ListOptions{Auth: t.remote.auth})
	if err != nil {
		return nil, "", t.remote.describe("list branches", err)
	}
	tips := map[string]plumbing.Hash{}
	def := ""
	for _, ref := range refs {
		switch {
		case ref.Name() == plumbing.HEAD && ref.Type() == plumbing.SymbolicReference:
			def = ref.Target().Short()
		case ref.Name().IsBranch() && ref.Type() == plumbing.HashReference:
			tips[ref.Name().Short()] = ref.Hash()
		}
	}
	return tips, def, nil
}

// run makes one attempt: fetch the branch's tip (on disk, bounded; depth 1,
// or the history holds read), apply the
// edits to it, commit, and push the commit to that branch only, as a
// fast-forward of the tip fetched (never forced).
func (t *target) run(ctx context.Context, now time.Time) (_ *attempt, aerr *attemptError) {
	branch := t.branch
	defer func() {
		if aerr != nil && branch != defaultBranch {
			aerr.branch = branch
		}
	}()
	repo, rem, done, aerr := t.open()
	if aerr != nil {
		return nil, aerr
	}
	defer done()
	// A named branch is fetched straight away (its advertisement is the only
	// listing needed); the default branch needs the list of branches and HEAD
	// first, and so does a missing branch the writer may create (fetchBase).
	if branch == defaultBranch {
		def, aerr := t.resolveDefault(ctx, rem)
		if aerr != nil {
			return nil, aerr
		}
		branch = def
	}
	base, aerr := t.fetchBase(ctx, repo, rem, branch)
	if aerr != nil {
		return nil, aerr
	}
	tree, aerr := t.baseTree(repo, base)
	if aerr != nil {
		return nil, aerr
	}
	out := &attempt{branch: branch}
	changed, aerr := t.applyEdits(repo.Storer, base.tip, tree, out)
	if aerr != nil {
		return nil, aerr
	}
	if len(changed) == 0 {
		out.applied = nil
		return out, nil
	}
	if aerr := t.commit(repo.Storer, tree, changed, base.tip, now, out); aerr != nil {
		return nil, aerr
	}
	if aerr := t.push(ctx, repo, rem, base, out); aerr != nil {
		return nil, aerr
	}
	return out, nil
}

// open makes the repository an attempt works in (store.go: on disk, read
// lazily, bounded by t.maxBytes), with the remote "origin"; done removes it.
func (t *target) open() (_ *git.Repository, _ *git.Remote, done func(), _ *attemptError) {
	s, err := newBoundedStore(t.remote.shown, t.maxBytes)
	if err != nil {
		return nil, nil, nil, &attemptError{kind: kindTransient, local: true, err: err}
	}
	repo, err := git.Init(s, nil)
	if err != nil {
		s.close()
		return nil, nil, nil, &attemptError{kind: kindPermanent, err: err}
	}
	rem, err := repo.CreateRemote(&gitconfig.RemoteConfig{Name: "origin", URLs: []string{t.remote.url}})
	if err != nil {
		s.close()
		return nil, nil, nil, &attemptError{kind: kindPermanent, err: &gitError{msg: t.remote.scrub(fmt.Sprintf("git repository %s: %v", t.remote.shown, err))}}
	}
	return repo, rem, s.close, nil
}

// resolveDefault names the remote's default branch (the one HEAD names).
func (t *target) resolveDefault(ctx context.Context, rem *git.Remote) (string, *attemptError) {
	tips, def, aerr := t.tips(ctx, rem)
	if aerr != nil {
		return "", aerr
	}
	if def == "" || tips[def].IsZero() {
		return "", &attemptError{kind: kindPermanent, err: &gitError{is: []error{ErrBranchNotFound},
			msg: fmt.Sprintf("git repository %s has no default branch (HEAD names none): name the branch to commit pins to (pin-branch)", t.remote.shown)}}
	}
	return def, nil
}

// baseCommit is the commit an attempt builds on.
type baseCommit struct {
	from   string        // the branch whose tip it is
	tip    plumbing.Hash // from's tip, fetched
	exists bool          // the branch committed to exists (else it is created from the default branch)
}

// old is the branch's tip the push must fast-forward (zero: create it).
func (b baseCommit) old() plumbing.Hash {
	if b.exists {
		return b.tip
	}
	return plumbing.ZeroHash
}

// fetchBase fetches the tip of branch into repo; a missing branch the writer
// may create is created from the default branch's tip.
func (t *target) fetchBase(ctx context.Context, repo *git.Repository, rem *git.Remote, branch string) (baseCommit, *attemptError) {
	base := baseCommit{from: branch, exists: true}
	var aerr *attemptError
	base.tip, aerr = t.fetch(ctx, repo, base.from)
	if aerr != nil && errors.Is(aerr.err, ErrBranchNotFound) {
		if !t.create {
			return base, aerr
		}
		tips, def, lerr := t.tips(ctx, rem)
		switch {
		case lerr != nil:
			return base, lerr
		case !tips[branch].IsZero():
			return base, &attemptError{kind: kindRejected, err: &gitError{msg: fmt.Sprintf("git repository %s: branch %q was created since it was fetched", t.remote.shown, branch)}}
		case def == "" || tips[def].IsZero():
			return base, &attemptError{kind: kindPermanent, err: &gitError{is: []error{ErrBranchNotFound},
				msg: fmt.Sprintf("git repository %s has no branch %q, and no default branch to create it from", t.remote.shown, branch)}}
		}
		base.from, base.exists = def, false
		base.tip, aerr = t.fetch(ctx, repo, base.from)
	}
	return base, aerr
}

// baseTree reads the tree of the base commit.
func (t *target) baseTree(repo *git.Repository, base baseCommit) (*object.Tree, *attemptError) {
	parent, err := repo.CommitObject(base.tip)
	if err != nil {
		return nil, t.remote.describe(fmt.Sprintf("read the tip of branch %q", base.from), err)
	}
	tree, err := parent.Tree()
	if err != nil {
		return nil, t.remote.describe(fmt.Sprintf("read the tip of branch %q", base.from), err)
	}
	return tree, nil
}

// applyEdits applies the edits to the files of tree, the tree of the commit
// tip, noting in out the pins set, the pins left alone, and the pins held
// (holds.go: with t.holdHistory, tip's history is read for a person's revert),
// and returns the files whose content changed: path -> content.
func (t *target) applyEdits(s storer.EncodedObjectStorer, tip plumbing.Hash, tree *object.Tree, out *attempt) (map[string][]byte, *attemptError) {
	local := func(err error) *attemptError {
		return &attemptError{kind: kindPermanent, local: true, err: fmt.Errorf("git repository %s, branch %q: %w", t.remote.shown, out.branch, err)}
	}
	fs := newFileSet(s, tree)
	hist := newHistory(s, tip, t.holdHistory, t.author.Email)
	for _, e := range t.edits {
		p := e.File()
		content, err := fs.get(p)
		if err != nil {
			return nil, local(fmt.Errorf("app %s: %w", e.App, err))
		}
		plan, err := planHolds(fs, hist, e, content)
		if err != nil {
			return nil, local(err)
		}
		edited, applied, conflicts, err := ApplyEdit(content, plan.edit)
		if err != nil {
			return nil, local(err)
		}
		out.note(e, p, content, applied, conflicts)
		fs.set(p, edited)
		if err := plan.write(fs, applied, out); err != nil {
			return nil, local(err)
		}
	}
	return fs.changed(), nil
}

// note records what applying e to content, the file p, did: the pins applied,
// and the pins left alone because the file held another reference.
func (out *attempt) note(e Edit, p string, content []byte, applied, conflicts []Pin) {
	if len(conflicts) > 0 {
		theirs := currentRefs(content, e)
		for _, c := range conflicts {
			out.conflicts = append(out.conflicts, conflictPin{App: e.App, File: p, Pin: c, Theirs: theirs[c.Alias], Base: e.Base[c.Alias]})
		}
	}
	for _, a := range applied {
		out.applied = append(out.applied, appliedPin{App: e.App, File: p, Pin: a, Old: e.Base[a.Alias]})
	}
}

// commit writes the commit of the changed files on parent (signed when the
// target has a signer) and points the local branch out.branch at it; out.commit
// is its hash.
func (t *target) commit(s storage.Storer, tree *object.Tree, changed map[string][]byte, parent plumbing.Hash, now time.Time, out *attempt) *attemptError {
	treeHash, err := writeTree(s, tree, changed)
	if err != nil {
		return &attemptError{kind: kindPermanent, local: true, err: fmt.Errorf("git repository %s, branch %q: %w", t.remote.shown, out.branch, err)}
	}
	msg, err := t.commitMessage(out)
	if err != nil {
		return &attemptError{kind: kindPermanent, local: true, err: err}
	}
	sig := t.author
	sig.When = now
	commit := &object.Commit{Author: sig, Committer: sig, Message: msg, TreeHash: treeHash, ParentHashes: []plumbing.Hash{parent}}
	if t.signer != nil {
		if err := signCommit(commit, t.signer); err != nil {
			return &attemptError{kind: kindPermanent, local: true, err: fmt.Errorf("git repository %s, branch %q: sign the commit: %w", t.remote.shown, out.branch, err)}
		}
	}
	obj := s.NewEncodedObject()
	if err := commit.Encode(obj); err != nil {
		return &attemptError{kind: kindPermanent, err: err}
	}
	out.commit, err = s.SetEncodedObject(obj)
	if err != nil {
		return &attemptError{kind: kindPermanent, err: err}
	}
	local := plumbing.NewBranchReferenceName(out.branch)
	if err := s.SetReference(plumbing.NewHashReference(local, out.commit)); err != nil {
		return &attemptError{kind: kindPermanent, err: err}
	}
	return nil
}

// push pushes out.commit to out.branch only, never forced: as a fast-forward of
// base's tip when the branch exists, else creating it.
func (t *target) push(ctx context.Context, repo *git.Repository, rem *git.Remote, base baseCommit, out *attempt) *attemptError {
	local := plumbing.NewBranchReferenceName(out.branch)
	opts := &git.PushOptions{
		RemoteName: "origin",
		// this branch only, never forced (no leading +)
		RefSpecs: []gitconfig.RefSpec{gitconfig.RefSpec(local.String() + ":" + local.String())},
		Auth:     t.remote.auth,
	}
	if base.exists {
		// the remote branch must still be at the tip fetched (go-git checks the
		// advertisement; the server's ref update checks it again)
		opts.RequireRemoteRefs = []gitconfig.RefSpec{gitconfig.RefSpec(base.tip.String() + ":" + local.String())}
	}
	var said serverSaid
	opts.Progress = &said
	if err := repo.PushContext(ctx, opts); err != nil {
		if reason := said.errors(); reason != "" {
			err = fmt.Errorf("%w; the server said: %s", err, reason)
		}
		return t.pushFailed(ctx, rem, out.branch, base.old(), out.commit, err)
	}
	return nil
}

// fetch fetches branch's tip into repo and returns it, with as much history as
// reading holds needs (depth): a branch the remote does not have is
// ErrBranchNotFound.
func (t *target) fetch(ctx context.Context, repo *git.Repository, branch string) (plumbing.Hash, *attemptError) {
	tracking := plumbing.NewRemoteReferenceName("origin", branch)
	err := repo.FetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   []gitconfig.RefSpec{gitconfig.RefSpec("+" + plumbing.NewBranchReferenceName(branch).String() + ":" + tracking.String())},
		Depth:      t.depth(),
		Auth:       t.remote.auth,
		Tags:       git.NoTags,
	})
	var tooLarge *TooLargeError
	if errors.As(err, &tooLarge) {
		// fetching it again cannot help: refused, naming the bound and the setting
		return plumbing.ZeroHash, &attemptError{kind: kindPermanent, err: tooLarge}
	}
	if errors.Is(err, git.NoMatchingRefSpecError{}) {
		return plumbing.ZeroHash, &attemptError{kind: kindPermanent, err: &gitError{is: []error{ErrBranchNotFound},
			msg: fmt.Sprintf("git repository %s has no branch %q: pins are committed to an existing branch (create it, or set pin-branch to one)", t.remote.shown, branch)}}
	}
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return plumbing.ZeroHash, t.remote.describe(fmt.Sprintf("fetch branch %q", branch), err)
	}
	ref, err := repo.Reference(tracking, true)
	if err != nil {
		return plumbing.ZeroHash, t.remote.describe(fmt.Sprintf("fetch branch %q", branch), err)
	}
	return ref.Hash(), nil
}

// pushFailed says what a failed push means, from what the branch is now: at our
// commit, the push did land (its answer was lost); moved elsewhere, someone
// pushed in between (rejected: fetch again); unmoved, the server refused the
// update (a hook, a protected branch) or the network failed.
func (t *target) pushFailed(ctx context.Context, rem *git.Remote, branch string, old, ours plumbing.Hash, err error) *attemptError {
	if ctx.Err() != nil {
		ae := t.remote.describe(fmt.Sprintf("push to branch %q", branch), err)
		return ae
	}
	if errors.Is(err, transport.ErrAuthenticationRequired) || errors.Is(err, transport.ErrAuthorizationFailed) {
		ae := t.remote.describe(fmt.Sprintf("push to branch %q", branch), err)
		return ae
	}
	tips, _, lerr := t.tips(ctx, rem)
	if lerr == nil {
		now, exists := tips[branch]
		switch {
		case exists && now == ours:
			return nil
		case now != old || (!exists && !old.IsZero()):
			return &attemptError{kind: kindRejected, err: &gitError{msg: t.remote.scrub(fmt.Sprintf(
				"git repository %s: push to branch %q rejected: the branch moved from %s to %s since it was fetched (%v)",
				t.remote.shown, branch, short(old), short(now), err))}}
		}
		if refused(err) {
			return &attemptError{kind: kindPermanent, err: &gitError{is: []error{ErrPushRefused}, msg: t.remote.scrub(fmt.Sprintf(
				"git repository %s: the server refused the push to branch %q (%v): if the branch is protected (changes must arrive by pull request), set pin-push: %s (parameter pin-push, or pinPush in the policy file) and configure the forge in the sidecar's git.forges",
				t.remote.shown, branch, err, PushPullRequest))}}
		}
	}
	ae := t.remote.describe(fmt.Sprintf("push to branch %q", branch), err)
	return ae
}

func short(h plumbing.Hash) string {
	if h.IsZero() {
		return "(none)"
	}
	return h.String()[:12]
}

// currentRefs returns the references the file holds for e's aliases.
func currentRefs(content []byte, e Edit) map[string]string {
	images := map[string]string{}
	for _, p := range e.Pins {
		images[p.Alias] = p.Image
	}
	held, err := e.Target.Read(content, images)
	out := map[string]string{}
	if err != nil {
		return out
	}
	for a, p := range held {
		out[a] = p.Reference
	}
	return out
}

// checkPath checks a repository path the writer is to edit: relative,
// slash-separated, clean, with no . or .. element and nothing inside .git.
func checkPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
		return fmt.Errorf("file %q: not a relative file path in the repository", p)
	}
	for _, el := range strings.Split(p, "/") {
		switch {
		case el == "" || el == "." || el == "..":
			return fmt.Errorf("file %q: a path in the repository cannot have empty, . or .. elements", p)
		case strings.EqualFold(el, ".git"):
			return fmt.Errorf("file %q: a path in the repository cannot be inside .git", p)
		case strings.ContainsAny(el, "\x00\\"):
			return fmt.Errorf("file %q: a path in the repository cannot contain NUL or backslashes", p)
		}
	}
	return nil
}

// checkBranchName checks a branch name by git's rules (git check-ref-format
// --branch), so that a name cannot change what the push's refspec says.
func checkBranchName(b string) error {
	bad := func(why string) error {
		return fmt.Errorf("branch %q: %s (accepted: a branch name, or \"\" or HEAD for the repository's default branch)", b, why)
	}
	switch {
	case b == defaultBranch:
		return nil
	case b == "@" || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") || strings.HasSuffix(b, "."):
		return bad("a branch name cannot be @, start with - or /, nor end with / or .")
	case strings.HasSuffix(b, ".lock") || strings.Contains(b, "..") || strings.Contains(b, "//") || strings.Contains(b, "@{") || strings.Contains(b, "/."):
		return bad("a branch name cannot contain .., //, @{ or /., nor end with .lock")
	case strings.ContainsAny(b, " ~^:?*[\\\x7f"):
		return bad("a branch name cannot contain spaces or any of ~^:?*[\\")
	}
	for _, r := range b {
		if r < 0x20 {
			return bad("a branch name cannot contain control characters")
		}
	}
	return nil
}
