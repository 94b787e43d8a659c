package resolve

import (
	"fmt"
	"regexp"
	"slices"
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

// StrategyAccepted says which strategy names ParseStrategy accepts, for messages
// and tooltips.
const StrategyAccepted = "semver (default), newest-build, digest, alphabetical, numeric (old names: latest, name)"

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
	return "", "", &InputError{Field: string(FieldStrategy), Policy: FieldStrategy, Value: s, Accepted: StrategyAccepted}
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
	// Verify requires the chosen tag to be signed (zero: no signature check).
	Verify VerifySpec
}

// Policy is a checked policy, ready to resolve with. It can only be made by
// Compile, so it always holds a known strategy with its compiled constraint.
type Policy struct {
	strategy Strategy
	order    orderer // the strategy, with its compiled constraint
	// constraint is as written: a semver range for semver, the tag for digest,
	// empty otherwise.
	constraint string
	allow      TagMatcher
	ignore     []TagMatcher
	platforms  []Platform
	pinDigest  bool
	trust      *Trust // nil: no signature required by the policy itself
	warnings   []string
}

// Compile checks every field of the spec and returns the policy, or an *InputError
// naming the first bad field (its Policy says which).
func (s PolicySpec) Compile() (*Policy, error) {
	st, warn, err := ParseStrategy(s.Strategy)
	if err != nil {
		return nil, err
	}
	p := &Policy{strategy: st, constraint: strings.TrimSpace(s.Constraint), pinDigest: s.PinDigest}
	if warn != "" {
		p.warnings = append(p.warnings, warn)
	}
	constraintError := func(accepted string, err error) error {
		return &InputError{Field: string(FieldConstraint), Policy: FieldConstraint, Value: p.constraint, Accepted: accepted, Err: err}
	}
	switch st {
	case Semver:
		var c *semver.Constraints
		if p.constraint != "" {
			if c, err = semver.NewConstraint(p.constraint); err != nil {
				return nil, constraintError("a semver range such as 1.x, ~1.2, ^2.0, >=1.4 <2", err)
			}
		}
		p.order = semverStrategy{c: c, raw: p.constraint}
	case Digest:
		if p.constraint == "" {
			return nil, constraintError("the tag to follow, e.g. repo:latest, when update-strategy is digest", nil)
		}
		// The tag goes into the manifest URL path (/v2/REPO/manifests/TAG): only the
		// tag grammar reaches it, never ../../x, a/b or %2e%2e.
		if err := CheckTag(p.constraint); err != nil {
			return nil, constraintError("the tag to follow when update-strategy is digest: "+TagAccepted, err)
		}
		p.order = digestStrategy{tag: p.constraint}
	case NewestBuild, Alphabetical, Numeric:
		if p.constraint != "" {
			return nil, constraintError("no constraint with update-strategy "+string(st)+"; filter tags with allow-tags/ignore-tags", nil)
		}
		p.order = map[Strategy]orderer{NewestBuild: newestBuild{}, Alphabetical: alphabetical{}, Numeric: numeric{}}[st]
	}
	if p.allow, err = ParseAllowTags(s.AllowTags); err != nil {
		return nil, err
	}
	if p.ignore, err = ParseIgnoreTags(s.IgnoreTags...); err != nil {
		return nil, err
	}
	if p.platforms, err = ParsePlatforms(s.Platforms...); err != nil {
		return nil, err
	}
	if p.trust, err = s.Verify.Compile(); err != nil {
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

// Strategy is the policy's strategy.
func (p *Policy) Strategy() Strategy { return p.strategy }

// Constraint is the constraint as written: a semver range for semver, the followed
// tag for digest, empty otherwise.
func (p *Policy) Constraint() string { return p.constraint }

// Platforms are the platforms a tag must have every one of; empty means no check.
func (p *Policy) Platforms() []Platform { return slices.Clone(p.platforms) }

// AllowTags is the compiled allow-tags filter ("any" when none was given).
func (p *Policy) AllowTags() TagMatcher { return p.allow }

// IgnoreTags are the compiled ignore-tags patterns, one per pattern given.
func (p *Policy) IgnoreTags() []TagMatcher { return slices.Clone(p.ignore) }

// PinDigest says whether references are written tag@digest.
func (p *Policy) PinDigest() bool { return p.pinDigest }

// Trust is the signature the policy itself requires (nil: none). An operator's
// requirement for the registry is added at resolution (WithRequiredTrust).
func (p *Policy) Trust() *Trust { return p.trust }

// Warnings are about accepted but deprecated values.
func (p *Policy) Warnings() []string { return slices.Clone(p.warnings) }

// String is a canonical form of the whole policy: equal policies give equal strings.
func (p *Policy) String() string {
	var ignore []string
	for _, m := range p.ignore {
		ignore = append(ignore, m.String())
	}
	return fmt.Sprintf("%s|%s|%s|%q|%q|%t|%s", p.strategy, p.constraint, p.allow.String(), ignore,
		PlatformStrings(p.platforms), p.pinDigest, p.trust.String())
}

// WithPlatforms returns a copy of the policy requiring the given platforms.
func (p *Policy) WithPlatforms(ps []Platform) *Policy {
	c := *p
	c.platforms = slices.Clone(ps)
	return &c
}

// allowed reports whether a tag passes allow-tags and ignore-tags.
func (p *Policy) allowed(tag string) (bool, string) {
	if !p.allow.Match(tag) {
		return false, "not matched by allow-tags " + p.allow.String()
	}
	for _, m := range p.ignore {
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

// TagAccepted describes the OCI tag grammar, for messages.
const TagAccepted = "a tag: a letter, digit or _ then up to 127 letters, digits, _, . or -"

// DigestAccepted describes the digests CheckDigest accepts, for messages.
const DigestAccepted = "a digest: sha256: and 64 lowercase hex digits, or sha512: and 128"

var (
	digestGrammar = regexp.MustCompile(`^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$`)
)

// CheckTag reports whether s is a tag by the OCI distribution grammar
// ([A-Za-z0-9_][A-Za-z0-9._-]{0,127}): the only tags that may be put into a
// registry URL path.
func CheckTag(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty tag")
	case len(s) > 128:
		return fmt.Errorf("%d characters; a tag has at most 128", len(s))
	case !ociTagOK(s):
		return fmt.Errorf("not a tag")
	}
	return nil
}

// CheckDigest reports whether s is a digest the registry client may put into a
// URL path (sha256 or sha512, lowercase hex of the algorithm's length).
func CheckDigest(s string) error {
	if !digestGrammar.MatchString(s) {
		return fmt.Errorf("not a digest")
	}
	return nil
}

// CheckReference reports whether s is a tag or a digest: what may follow
// /manifests/ in a registry URL path.
func CheckReference(s string) error {
	if CheckDigest(s) == nil || CheckTag(s) == nil {
		return nil
	}
	return fmt.Errorf("neither %s nor %s", TagAccepted, DigestAccepted)
}
