package resolve

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// InputError reports a bad value given by the user. It names the field (a flag,
// parameter or file key), the value and what is accepted, so that the message alone is
// enough to fix the input.
type InputError struct {
	Field string // e.g. "update-strategy"; callers may re-label it with WithField
	// Policy says which policy field the value was for ("" when it was none), so a
	// caller can name its own spelling of it (a flag, a parameter, a file key)
	// without matching Field's text. WithField keeps it.
	Policy   PolicyField
	Value    string
	Accepted string
	Err      error  // optional underlying cause
	message  string // the whole message, when rebuilt from a daemon's answer
}

func (e *InputError) Error() string {
	if e.message != "" {
		return e.message
	}
	var b strings.Builder
	if e.Field != "" {
		fmt.Fprintf(&b, "%s: ", e.Field)
	}
	fmt.Fprintf(&b, "invalid value %s", quoteValue(e.Value))
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Accepted != "" {
		fmt.Fprintf(&b, " (accepted: %s)", e.Accepted)
	}
	return b.String()
}

func (e *InputError) Unwrap() error { return e.Err }

// WithField returns err with the field of every InputError in it relabelled, so a
// parser can speak of "platforms" while the caller names the parameter
// "web.platforms" or the file key "images.web.platforms".
func WithField(err error, field string) error {
	var ie *InputError
	if errors.As(err, &ie) && ie.message == "" {
		c := *ie
		c.Field = field
		return &c
	}
	return err
}

// PolicyField names a field of a policy.
type PolicyField string

// The fields of a policy, named as argocd-image-updater's annotation keys.
const (
	FieldStrategy   PolicyField = "update-strategy"
	FieldConstraint PolicyField = "constraint"
	FieldAllowTags  PolicyField = "allow-tags"
	FieldIgnoreTags PolicyField = "ignore-tags"
	FieldPlatforms  PolicyField = "platforms"
)

// ErrNoTag is returned (wrapped in a *NoTagError) when no tag satisfies the policy.
var ErrNoTag = errors.New("no tag qualifies")

// NoTagError says why no tag qualified. The partial Result explains what was seen.
type NoTagError struct {
	Image   string
	Reason  string
	Result  *Result
	message string
}

func (e *NoTagError) Error() string {
	if e.message != "" {
		return e.message
	}
	return fmt.Sprintf("%s: %s: %s", e.Image, ErrNoTag, e.Reason)
}

func (e *NoTagError) Unwrap() error { return ErrNoTag }

// RegistryError wraps a failure to read from a registry; the wrapped error carries
// the registry's own answer (go-containerregistry's *transport.Error).
type RegistryError struct {
	Op    string // "list tags", "get manifest", ...
	Image string // as the user wrote it (registry.demo.local/demo/web:1.0), not the endpoint
	// Via is the address the image was read from (a registries entry's api), when
	// not the registry of Image: the wrapped error names only that address, which
	// is in no manifest.
	Via     string
	Err     error
	message string
}

// Error is one line: the registry's text in the wrapped error is redacted of every
// credential value DefaultRedactor holds, its control characters escaped and it
// is truncated to MaxRegistryText bytes.
func (e *RegistryError) Error() string {
	if e.message != "" {
		// Rebuilt from a daemon's answer, already clean there; made safe again
		// for this process's secrets and bounded.
		return DefaultRedactor.Clean(e.message, 4*MaxRegistryText)
	}
	inner := "<nil>"
	if e.Err != nil {
		inner = CleanRegistryText(e.Err.Error())
	}
	op, image := OneLine(e.Op), OneLine(e.Image)
	if e.Via != "" {
		return fmt.Sprintf("%s of %s (via %s): %s", op, image, OneLine(e.Via), inner)
	}
	return fmt.Sprintf("%s of %s: %s", op, image, inner)
}

func (e *RegistryError) Unwrap() error { return e.Err }

// maxValueShown bounds how much of a bad value an InputError quotes.
const maxValueShown = 128

// quoteValue quotes v (control characters escaped), truncated to maxValueShown
// runes with its length said when longer.
func quoteValue(v string) string {
	if n := utf8.RuneCountInString(v); n > maxValueShown {
		r := []rune(v)
		return fmt.Sprintf("%q... (%d characters)", string(r[:maxValueShown-8]), n)
	}
	return fmt.Sprintf("%q", v)
}
