// Package yamlerr finds where a YAML document is broken. For a syntax error
// gopkg.in/yaml.v3 names the line where the enclosing block began (line 1 for a
// bad indent deep in a file), not where the problem is, and no column. Locate finds
// the problem's line and column by parsing longer and longer prefixes of the
// document: the first one that fails as the whole document does ends at the
// problem.
package yamlerr

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Error is a YAML syntax error at a place in a document.
type Error struct {
	Line, Column int    // 1-based; the column counts characters; 0: not known
	Problem      string // yaml.v3's message, without its "yaml: line N:" prefix
}

func (e *Error) Error() string {
	switch {
	case e.Line > 0 && e.Column > 0:
		return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Problem)
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, e.Problem)
	}
	return e.Problem
}

// Where is " (line L, column C)" for a message that names its file first, or ""
// when the place is not known.
func (e *Error) Where() string {
	switch {
	case e.Line > 0 && e.Column > 0:
		return fmt.Sprintf(" (line %d, column %d)", e.Line, e.Column)
	case e.Line > 0:
		return fmt.Sprintf(" (line %d)", e.Line)
	}
	return ""
}

// Parse decodes every document of data into nodes, as a loader would; the first
// error is returned as yaml.v3 gives it.
func Parse(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return docs, err
		}
		docs = append(docs, &n)
	}
}

// Locate finds where in data the syntax error err, which Parse(data) returned,
// is. An error of another kind (none of yaml.v3's "yaml: " messages) gives nil.
func Locate(data []byte, err error) *Error {
	reported, problem, ok := split(err)
	if !ok {
		return nil
	}
	l := locator{data: data, ends: lineEnds(data), problem: problem}
	if op, open := l.unclosed(data); open {
		// Only unclosed: the quote or bracket that is never closed.
		return &Error{Line: op.line, Column: op.col, Problem: problem}
	}
	line := l.line(max(reported, 1))
	return &Error{Line: line, Column: l.column(line), Problem: problem}
}

var reLine = regexp.MustCompile(`^line (\d+): `)

// split takes yaml.v3's message apart: "yaml: line N: problem".
func split(err error) (line int, problem string, ok bool) {
	if err == nil {
		return 0, "", false
	}
	msg, ok := strings.CutPrefix(err.Error(), "yaml: ")
	if !ok {
		return 0, "", false
	}
	if m := reLine.FindStringSubmatch(msg); m != nil {
		fmt.Sscan(m[1], &line) //nolint:errcheck // digits
		msg = msg[len(m[0]):]
	}
	return line, msg, true
}

type locator struct {
	data    []byte
	ends    []int // ends[i]: the offset just past line i (1-based), with its newline; ends[0] = 0
	problem string
}

func lineEnds(data []byte) []int {
	ends := []int{0}
	for off := 0; off < len(data); {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			i = len(data) - off - 1
		}
		off += i + 1
		ends = append(ends, off)
	}
	return ends
}

// fails reports whether prefix fails to parse as the document does, for a reason
// of its own and not only because it stops inside a quote or a flow collection.
func (l locator) fails(prefix []byte) bool {
	_, err := Parse(prefix)
	if _, p, ok := split(err); !ok || p != l.problem {
		return false
	}
	_, open := l.unclosed(prefix)
	return !open
}

// budget bounds the bytes parsed one prefix after the other; past it the search
// halves the range instead (fewer parses, but it assumes that every prefix past the
// problem fails, and none before it).
const budget = 8 << 20

// line is the first line, from line from on, whose prefix of the document fails:
// the problem is on it. yaml.v3's reported line is never past the problem.
func (l locator) line(from int) int {
	n := len(l.ends) - 1
	if from >= n {
		return n
	}
	if (n-from)*len(l.data) > budget {
		lo, hi := from, n // hi fails: it is the document
		for lo < hi {
			mid := (lo + hi) / 2
			if l.fails(l.data[:l.ends[mid]]) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return hi
	}
	for i := from; i < n; i++ {
		if l.fails(l.data[:l.ends[i]]) {
			return i
		}
	}
	return n
}

// column is the character of line (1-based) at which the document fails: the
// shortest part of the line that, after the lines before it, fails as the document
// does ends with it.
func (l locator) column(line int) int {
	if line < 1 || line >= len(l.ends) {
		return 0
	}
	start := l.ends[line-1]
	text := strings.TrimRight(string(l.data[start:l.ends[line]]), "\r\n")
	if name, ok := strings.CutPrefix(l.problem, "unknown anchor '"); ok {
		if i := strings.Index(text, "*"+strings.TrimSuffix(name, "' referenced")); i >= 0 {
			return utf8.RuneCountInString(text[:i]) + 1
		}
	}
	var offs []int // offs[c-1]: the offset just past character c of the line
	for off := range text {
		if off > 0 {
			offs = append(offs, off)
		}
	}
	offs = append(offs, len(text))
	if len(text) == 0 {
		offs = nil
	}
	fails := func(c int) bool { return l.fails(l.data[:start+offs[c-1]]) }
	if len(offs)*(start+len(text)) > budget {
		lo, hi := 1, len(offs)+1 // hi: past the line's end
		for lo < hi {
			mid := (lo + hi) / 2
			if fails(mid) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return hi
	}
	for c := 1; c <= len(offs); c++ {
		if fails(c) {
			return c
		}
	}
	return len(offs) + 1 // at the end of the line
}

// opener is an unclosed quote or flow bracket, at line and col (1-based).
type opener struct {
	ch        byte
	line, col int
}

// unclosed tells whether prefix parses once its open quote and flow brackets are
// closed: then it failed only because it stopped inside them. It returns the
// innermost of them.
func (l locator) unclosed(prefix []byte) (opener, bool) {
	stack := openers(prefix)
	if len(stack) == 0 {
		return opener{}, false
	}
	var closer []byte
	for i := len(stack) - 1; i >= 0; i-- {
		switch stack[i].ch {
		case '[':
			closer = append(closer, ']')
		case '{':
			closer = append(closer, '}')
		default:
			closer = append(closer, stack[i].ch)
		}
	}
	_, err := Parse(append(bytes.Clone(prefix), closer...))
	return stack[len(stack)-1], err == nil
}

// openers scans prefix for the quotes and flow brackets still open at its end. It
// reads only what opens and closes them (a quote or a bracket where a value
// starts, escapes in double quotes, comments), enough to close a prefix, not to
// check it.
func openers(prefix []byte) []opener {
	var stack []opener
	line, col := 1, 0
	var quote byte     // the open quote, or 0
	prev := byte('\n') // the last character outside spaces and quotes
	spaced := true     // a space or a line start came after prev
	for i := 0; i < len(prefix); i++ {
		c := prefix[i]
		col++
		switch {
		case c == '\n':
			line, col, spaced = line+1, 0, true
			if quote == 0 {
				prev = '\n'
			}
		case quote == '"' && c == '\\':
			i++ // the escaped character
			col++
		case quote != 0:
			if c == quote {
				quote, stack = 0, stack[:len(stack)-1]
				prev, spaced = c, false
			}
		case c == '#' && spaced:
			for i+1 < len(prefix) && prefix[i+1] != '\n' {
				i++
			}
		case c == ' ' || c == '\t' || c == '\r':
			spaced = true
		case (c == '"' || c == '\'' || c == '[' || c == '{') && startsValue(prev, spaced):
			stack = append(stack, opener{c, line, col})
			if c == '"' || c == '\'' {
				quote = c
			}
			prev, spaced = c, false
		case (c == ']' || c == '}') && len(stack) > 0:
			stack = stack[:len(stack)-1]
			prev, spaced = c, false
		default:
			prev, spaced = c, false
		}
	}
	return stack
}

// startsValue reports whether a value may start after prev (and a space, if
// spaced): at a line start, in a flow collection, or after a key's colon, a list
// dash or a complex key's question mark followed by a space.
func startsValue(prev byte, spaced bool) bool {
	switch prev {
	case '\n', '[', '{', ',':
		return true
	case ':', '-', '?':
		return spaced
	}
	return false
}
