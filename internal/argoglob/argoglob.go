// Package argoglob matches paths as Argo CD matches a directory source's include and
// exclude patterns (spec.source.directory.include and .exclude): a
// github.com/gobwas/glob pattern compiled with no separator, matched against the
// file's path relative to the app directory, with "/" between its parts.
//
// With no separator "*" and "**" both match any run of characters, "/" included:
// "*.yaml" matches "a.yaml" and "sub/a.yaml", "**/*.yaml" only the second (the "/"
// is a literal). "{a.yaml,b.yaml}" matches either name, "?" one character, "[a-c]"
// and "[!a-c]" a character of (or not of) a class, and "\" escapes the next one.
//
// Argo CD (reposerver/repository/repository.go, util/glob) logs a pattern that does
// not compile and matches nothing with it; here such a pattern is an error. Argo CD
// 3.6 uses gobwas/glob v1.0.0, which refuses more patterns than v0.2.3 (Argo CD 2.14's,
// and this module's, through Helm): an unclosed "{", a trailing "\" and invalid UTF-8
// are refused here too, so a pattern accepted here compiles in both.
package argoglob

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/gobwas/glob"
)

// Pattern is a compiled include or exclude pattern.
type Pattern struct {
	source string
	g      glob.Glob
}

// Compile compiles pattern; a pattern that does not parse is an error saying why.
func Compile(pattern string) (p *Pattern, err error) {
	if err := checkSyntax(pattern); err != nil {
		return nil, err
	}
	defer func() {
		// gobwas/glob v0.2.3 panics on a few malformed patterns.
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("not a glob pattern: %v", r)
		}
	}()
	g, err := glob.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("not a glob pattern: %w", err)
	}
	return &Pattern{source: pattern, g: g}, nil
}

// Match reports whether rel, a path relative to the app directory with "/" between
// its parts, matches the pattern.
func (p *Pattern) Match(rel string) bool { return p.g.Match(rel) }

// String is the pattern as written.
func (p *Pattern) String() string { return p.source }

// checkSyntax refuses what gobwas/glob v1.0.0 refuses and v0.2.3 lets through.
func checkSyntax(pattern string) error {
	if !utf8.ValidString(pattern) {
		return errors.New("not a glob pattern: invalid UTF-8")
	}
	depth := 0
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			if i++; i == len(pattern) {
				return errors.New("not a glob pattern: a trailing \\ escapes nothing")
			}
		case '[':
			// A class ends at the next unescaped "]"; "{" and "}" are literal inside it.
			for i++; i < len(pattern) && pattern[i] != ']'; i++ {
				if pattern[i] == '\\' {
					i++
				}
			}
			if i >= len(pattern) {
				return errors.New("not a glob pattern: unclosed [")
			}
		case '{':
			depth++
		case '}':
			if depth > 0 {
				depth--
			}
		}
	}
	if depth > 0 {
		return errors.New("not a glob pattern: unclosed {")
	}
	return nil
}
