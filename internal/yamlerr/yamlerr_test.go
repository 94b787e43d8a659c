package yamlerr

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLocate: each broken document's problem is found at the line and column a
// person would point at, where yaml.v3 itself names another line (its "v3" here).
func TestLocate(t *testing.T) {
	for _, tt := range []struct {
		name      string
		doc       string
		line, col int
		problem   string
	}{
		{"indent of a mapping key too deep", "images:\n  app:\n    image: x\n   strategy: y\n", 4, 4, "did not find expected key"},  // v3: line 1
		{"list item under a mapping", "images:\n  app:\n    image: x\n    strategy: y\n  - z\n", 5, 3, "did not find expected key"}, // v3: line 1
		{"key off the list item's column", "a: 1\nregistries:\n  - prefix: ghcr.io\n   insecure: true\n", 4, 4, "did not find expected '-' indicator"},
		{"mapping value in a plain scalar", "a: 1\nb: 2\nx: y\nrefresh: hard: x\n", 4, 14, "mapping values are not allowed in this context"},
		{"tab as indentation", "a: 1\nb: 2\nx:\n\tbad: 1\n", 4, 1, "found character that cannot start any token"},
		{"character that starts no token", "a: 1\nb: 2\nc: 3\nd: @x\n", 4, 4, "found character that cannot start any token"},
		{"dedent to a column no block has", "a: 1\nb: 2\nc:\n  d: 1\n e: 2\n", 5, 2, "did not find expected key"},
		{"list item after a mapping", "a: 1\nb: 2\nc: 3\n- d\n", 4, 1, "did not find expected key"},
		{"unknown alias", "a: 1\nb: 2\nc: 3\nd: *nope\n", 4, 4, "unknown anchor 'nope' referenced"},
		{"unclosed flow sequence", "a: 5m\nb: 1m\n\nrefresh: [hard\n", 4, 10, "did not find expected ',' or ']'"},
		{"unclosed flow mapping", "a: 1\nb: 2\nc: 3\nd: {x: 1\n", 4, 4, "did not find expected ',' or '}'"},
		{"unterminated double quote", "a: 1\nb: 2\nx: y\nz: \"abc\n", 4, 4, "found unexpected end of stream"},
		{"unterminated single quote", "a: 1\nb: 2\nc: 3\nd: 'x\n", 4, 4, "found unexpected end of stream"},
		{"error inside a multi-line flow sequence", "a: [1,\n 2,\n 3: :\n]\n", 3, 5, "did not find expected node content"}, // v3: line 2
		{"valid multi-line flow before the problem", "a: [1,\n  2]\nb: {c: 1,\n  d: 2}\ne: 1\n f: 2\n", 6, 3, "mapping values are not allowed in this context"},
		{"comment with a quote before the problem", "# it's a comment\na: \"x # y\" # don't\nb:\n  c: 1\n d: 2\n", 5, 2, "did not find expected key"},
		{"problem in a second document", "a: 1\n---\nb: 2\n c: 3\n", 4, 3, "mapping values are not allowed in this context"},
		{"characters before the problem", "a: \"é\"\nb: éé: x\n", 2, 6, "mapping values are not allowed in this context"},
		{"no final newline", "a: 1\nb: c: d", 2, 5, "mapping values are not allowed in this context"},
		{"first line", "a: b: c\n", 1, 5, "mapping values are not allowed in this context"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatalf("document parsed: %q", tt.doc)
			}
			got := Locate([]byte(tt.doc), err)
			if got == nil {
				t.Fatalf("Locate(%v) = nil", err)
			}
			if got.Line != tt.line || got.Column != tt.col || got.Problem != tt.problem {
				t.Errorf("Locate = line %d, column %d, %q; want line %d, column %d, %q (yaml.v3 said: %v)",
					got.Line, got.Column, got.Problem, tt.line, tt.col, tt.problem, err)
			}
			want := "line " + strconv.Itoa(tt.line) + ", column " + strconv.Itoa(tt.col) + ": " + tt.problem
			if got.Error() != want {
				t.Errorf("Error() = %q, want %q", got.Error(), want)
			}
		})
	}
}

// TestLocateNotSyntax: an error that is not yaml.v3's gives nil, and a document
// that parses has no error to locate.
func TestLocateNotSyntax(t *testing.T) {
	if got := Locate([]byte("a: b: c"), errors.New("open x: no such file")); got != nil {
		t.Errorf("Locate of another error = %v, want nil", got)
	}
	if got := Locate([]byte("a: 1"), nil); got != nil {
		t.Errorf("Locate(nil) = %v, want nil", got)
	}
	if docs, err := Parse([]byte("a: 1\n---\nb: 2\n")); err != nil || len(docs) != 2 {
		t.Errorf("Parse of two documents = %d, %v; want 2, nil", len(docs), err)
	}
}

// TestLocateLargeDocument: past the parse budget the search halves the range and
// still finds the line of a problem near the end of a long document.
func TestLocateLargeDocument(t *testing.T) {
	var b strings.Builder
	b.WriteString("images:\n")
	for i := range 20000 {
		b.WriteString("  k" + strings.Repeat("x", i%7) + strconv.Itoa(i) + string(rune('a'+i%26)) + ": value\n")
	}
	b.WriteString(" bad: 1\n") // a column no block has
	doc := []byte(b.String())
	_, err := Parse(doc)
	got := Locate(doc, err)
	if got == nil || got.Line != 20002 || got.Column != 2 {
		t.Fatalf("Locate = %+v, want line 20002, column 2", got)
	}
}

// TestLocateLongLine: on one long line the column is found by halving too, within
// the parse budget.
func TestLocateLongLine(t *testing.T) {
	doc := []byte("a: 1\nk: " + strings.Repeat("y", 300000) + " z: w\n")
	_, err := Parse(doc)
	start := time.Now()
	got := Locate(doc, err)
	if got == nil || got.Line != 2 || got.Column != 3+300000+3 {
		t.Fatalf("Locate = %+v, want line 2, column %d", got, 3+300000+3)
	}
	t.Logf("located in %s", time.Since(start))
}
