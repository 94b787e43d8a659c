package resolve

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// Strategy names how candidate tags are ordered.
type Strategy string

// The update strategies, named as argocd-image-updater names them.
const (
	Semver       Strategy = "semver"
	NewestBuild  Strategy = "newest-build"
	Digest       Strategy = "digest"
	Alphabetical Strategy = "alphabetical"
	Numeric      Strategy = "numeric"
)

// Strategies lists the accepted strategy names.
var Strategies = []Strategy{Semver, NewestBuild, Digest, Alphabetical, Numeric}

const strategyAccepted = "semver, newest-build, digest, alphabetical, numeric (old names: latest, name)"

// ParseStrategy parses a strategy name. The old argocd-image-updater names latest and
// name are accepted and reported in warning so the caller can tell the user.
func ParseStrategy(s string) (st Strategy, warning string, err error) {
	switch v := Strategy(strings.TrimSpace(s)); v {
	case "":
		return Semver, "", nil
	case Semver, NewestBuild, Digest, Alphabetical, Numeric:
		return v, "", nil
	case "latest":
		return NewestBuild, `update-strategy "latest" is deprecated; use "newest-build"`, nil
	case "name":
		return Alphabetical, `update-strategy "name" is deprecated; use "alphabetical"`, nil
	}
	return "", "", &InputError{Field: "update-strategy", Value: s, Accepted: strategyAccepted}
}

// TagMatcher matches tag names.
type TagMatcher interface {
	Match(tag string) bool
	String() string
}

type regexpMatcher struct{ re *regexp.Regexp }

func (m regexpMatcher) Match(tag string) bool { return m.re.MatchString(tag) }
func (m regexpMatcher) String() string        { return "regexp:" + m.re.String() }

type globMatcher struct{ pattern string }

func (m globMatcher) Match(tag string) bool {
	ok, _ := path.Match(m.pattern, tag) // pattern validated at parse time
	return ok
}
func (m globMatcher) String() string { return "glob:" + m.pattern }

type anyMatcher struct{}

func (anyMatcher) Match(string) bool { return true }
func (anyMatcher) String() string    { return "any" }

const allowAccepted = "regexp:EXPR, glob:PATTERN or any"

// ParseAllowTags parses an allow-tags value: regexp:EXPR, glob:PATTERN or any. An
// empty value allows every tag.
func ParseAllowTags(s string) (TagMatcher, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "" || s == "any":
		return anyMatcher{}, nil
	case strings.HasPrefix(s, "regexp:"):
		re, err := regexp.Compile(strings.TrimPrefix(s, "regexp:"))
		if err != nil {
			return nil, &InputError{Field: "allow-tags", Value: s, Accepted: allowAccepted, Err: err}
		}
		return regexpMatcher{re}, nil
	case strings.HasPrefix(s, "glob:"):
		return parseGlob("allow-tags", s, strings.TrimPrefix(s, "glob:"), allowAccepted)
	}
	return nil, &InputError{Field: "allow-tags", Value: s, Accepted: allowAccepted}
}

const ignoreAccepted = "globs (comma-separated), or regexp:EXPR"

// ParseIgnoreTags parses ignore-tags values. Each value is a comma-separated list of
// globs; an item starting with regexp: is a regular expression and takes the whole
// value (a regular expression may itself contain commas).
func ParseIgnoreTags(values ...string) ([]TagMatcher, error) {
	var out []TagMatcher
	for _, v := range values {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if strings.HasPrefix(v, "regexp:") {
			re, err := regexp.Compile(strings.TrimPrefix(v, "regexp:"))
			if err != nil {
				return nil, &InputError{Field: "ignore-tags", Value: v, Accepted: ignoreAccepted, Err: err}
			}
			out = append(out, regexpMatcher{re})
			continue
		}
		for _, item := range strings.Split(v, ",") {
			item = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(item), "glob:"))
			if item == "" {
				continue
			}
			m, err := parseGlob("ignore-tags", v, item, ignoreAccepted)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
	}
	return out, nil
}

func parseGlob(field, value, pattern, accepted string) (TagMatcher, error) {
	if pattern == "" {
		return nil, &InputError{Field: field, Value: value, Accepted: accepted, Err: fmt.Errorf("empty pattern")}
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, &InputError{Field: field, Value: value, Accepted: accepted, Err: err}
	}
	return globMatcher{pattern}, nil
}

// PolicySpec is a policy as the user writes it: strings, not yet checked. The plugin
// fills it from parameters and the policy file; the CLI from flags.
type PolicySpec struct {
	Strategy   string
	Constraint string
	AllowTags  string
	IgnoreTags []string
	Platforms  []string
	PinDigest  bool
}

// Policy is a checked policy, ready to resolve with.
type Policy struct {
	Strategy Strategy
	// Constraint is the raw constraint: a semver range for semver, the tag for digest,
	// unused otherwise.
	Constraint string
	semver     *semver.Constraints
	Allow      TagMatcher
	Ignore     []TagMatcher
	// Platforms a tag must have every one of; empty means no platform check.
	Platforms []Platform
	PinDigest bool
	// Warnings about accepted but deprecated values.
	Warnings []string
}

// Compile checks every field of the spec and returns the policy, or an *InputError
// naming the first bad field.
func (s PolicySpec) Compile() (*Policy, error) {
	st, warn, err := ParseStrategy(s.Strategy)
	if err != nil {
		return nil, err
	}
	p := &Policy{Strategy: st, Constraint: strings.TrimSpace(s.Constraint), PinDigest: s.PinDigest}
	if warn != "" {
		p.Warnings = append(p.Warnings, warn)
	}
	switch st {
	case Semver:
		if p.Constraint != "" {
			c, err := semver.NewConstraint(p.Constraint)
			if err != nil {
				return nil, &InputError{Field: "constraint", Value: p.Constraint,
					Accepted: "a semver range such as 1.x, ~1.2, ^2.0, >=1.4 <2", Err: err}
			}
			p.semver = c
		}
	case Digest:
		if p.Constraint == "" {
			return nil, &InputError{Field: "constraint", Value: "",
				Accepted: "the tag to follow, e.g. repo:latest, when update-strategy is digest"}
		}
	case NewestBuild, Alphabetical, Numeric:
		if p.Constraint != "" {
			return nil, &InputError{Field: "constraint", Value: p.Constraint,
				Accepted: "no constraint with update-strategy " + string(st) + "; filter tags with allow-tags/ignore-tags"}
		}
	}
	if p.Allow, err = ParseAllowTags(s.AllowTags); err != nil {
		return nil, err
	}
	if p.Ignore, err = ParseIgnoreTags(s.IgnoreTags...); err != nil {
		return nil, err
	}
	if p.Platforms, err = ParsePlatforms(s.Platforms...); err != nil {
		return nil, err
	}
	return p, nil
}

// MustCompile is Compile for tests and constant policies; it panics on error.
func (s PolicySpec) MustCompile() *Policy {
	p, err := s.Compile()
	if err != nil {
		panic(err)
	}
	return p
}

// WithPlatforms returns a copy of the policy requiring the given platforms.
func (p *Policy) WithPlatforms(ps []Platform) *Policy {
	c := *p
	c.Platforms = ps
	return &c
}

// allowed reports whether a tag passes allow-tags and ignore-tags.
func (p *Policy) allowed(tag string) (bool, string) {
	if p.Allow != nil && !p.Allow.Match(tag) {
		return false, "not matched by allow-tags " + p.Allow.String()
	}
	for _, m := range p.Ignore {
		if m.Match(tag) {
			return false, "matched by ignore-tags " + m.String()
		}
	}
	return true, ""
}

// parseNumeric accepts tags that are non-negative decimal integers.
func parseNumeric(tag string) (uint64, bool) {
	if tag == "" || tag[0] == '+' || tag[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseUint(tag, 10, 64)
	return n, err == nil
}
