package resolve

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// TagMatcher matches tag names.
type TagMatcher interface {
	Match(tag string) bool
	String() string
}

type regexpMatcher struct {
	re    *regexp.Regexp
	insts int // the compiled program's size (0 for an identity matcher's)
}

func (m regexpMatcher) Match(tag string) bool { return m.re.MatchString(tag) }
func (m regexpMatcher) String() string        { return "regexp:" + m.re.String() }
func (m regexpMatcher) cost() int             { return m.insts }

type globMatcher struct{ pattern string }

func (m globMatcher) Match(tag string) bool {
	ok, _ := path.Match(m.pattern, tag) // pattern validated at parse time
	return ok
}
func (m globMatcher) String() string { return "glob:" + m.pattern }
func (m globMatcher) cost() int      { return len(m.pattern) }

type anyMatcher struct{}

func (anyMatcher) Match(string) bool { return true }
func (anyMatcher) String() string    { return "any" }

const allowAccepted = "regexp:EXPR, glob:PATTERN or any"

// argocd-image-updater reads the function names of allow-tags and ignore-tags (any,
// regexp:, glob:) case-insensitively: ANY, RegExp:, Regexp: work there. The resolver
// accepts the same spellings and reads them as the lowercase names, so an annotation
// moved into a parameter keeps its meaning.

// hasPrefixFold reports whether s begins with prefix, ignoring case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// CanonicalAllowTags spells an allow-tags value's function in lowercase: ANY is any,
// RegExp:EXPR is regexp:EXPR, Glob:P is glob:P. The expression or pattern is kept
// as written.
func CanonicalAllowTags(s string) string {
	t := strings.TrimSpace(s)
	if strings.EqualFold(t, "any") {
		return "any"
	}
	for _, p := range []string{"regexp:", "glob:"} {
		if hasPrefixFold(t, p) {
			return p + t[len(p):]
		}
	}
	return s
}

// CanonicalIgnoreTags spells the functions of ignore-tags values in lowercase: a
// value starting with regexp: in any case, and each comma-separated item starting
// with glob: in any case.
func CanonicalIgnoreTags(values []string) []string {
	if values == nil {
		return nil
	}
	out := make([]string, len(values))
	for i, v := range values {
		t := strings.TrimSpace(v)
		if hasPrefixFold(t, "regexp:") {
			out[i] = "regexp:" + t[len("regexp:"):]
			continue
		}
		items := strings.Split(v, ",")
		changed := false
		for j, item := range items {
			it := strings.TrimSpace(item)
			if hasPrefixFold(it, "glob:") && !strings.HasPrefix(it, "glob:") {
				items[j] = "glob:" + it[len("glob:"):]
				changed = true
			}
		}
		if changed {
			out[i] = strings.Join(items, ",")
		} else {
			out[i] = v
		}
	}
	return out
}

// ParseAllowTags parses an allow-tags value: regexp:EXPR, glob:PATTERN or any. An
// empty value allows every tag.
func ParseAllowTags(s string) (TagMatcher, error) {
	s = strings.TrimSpace(CanonicalAllowTags(s))
	switch {
	case s == "" || s == "any":
		return anyMatcher{}, nil
	case strings.HasPrefix(s, "regexp:"):
		return compileFilter(FieldAllowTags, s, allowAccepted)
	case strings.HasPrefix(s, "glob:"):
		return parseGlob(FieldAllowTags, s, strings.TrimPrefix(s, "glob:"), allowAccepted)
	}
	return nil, &InputError{Field: string(FieldAllowTags), Policy: FieldAllowTags, Value: s, Accepted: allowAccepted}
}

const ignoreAccepted = "globs (comma-separated), or regexp:EXPR"

// ParseIgnoreTags parses ignore-tags values. Each value is a comma-separated list of
// globs; an item starting with regexp: is a regular expression and takes the whole
// value (a regular expression may itself contain commas).
func ParseIgnoreTags(values ...string) ([]TagMatcher, error) {
	var out []TagMatcher
	for _, v := range CanonicalIgnoreTags(values) {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if strings.HasPrefix(v, "regexp:") {
			m, err := compileFilter(FieldIgnoreTags, v, ignoreAccepted)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
			continue
		}
		for _, item := range strings.Split(v, ",") {
			item = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(item), "glob:"))
			if item == "" {
				continue
			}
			m, err := parseGlob(FieldIgnoreTags, v, item, ignoreAccepted)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
	}
	return out, nil
}

func parseGlob(field PolicyField, value, pattern, accepted string) (TagMatcher, error) {
	if pattern == "" {
		return nil, &InputError{Field: string(field), Policy: field, Value: value, Accepted: accepted, Err: fmt.Errorf("empty pattern")}
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, &InputError{Field: string(field), Policy: field, Value: value, Accepted: accepted, Err: err}
	}
	return globMatcher{pattern}, nil
}
