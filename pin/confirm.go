package pin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Confirmer asks an image's registry, past every cache, what a tag points at
// now. The writer asks it right before it commits (WithConfirmer), so that no
// poisoned cache, stale view or bug can put into git a tag the registry does
// not have, or a digest the tag no longer points at.
type Confirmer interface {
	// Confirm returns the digest image:tag points at in its registry now
	// (image as the policy wrote it, e.g. ghcr.io/org/web). A tag or repository
	// the registry says does not exist is an error wrapping ErrNotInRegistry;
	// any other error means the registry could not say (the pin waits for the
	// next round). Errors must not carry a credential.
	Confirm(ctx context.Context, image, tag string) (digest string, err error)
}

// ConfirmerFunc is a Confirmer that is a function.
type ConfirmerFunc func(ctx context.Context, image, tag string) (string, error)

// Confirm calls f.
func (f ConfirmerFunc) Confirm(ctx context.Context, image, tag string) (string, error) {
	return f(ctx, image, tag)
}

var (
	// ErrNotInRegistry is what a Confirmer's error wraps when the registry says
	// the tag (or its repository) does not exist.
	ErrNotInRegistry = errors.New("not in the registry")
	// ErrUnconfirmed: the registry did not confirm a pin at commit time; the
	// app's pins were not committed (Result.Unconfirmed).
	ErrUnconfirmed = errors.New("pin not confirmed by the registry")
)

// Why a pin was not confirmed: the values of pin_unconfirmed_total's reason
// label, and Unconfirmed.Reason.
const (
	// UnconfirmedNotFound: the registry does not have the tag (or the pin
	// names none). The app's change is dropped; its next render submits what
	// the registry has.
	UnconfirmedNotFound = "not_found"
	// UnconfirmedMoved: the tag points at another digest than the pin's. The
	// app's change is dropped; its next render resolves the tag again.
	UnconfirmedMoved = "digest_changed"
	// UnconfirmedRegistryError: the registry could not say (5xx, timeout,
	// refused credentials). The app's change is not committed now and is tried
	// again in the next round.
	UnconfirmedRegistryError = "registry_error"
)

// Unconfirmed is an app's change the writer did not commit because one of its
// pins was not confirmed by the registry.
type Unconfirmed struct {
	App string
	// File is the repository path of the file the app's change was for.
	File string
	// Pin is the first pin of the app's change that was not confirmed.
	Pin Pin
	// Reason is UnconfirmedNotFound, UnconfirmedMoved or
	// UnconfirmedRegistryError.
	Reason string
	// Err says what the registry answered; it wraps ErrUnconfirmed.
	Err error
}

// confirmJobs bounds the HEADs of one round in flight at once (the registry
// client's governor bounds them per registry besides).
const confirmJobs = 8

// confirmKey is a reference asked for: one HEAD per distinct one in a round.
type confirmKey struct{ image, tag string }

// confirmAnswer is what the registry said of a reference.
type confirmAnswer struct {
	digest string
	err    error
}

// confirm asks w's Confirmer about every distinct reference of edits (one HEAD
// each, however many apps share it) and returns the edits whose pins all are
// what the registry says, and the others, each with its first unconfirmed pin.
// Without a Confirmer every edit goes ahead.
func (w *Writer) confirm(ctx context.Context, shown string, edits []Edit) ([]Edit, []Unconfirmed) {
	if w.confirmer == nil {
		return edits, nil
	}
	answers := w.askRegistry(ctx, edits)
	ok := make([]Edit, 0, len(edits))
	var out []Unconfirmed
	for _, e := range edits {
		u, bad := judge(e, answers)
		if !bad {
			ok = append(ok, e)
			continue
		}
		w.metrics.unconfirmed.WithLabelValues(u.Reason).Inc()
		w.log.Warn("pins not committed: the registry did not confirm a pin", "repository", shown, "app", e.App,
			"alias", u.Pin.Alias, "reference", u.Pin.Reference, "reason", u.Reason, "error", u.Err.Error())
		out = append(out, u)
	}
	return ok, out
}

// askRegistry HEADs every distinct reference of edits, confirmJobs at a time.
func (w *Writer) askRegistry(ctx context.Context, edits []Edit) map[confirmKey]confirmAnswer {
	answers := map[confirmKey]confirmAnswer{}
	var keys []confirmKey
	for _, e := range edits {
		for _, p := range e.Pins {
			k := confirmKey{p.Image, p.Tag}
			if _, seen := answers[k]; !seen && p.Tag != "" {
				answers[k] = confirmAnswer{}
				keys = append(keys, k)
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, w.attemptTimeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, confirmJobs)
	for _, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d, err := w.confirmer.Confirm(ctx, k.image, k.tag)
			mu.Lock()
			answers[k] = confirmAnswer{digest: d, err: err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return answers
}

// judge returns the first pin of e the answers do not confirm.
func judge(e Edit, answers map[confirmKey]confirmAnswer) (Unconfirmed, bool) {
	for _, p := range e.Pins {
		bad := func(reason, format string, args ...any) (Unconfirmed, bool) {
			err := fmt.Errorf("app %s, %s: %w: "+format, append([]any{e.App, p.Reference, ErrUnconfirmed}, args...)...)
			return Unconfirmed{App: e.App, File: e.File(), Pin: p, Reason: reason, Err: err}, true
		}
		if p.Tag == "" {
			return bad(UnconfirmedNotFound, "the pin names no tag to ask the registry about")
		}
		a := answers[confirmKey{p.Image, p.Tag}]
		want := pinDigest(p)
		switch {
		case errors.Is(a.err, ErrNotInRegistry):
			return bad(UnconfirmedNotFound, "the registry does not have tag %s: %v", p.Tag, a.err)
		case a.err != nil:
			return bad(UnconfirmedRegistryError, "the registry could not confirm tag %s (tried again in the next round): %v", p.Tag, a.err)
		case want != "" && a.digest != want:
			return bad(UnconfirmedMoved, "tag %s now points at %s, not at the pin's %s", p.Tag, a.digest, want)
		}
	}
	return Unconfirmed{}, false
}

// pinDigest is the digest a pin claims: its reference's, else Digest.
func pinDigest(p Pin) string {
	if _, d, ok := strings.Cut(p.Reference, "@"); ok {
		return d
	}
	return p.Digest
}
