// Package release is `make release`: it refuses a release that would not be what its
// version says (Check: a VERSION that is not vX.Y.Z, one without a CHANGELOG.md section,
// a dirty tree, manifests or docs naming another version) and builds one (Build: the
// binaries, the multi-platform image and its SBOMs, install.yaml, the Helm values, the
// release notes and SHA256SUMS in one directory). CheckVersions is also a test: the
// manifests' image tag, the docs' ref= and the CHANGELOG's newest version agree.
package release

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Unreleased is the date of a CHANGELOG section whose version is not released yet,
// and the name of the section of changes for no version yet.
const Unreleased = "Unreleased"

// Version is a release version vMAJOR.MINOR.PATCH.
type Version struct{ Major, Minor, Patch int }

func (v Version) String() string { return fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Number is the version without its v, as CHANGELOG.md's headings write it.
func (v Version) Number() string { return strings.TrimPrefix(v.String(), "v") }

func (v Version) less(w Version) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor < w.Minor
	}
	return v.Patch < w.Patch
}

var versionRE = regexp.MustCompile(`^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// ParseVersion parses a release's VERSION: vX.Y.Z, numbers without leading zeros, no
// pre-release or build suffix.
func ParseVersion(s string) (Version, error) {
	if !strings.HasPrefix(s, "v") {
		return Version{}, fmt.Errorf("VERSION %q is not vX.Y.Z (e.g. make release VERSION=v0.1.0)", s)
	}
	return parseNumber(s, "VERSION")
}

func parseNumber(s, what string) (Version, error) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("%s %q is not vX.Y.Z (numbers without leading zeros, no pre-release or build suffix; e.g. v0.1.0)", what, s)
	}
	var v Version
	for i, p := range []*int{&v.Major, &v.Minor, &v.Patch} {
		n, err := strconv.Atoi(m[i+1])
		if err != nil {
			return Version{}, fmt.Errorf("%s %q: %w", what, s, err)
		}
		*p = n
	}
	return v, nil
}

// Section is one `## [...]` section of CHANGELOG.md.
type Section struct {
	// Version is the section's version; zero for the [Unreleased] section.
	Version Version
	// Unreleased marks the [Unreleased] section (changes for no version yet).
	Unreleased bool
	// Date is the release date YYYY-MM-DD, or Unreleased for a version not released yet.
	Date string
	// Line is the heading's line number.
	Line int
	// Body is the text under the heading up to the next one, trimmed, without the
	// link reference definitions ([0.1.0]: https://...) Keep a Changelog ends with
	// and without subsections that hold nothing (a "### Changed" nothing is listed
	// under yet).
	Body string
}

var (
	headingRE = regexp.MustCompile(`^## \[([^\]]+)\](?: - (.+))?$`)
	dateRE    = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)
	linkDefRE = regexp.MustCompile(`^\[[^\]]+\]: \S+$`)
)

// Changelog is CHANGELOG.md's sections, newest first.
type Changelog struct {
	File     string
	Sections []Section
}

// ParseChangelog reads a Keep a Changelog file (file names it in errors): each
// `## [X.Y.Z] - YYYY-MM-DD` (or `- Unreleased`) and `## [Unreleased]` heading and the
// text under it. Versions must be newest first and each listed once.
func ParseChangelog(file string, data []byte) (*Changelog, error) {
	c := &Changelog{File: file}
	var body []string
	flush := func() {
		if len(c.Sections) > 0 {
			c.Sections[len(c.Sections)-1].Body = trimBody(body)
		}
		body = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), " \t\r")
		if !strings.HasPrefix(line, "## ") {
			body = append(body, line)
			continue
		}
		flush()
		s, err := parseHeading(file, n, line)
		if err != nil {
			return nil, err
		}
		if err := c.add(s); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	flush()
	return c, nil
}

func parseHeading(file string, n int, line string) (Section, error) {
	bad := func(why string) (Section, error) {
		return Section{}, fmt.Errorf("%s:%d: heading %q: %s; want \"## [X.Y.Z] - YYYY-MM-DD\", \"## [X.Y.Z] - Unreleased\" or \"## [Unreleased]\" (keepachangelog.com)", file, n, line, why)
	}
	m := headingRE.FindStringSubmatch(line)
	if m == nil {
		return bad("not a version heading")
	}
	s := Section{Line: n, Date: m[2]}
	if m[1] == Unreleased {
		if s.Date != "" {
			return bad("the [Unreleased] section has no date")
		}
		s.Unreleased = true
		return s, nil
	}
	v, err := parseNumber(m[1], "version")
	if err != nil || strings.HasPrefix(m[1], "v") {
		return bad("the version is not X.Y.Z")
	}
	s.Version = v
	if s.Date != Unreleased && !dateRE.MatchString(s.Date) {
		return bad("the date is not YYYY-MM-DD or Unreleased")
	}
	return s, nil
}

// add appends s, checking that versions come newest first, once each.
func (c *Changelog) add(s Section) error {
	for _, prev := range c.Sections {
		if s.Unreleased && prev.Unreleased {
			return fmt.Errorf("%s:%d: a second [Unreleased] section (the first at line %d)", c.File, s.Line, prev.Line)
		}
		if !s.Unreleased && !prev.Unreleased && !s.Version.less(prev.Version) {
			return fmt.Errorf("%s:%d: [%s] after [%s] (line %d): versions go newest first, each once", c.File, s.Line, s.Version.Number(), prev.Version.Number(), prev.Line)
		}
		if s.Unreleased && !prev.Unreleased {
			return fmt.Errorf("%s:%d: [Unreleased] after [%s] (line %d): it comes first", c.File, s.Line, prev.Version.Number(), prev.Line)
		}
	}
	c.Sections = append(c.Sections, s)
	return nil
}

func trimBody(lines []string) string {
	var kept []string
	for i := 0; i < len(lines); i++ {
		if linkDefRE.MatchString(lines[i]) {
			continue
		}
		if strings.HasPrefix(lines[i], "### ") {
			j := i + 1
			for j < len(lines) && (strings.TrimSpace(lines[j]) == "" || linkDefRE.MatchString(lines[j])) {
				j++
			}
			if j == len(lines) || strings.HasPrefix(lines[j], "### ") {
				i = j - 1 // an empty subsection
				continue
			}
		}
		kept = append(kept, lines[i])
	}
	return strings.TrimSpace(strings.Join(kept, "\n"))
}

// Latest is the newest versioned section (not [Unreleased]); false if there is none.
func (c *Changelog) Latest() (Section, bool) {
	for _, s := range c.Sections {
		if !s.Unreleased {
			return s, true
		}
	}
	return Section{}, false
}

// Section is the section of version v; false if there is none.
func (c *Changelog) Section(v Version) (Section, bool) {
	for _, s := range c.Sections {
		if !s.Unreleased && s.Version == v {
			return s, true
		}
	}
	return Section{}, false
}
