package resolve

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// A resolution's CPU work over its tag list (filters, strategies' parsing and
// sorting) stops when its context ends, and when no caller waits for its answer
// any more (WithWaiter): a resolution run detached from its caller, so that its
// registry reads fill a cache, does no work over the tag list for nobody.

// ErrNoWaiter is the reason of a StoppedError whose resolution went on detached
// from its caller (WithWaiter) and whose callers all stopped waiting.
var ErrNoWaiter = errors.New("no caller waits for the answer any more")

// StoppedError is a resolution's work over its tag list stopped: its context ended,
// or no caller waited for its answer any more.
type StoppedError struct {
	Image string
	// Step is what was stopped, e.g. "matching allow-tags regexp:^v[0-9]+$".
	Step string
	// Done of Tags were gone through when it stopped (-1: a sort, not counted).
	Done, Tags int
	// Err is the context's error, or ErrNoWaiter; Cause the waiter's cause.
	Err   error
	Cause error
}

func (e *StoppedError) Error() string {
	msg := fmt.Sprintf("stopped %s after %d of %d tags: %v", e.Step, e.Done, e.Tags, e.Err)
	if e.Done < 0 {
		msg = fmt.Sprintf("stopped %s of %d tags: %v", e.Step, e.Tags, e.Err)
	}
	if e.Cause != nil && !errors.Is(e.Err, e.Cause) {
		msg += " (" + e.Cause.Error() + ")"
	}
	if e.Image != "" {
		msg = e.Image + ": " + msg
	}
	return msg
}

func (e *StoppedError) Unwrap() error { return e.Err }

// waiterKey carries a resolution's waiter in its context.
type waiterKey struct{}

// WithWaiter returns ctx carrying waiter: the context of whoever waits for the
// answer of a resolution run in ctx. The resolution reads the registry in ctx (so
// that a cache is filled though the caller left), but its work over the tag list
// stops when waiter ends, with a *StoppedError wrapping ErrNoWaiter.
func WithWaiter(ctx, waiter context.Context) context.Context {
	return context.WithValue(ctx, waiterKey{}, waiter)
}

// stopEvery is how many items a loop over tags goes through between two checks.
const stopEvery = 16

// stopper tells a loop over tags when to stop: ctx ended, or its waiter did.
type stopper struct {
	ctx, waiter context.Context
	done, gone  <-chan struct{}
	n           int
}

func newStopper(ctx context.Context) *stopper {
	s := &stopper{ctx: ctx, done: ctx.Done()}
	if w, ok := ctx.Value(waiterKey{}).(context.Context); ok {
		s.waiter, s.gone = w, w.Done()
	}
	return s
}

// step counts one item; every stopEvery items it reports whether to stop.
func (s *stopper) step() bool {
	s.n++
	return s.n%stopEvery == 0 && s.stopped()
}

// stopped reports whether the work is to stop now (two non-blocking receives).
func (s *stopper) stopped() bool {
	select {
	case <-s.done:
		return true
	case <-s.gone:
		return true
	default:
		return false
	}
}

// err is the *StoppedError of step over tags, done of them gone through.
func (s *stopper) err(step string, done, tags int) error {
	e := &StoppedError{Step: step, Done: done, Tags: tags}
	if err := s.ctx.Err(); err != nil {
		e.Err, e.Cause = err, context.Cause(s.ctx)
	} else {
		e.Err, e.Cause = ErrNoWaiter, context.Cause(s.waiter)
	}
	return e
}

// sortStopping sorts x by cmp unless the work is to stop, which it checks every
// 1024 comparisons; once stopped, the comparisons left are no-ops and the order is
// meaningless: the caller returns the error.
func sortStopping[E any](ctx context.Context, step string, x []E, cmp func(a, b E) int) error {
	s := newStopper(ctx)
	if s.stopped() {
		return s.err(step, -1, len(x))
	}
	stopped := false
	slices.SortFunc(x, func(a, b E) int {
		if stopped {
			return 0
		}
		s.n++
		if s.n%1024 == 0 && s.stopped() {
			stopped = true
			return 0
		}
		return cmp(a, b)
	})
	if stopped {
		return s.err(step, -1, len(x))
	}
	return nil
}
