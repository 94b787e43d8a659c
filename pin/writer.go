package pin

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
)

// Change is an edit of pins to commit to an app's repository.
type Change struct {
	// RepoURL is the app's source repository (ARGOCD_APP_SOURCE_REPO_URL).
	RepoURL string
	// Branch is the branch to commit to; "" or "HEAD" means the remote's
	// default branch. A leading refs/heads/ is dropped.
	Branch string
	Edit   Edit
	// Push is how the pins reach Branch: PushDirect ("" too), a commit pushed
	// to it, or PushPullRequest, a pull request from the resolver's own branch
	// (see WithForges).
	Push string
	// PRGroup, with PushPullRequest, is what one pull request carries:
	// GroupApp ("" too), the app's pins (branch image-resolver/<app>), or
	// GroupRepository, every app's pins of the repository and branch (branch
	// image-resolver/repository-<branch>).
	PRGroup string
}

// Pin push modes (Change.Push) and pull request groups (Change.PRGroup), as the
// pin-push and pin-pr-group parameters spell them.
const (
	PushDirect      = "direct"
	PushPullRequest = "pull-request"
	GroupApp        = "app"
	GroupRepository = "repository"
)

// Result is what a Write did.
type Result struct {
	// Commit is the commit pushed ("" when nothing was to commit).
	Commit string
	// Branch is the branch committed to (the default branch resolved).
	Branch string
	// Applied are the pins the commit set; Conflicts those left alone because
	// the file held another reference than the one they replace (a person's
	// edit: theirs wins). Pins the file already held are in neither.
	Applied, Conflicts []Pin
	// Held are the pins not written because their reference is held: a
	// held: entry of the pins file names it, or the branch's history shows a
	// person replaced it (Edit.DetectHolds; the commit then writes that
	// held: entry).
	Held []Hold
	// Pushed says a commit was pushed.
	Pushed bool
	// Attempts counts the fetch-apply-commit-push rounds made (1 without a
	// retry; 0 when there was nothing to do).
	Attempts int
	// PullRequests are the pull requests of a PushPullRequest write, one per
	// group, in the order of the groups' branches.
	PullRequests []PullRequestResult
	// Unconfirmed are the apps whose pins were not committed because the
	// registry did not confirm one of them right before the commit
	// (WithConfirmer).
	Unconfirmed []Unconfirmed
}

// Defaults of a Writer's options.
const (
	DefaultBatchWindow    = 2 * time.Second
	DefaultAttempts       = 5
	DefaultBackoff        = time.Second
	DefaultAttemptTimeout = 2 * time.Minute
	DefaultFlushTimeout   = 30 * time.Second
	DefaultAuthorName     = "argocd-image-resolver"
	DefaultAuthorEmail    = "argocd-image-resolver@localhost"
)

const (
	// maxBackoff bounds the pause between two attempts of a Write.
	maxBackoff = 30 * time.Second
	// maxRequeueDelay bounds the pause before a submitted batch whose write
	// failed is tried again; maxBatchFailures drops it after that many
	// consecutive failures (the next render submits its pins again).
	maxRequeueDelay  = 5 * time.Minute
	maxBatchFailures = 8
)

// Writer commits pins to git and pushes them: one commit per Write, or per batch
// of submitted changes for a repository and branch. It never force-pushes: when
// the branch moved since it was fetched, it fetches the new tip, applies the
// edits again on it (a pin a person changed in between is a conflict: theirs
// wins), and pushes again. Writes to one repository and branch are serialised
// within a Writer; several Writers (several daemons) may write to the same
// branch.
type Writer struct {
	onResult                func(app string, err error)
	onWritten               func(repoURL, branch string, res Result)
	afterFlush              func()
	auth                    func(string) (transport.AuthMethod, error)
	signer                  Signer
	confirmer               Confirmer
	authorName, authorEmail string
	message                 *messageTemplate
	window                  time.Duration
	attempts                int
	backoff                 time.Duration
	create                  bool
	holdHistory             int
	maxRepoBytes            int64
	attemptTimeout          time.Duration
	flushTimeout            time.Duration
	metrics                 *writerMetrics
	log                     *slog.Logger
	now                     func() time.Time

	forgeFor func(repoURL string) (ForgeRepo, error)

	prs knownPRs
	id  string // this writer, in pull request branch commits (random)

	locksMu sync.Mutex
	locks   map[queueKey]chan struct{}

	mu       sync.Mutex
	queues   map[queueKey]*batch
	inflight map[queueKey]*batch
	pending  int
	stopping bool
	wake     chan struct{}
}

// NewWriter returns a Writer. Submitted changes are written while Run runs.
func NewWriter(opts ...WriterOption) *Writer {
	w := &Writer{
		authorName:     DefaultAuthorName,
		authorEmail:    DefaultAuthorEmail,
		window:         DefaultBatchWindow,
		attempts:       DefaultAttempts,
		backoff:        DefaultBackoff,
		attemptTimeout: DefaultAttemptTimeout,
		flushTimeout:   DefaultFlushTimeout,
		holdHistory:    DefaultHoldHistory,
		maxRepoBytes:   DefaultMaxRepositoryBytes,
		log:            slog.Default(),
		now:            time.Now,
		locks:          map[queueKey]chan struct{}{},
		queues:         map[queueKey]*batch{},
		inflight:       map[queueKey]*batch{},
		wake:           make(chan struct{}, 1),
		id:             fmt.Sprintf("%016x", rand.Uint64()),
	}
	for _, o := range opts {
		o(w)
	}
	if w.metrics == nil {
		w.metrics = newWriterMetrics(nil)
	}
	return w
}

// queueKey names a repository and branch ("" for the default branch), and how
// pins reach it (push, and the pull request group: "" for direct pushes).
type queueKey struct{ repo, branch, push, group string }

// keyOf is the queue of a change.
func keyOf(c Change) queueKey {
	k := queueKey{repo: c.RepoURL, branch: normalizeBranch(c.Branch)}
	if c.Push == PushPullRequest {
		k.push, k.group = PushPullRequest, c.PRGroup
		if k.group == "" {
			k.group = GroupApp
		}
	}
	return k
}

// how spells the key's push mode and group, for messages.
func (k queueKey) how() string {
	if k.push == "" {
		return "pin-push " + PushDirect
	}
	return "pin-push " + k.push + ", pin-pr-group " + k.group
}

func (k queueKey) shownBranch() string {
	if k.branch == defaultBranch {
		return "(default)"
	}
	return k.branch
}

// cleanDir spells an app directory as a clean repository path ("./apps/web/"
// is apps/web; "" and "." are the root); one that leaves the repository stays
// as it is, for checkPath to refuse.
func cleanDir(dir string) string {
	dir = strings.Trim(dir, "/")
	if dir == "" {
		return ""
	}
	return path.Clean(dir)
}

// checkChange checks what a change must hold to be written.
func checkChange(c Change) error {
	switch {
	case c.RepoURL == "":
		return fmt.Errorf("pin change of app %s: no repository URL", c.Edit.App)
	case c.Edit.Target == nil:
		return fmt.Errorf("pin change of app %s: no pin target", c.Edit.App)
	case c.Push != "" && c.Push != PushDirect && c.Push != PushPullRequest:
		return fmt.Errorf("pin change of app %s: pin-push %q (accepted: %s or %s)", c.Edit.App, c.Push, PushDirect, PushPullRequest)
	case c.PRGroup != "" && c.PRGroup != GroupApp && c.PRGroup != GroupRepository:
		return fmt.Errorf("pin change of app %s: pin-pr-group %q (accepted: %s or %s)", c.Edit.App, c.PRGroup, GroupApp, GroupRepository)
	}
	if c.Push == PushPullRequest && c.PRGroup != GroupRepository {
		if _, err := groupBranch(GroupApp, c.Edit.App, ""); err != nil {
			return fmt.Errorf("pin change of app %s: %w", c.Edit.App, err)
		}
	}
	if err := checkBranchName(normalizeBranch(c.Branch)); err != nil {
		return fmt.Errorf("pin change of app %s: %w", c.Edit.App, err)
	}
	if err := checkPath(c.Edit.File()); err != nil {
		return fmt.Errorf("pin change of app %s: %w", c.Edit.App, err)
	}
	for _, p := range c.Edit.Pins {
		if p.Alias == "" || p.Reference == "" {
			return fmt.Errorf("pin change of app %s: a pin needs an alias and a reference (alias %q, reference %q)", c.Edit.App, p.Alias, p.Reference)
		}
	}
	return nil
}

// Write commits changes (all for one repository and branch) in one commit and
// pushes it, synchronously. Nothing to apply (every pin already there, or a
// conflict) makes no commit and no error. Errors name the repository and
// branch, never a credential; see ErrBranchNotFound, ErrCredentials and
// ErrNotPushed. With WithConfirmer, the apps whose pins the registry did not
// confirm are not committed and are in Result.Unconfirmed, not in the error.
func (w *Writer) Write(ctx context.Context, changes []Change) (Result, error) {
	if len(changes) == 0 {
		return Result{}, nil
	}
	key := keyOf(changes[0])
	edits := make([]Edit, 0, len(changes))
	for i, c := range changes {
		c.Edit.Dir = cleanDir(c.Edit.Dir)
		if k := keyOf(c); k != key {
			return Result{}, fmt.Errorf("pin changes for one write must share the repository, branch, pin-push and pin-pr-group: change %d (app %s) is for %s branch %s (%s), change 0 for %s branch %s (%s)",
				i, c.Edit.App, redactURL(k.repo), k.shownBranch(), k.how(), redactURL(key.repo), key.shownBranch(), key.how())
		}
		if err := checkChange(c); err != nil {
			return Result{}, err
		}
		edits = append(edits, c.Edit)
	}
	return w.write(ctx, key, edits)
}

// lock serialises the writes of one repository and branch.
func (w *Writer) lock(ctx context.Context, key queueKey) (func(), error) {
	w.locksMu.Lock()
	ch := w.locks[key]
	if ch == nil {
		ch = make(chan struct{}, 1)
		w.locks[key] = ch
	}
	w.locksMu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pause is the wait before attempt n (n >= 2): backoff doubled n-2 times, at
// most maxBackoff, with jitter (half to all of it).
func (w *Writer) pause(n int) time.Duration {
	d := w.backoff
	for i := 2; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, max(maxBackoff, w.backoff))
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

func (w *Writer) write(ctx context.Context, key queueKey, edits []Edit) (Result, error) {
	if w.message != nil && w.message.err != nil {
		return Result{}, w.message.err
	}
	shown := redactURL(key.repo)
	var auth transport.AuthMethod
	if w.auth != nil {
		a, err := w.auth(key.repo)
		if err != nil {
			return Result{}, &gitError{is: errs(ErrCredentials, err), msg: fmt.Sprintf("git repository %s: credentials: %v", shown, err)}
		}
		auth = a
	}
	unlock, err := w.lock(ctx, key)
	if err != nil {
		return Result{}, err
	}
	defer unlock()

	rem := newRemote(key.repo, auth)
	edits, unconfirmed := w.confirm(ctx, rem.shown, edits)
	if len(edits) == 0 {
		return Result{Unconfirmed: unconfirmed}, nil
	}
	res, err := w.try(ctx, rem, key, edits)
	res.Unconfirmed = unconfirmed
	return res, err
}

// try makes the attempts of a write of edits to key, until one succeeds
// or one fails for good.
func (w *Writer) try(ctx context.Context, rem *remote, key queueKey, edits []Edit) (Result, error) {
	t := w.newTarget(rem, key, edits)
	run := t.run
	if key.push == PushPullRequest {
		pr, err := w.newPRTarget(ctx, t, key)
		if err != nil {
			return Result{}, err
		}
		run = pr.run
	}
	var res Result
	var last *attemptError
	for n := 1; n <= w.attempts; n++ {
		if n > 1 {
			w.metrics.retries.Inc()
			timer := time.NewTimer(max(w.pause(n), min(last.retryAfter, maxBackoff)))
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return res, w.failed(rem, key, res.Attempts, last, ctx.Err())
			}
		}
		res.Attempts = n
		actx, cancel := context.WithTimeout(ctx, w.attemptTimeout)
		a, aerr := run(actx, w.now())
		cancel()
		if aerr == nil {
			res = w.succeeded(rem, res, a)
			if w.onWritten != nil {
				w.onWritten(key.repo, key.branch, res)
			}
			return res, nil
		}
		last = aerr
		retry := aerr.kind != kindPermanent && n < w.attempts && ctx.Err() == nil
		w.attemptFailed(rem, key, aerr, n, retry)
		if !retry {
			break
		}
	}
	return res, w.failed(rem, key, res.Attempts, last, nil)
}

// attemptFailed counts and logs failed attempt n.
func (w *Writer) attemptFailed(rem *remote, key queueKey, aerr *attemptError, n int, retry bool) {
	branch := key.shownBranch()
	if aerr.branch != "" {
		branch = aerr.branch
	}
	if !aerr.local {
		outcome := PushFailed
		if aerr.kind == kindRejected {
			outcome = PushRejected
		}
		w.metrics.pushes.WithLabelValues(outcome).Inc()
	}
	switch {
	case aerr.local:
		w.log.Warn("pins not committed", "repository", rem.shown, "branch", branch, "error", aerr.err.Error())
	case aerr.kind == kindRejected:
		w.log.Info("pin push rejected: the branch moved since it was fetched", "repository", rem.shown, "branch", branch,
			"attempt", n, "attempts", w.attempts, "retry", retry, "reason", aerr.err.Error())
	default:
		w.log.Warn("pin push failed", "repository", rem.shown, "branch", branch,
			"attempt", n, "attempts", w.attempts, "retry", retry, "error", aerr.err.Error())
	}
}

// newTarget is what the attempts of a write to key work on.
func (w *Writer) newTarget(rem *remote, key queueKey, edits []Edit) *target {
	holdHistory := w.holdHistory
	if key.push == PushPullRequest {
		// A pull request's branch, and the pull requests closed or merged with
		// its pins, are that mode's memory of a person's decision (pullrequest.go):
		// no history is read; held: entries are honoured all the same.
		holdHistory = 0
	}
	return &target{
		remote:   rem,
		branch:   key.branch,
		create:   w.create,
		edits:    edits,
		author:   object.Signature{Name: w.authorName, Email: w.authorEmail},
		signer:   w.signer,
		maxBytes: w.maxRepoBytes,
		// holdHistory: how many commits a write reads for reverts (holds.go)
		holdHistory: holdHistory,
		message: func(branch string, applied []appliedPin) (string, error) {
			d := messageData(rem.shown, branch, applied)
			if w.message == nil {
				return DefaultMessage(d), nil
			}
			msg, err := w.message.execute(d)
			if err != nil {
				return "", fmt.Errorf("git commit message template %q: %w", w.message.text, err)
			}
			return msg, nil
		},
	}
}

// errs joins the non-nil errors for errors.Is.
func errs(es ...error) []error {
	var out []error
	for _, e := range es {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

// failed is a Write's error after its last attempt.
func (w *Writer) failed(rem *remote, key queueKey, attempts int, last *attemptError, ctxErr error) error {
	branch := key.shownBranch()
	if last != nil && last.branch != "" {
		branch = last.branch
	}
	if last == nil {
		return &gitError{is: errs(ctxErr), msg: fmt.Sprintf("git repository %s, branch %s: pins not pushed: %v", rem.shown, branch, ctxErr)}
	}
	if last.kind == kindPermanent && attempts <= 1 && ctxErr == nil {
		return last.err
	}
	why := ""
	if ctxErr != nil {
		why = fmt.Sprintf(" (%v)", ctxErr)
	}
	reason := strings.TrimPrefix(last.err.Error(), "git repository "+rem.shown+": ")
	return &gitError{is: errs(ErrNotPushed, last.err, ctxErr),
		msg: fmt.Sprintf("git repository %s, branch %s: pins not pushed after %d attempts%s; last: %s", rem.shown, branch, attempts, why, reason)}
}

// succeeded counts, logs and returns the result of a successful attempt.
func (w *Writer) succeeded(rem *remote, res Result, a *attempt) Result {
	res.Branch = a.branch
	for _, p := range a.applied {
		res.Applied = append(res.Applied, p.Pin)
	}
	for _, c := range a.conflicts {
		res.Conflicts = append(res.Conflicts, c.Pin)
		w.metrics.conflicts.Inc()
		w.log.Warn("pin conflict: the file holds another reference than the one the pin replaces; theirs is kept",
			"repository", rem.shown, "branch", a.branch, "app", c.App, "file", c.File, "alias", c.Pin.Alias,
			"theirs", c.Theirs, "ours", c.Pin.Reference, "base", c.Base)
	}
	w.noteHolds(rem, &res, a)
	if len(a.prs) > 0 {
		return w.succeededPR(rem, res, a)
	}
	if a.commit.IsZero() {
		res.Applied = nil
		return res
	}
	res.Commit, res.Pushed = a.commit.String(), true
	w.metrics.pushes.WithLabelValues(PushOK).Inc()
	w.metrics.commits.Inc()
	var apps []string
	seen := map[string]bool{}
	for _, app := range a.apps() {
		if !seen[app] {
			seen[app] = true
			apps = append(apps, app)
		}
	}
	w.log.Info("pins committed", "repository", rem.shown, "branch", a.branch, "commit", res.Commit,
		"apps", apps, "pins", len(a.applied), "conflicts", len(a.conflicts), "held", len(a.held), "attempts", res.Attempts)
	return res
}
