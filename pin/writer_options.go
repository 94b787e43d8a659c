package pin

import (
	"log/slog"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/prometheus/client_golang/prometheus"
)

// WriterOption configures a Writer.
type WriterOption func(*Writer)

// WithAuth sets the credentials for each repository: auth returns the
// transport.AuthMethod for repoURL (e.g. *http.BasicAuth), or nil to try without
// credentials, as git would. It is called at every Write, so a rotated secret
// is used at the next push. Its errors must not carry a credential.
func WithAuth(auth func(repoURL string) (transport.AuthMethod, error)) WriterOption {
	return func(w *Writer) { w.auth = auth }
}

// WithAuthor sets the author (and committer) of pin commits.
func WithAuthor(name, email string) WriterOption {
	return func(w *Writer) {
		if name != "" {
			w.authorName = name
		}
		if email != "" {
			w.authorEmail = email
		}
	}
}

// WithMessage sets the commit message template: a Go text/template over
// MessageData ("" for DefaultMessage). A template that does not parse, or fails
// over a sample commit, makes every Write fail with an error naming it (see
// CheckMessage to check it beforehand).
func WithMessage(tmpl string) WriterOption {
	return func(w *Writer) {
		if tmpl == "" {
			w.message = nil
			return
		}
		w.message = parseMessage(tmpl)
	}
}

// WithBatchWindow sets how long submitted changes for one repository and branch
// are gathered into one commit, from the first one queued (default 2s).
func WithBatchWindow(d time.Duration) WriterOption {
	return func(w *Writer) {
		if d >= 0 {
			w.window = d
		}
	}
}

// WithRetry sets how many times a Write tries (fetch, apply, commit, push) before
// it gives up (default 5), and the pause after the first failed attempt, doubled
// after each further one up to 30s, with jitter (default 1s).
func WithRetry(attempts int, backoff time.Duration) WriterOption {
	return func(w *Writer) {
		if attempts > 0 {
			w.attempts = attempts
		}
		if backoff >= 0 {
			w.backoff = backoff
		}
	}
}

// WithBranchCreation lets the writer create a branch that does not exist, from
// the tip of the remote's default branch (a pin-branch for a pull-request flow).
// Without it, a missing branch is an error (ErrBranchNotFound).
func WithBranchCreation(allow bool) WriterOption {
	return func(w *Writer) { w.create = allow }
}

// WithHoldHistory sets how many commits of the branch a write reads for a
// person's revert of a pin, when an edit asks for it (Edit.DetectHolds; default
// DefaultHoldHistory, 50): such a write fetches that many commits and one more,
// rather than the tip alone. 0 reads none: only the held: entries already in
// the pins files hold pins back. A revert older than that many commits is not
// seen.
func WithHoldHistory(n int) WriterOption {
	return func(w *Writer) {
		if n >= 0 {
			w.holdHistory = n
		}
	}
}

// WithMetrics registers the writer's metrics with reg: pin_commits_total,
// pin_pushes_total{outcome}, pin_push_retries_total, pin_conflicts_total,
// pin_holds_total, pin_unconfirmed_total{reason} and pins_pending, prefixed argocd_image_resolver_. Writers given the same reg
// share them.
func WithMetrics(reg prometheus.Registerer) WriterOption {
	return func(w *Writer) { w.metrics = newWriterMetrics(reg) }
}

// WithOnResult is told, for every app of a submitted batch, how its write ended
// (nil: committed, or nothing to commit), so that the app's next render can say
// why its pins are not in git.
func WithOnResult(f func(app string, err error)) WriterOption {
	return func(w *Writer) { w.onResult = f }
}

// WithAfterFlush is called after each batch Run took off the queue has been
// written, or has failed and been queued again or dropped: by then Pending no
// longer counts it (unless it was queued again) and WithOnResult's function has
// been told. A test hook: a test waits on it for a write to be over, rather than
// sleeping.
func WithAfterFlush(f func()) WriterOption {
	return func(w *Writer) { w.afterFlush = f }
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) WriterOption {
	return func(w *Writer) {
		if l != nil {
			w.log = l
		}
	}
}

// WithOnWritten is told of every write that succeeded: the repository, the
// branch asked ("" for the default branch) and the result (Pushed for a
// direct commit; PullRequests for pull requests), so that the daemon can ask
// Argo CD to look at the branch again.
func WithOnWritten(f func(repoURL, branch string, res Result)) WriterOption {
	return func(w *Writer) { w.onWritten = f }
}

// WithConfirmer makes the writer ask the registry, right before it commits,
// what each pin's tag points at (one request per distinct image and tag of the
// round, however many apps share it): an app whose pin names a tag the
// registry does not have, or a tag that now points at another digest than the
// pin's, is not committed (its change is dropped; the next render submits it
// anew); an app whose pin the registry could not confirm (5xx, timeout) is not
// committed now and is tried again in the next round. The other apps' pins go
// ahead. Each such app is in Result.Unconfirmed, told to WithOnResult's
// function with an error wrapping ErrUnconfirmed, logged, and counted in
// pin_unconfirmed_total{reason}. Without it (nil) pins are committed as given.
func WithConfirmer(c Confirmer) WriterOption {
	return func(w *Writer) { w.confirmer = c }
}

// WithMaxRepositoryBytes bounds what a write fetches and holds of one
// repository (default DefaultMaxRepositoryBytes, 256 MiB): the bytes of the
// packs its fetches transfer, and the sizes of the objects they hold once
// inflated (each object counted for 256 bytes more). A fetch past it fails,
// and the write with it, with a *TooLargeError (ErrRepositoryTooLarge) naming
// the repository, the bound and the setting git.maxRepositoryBytes. The
// repository is kept on disk under the temporary directory while a write
// works on it (at most twice the bound, briefly, while a pack is checked and
// indexed) and its objects are read lazily: only the commits, the trees on
// the way to the files edited and those files are read. n <= 0 keeps the
// default.
func WithMaxRepositoryBytes(n int64) WriterOption {
	return func(w *Writer) {
		if n > 0 {
			w.maxRepoBytes = n
		}
	}
}
