// Package oneline folds a message onto one line, for errors that Argo CD and logs
// show as a single line: a parser's multi-line message, an error that wraps
// several.
//
// It only folds white space. resolve.OneLine is another thing: it makes text from
// outside (a registry's answer) safe to print, escaping control characters.
package oneline

import "strings"

// Fold joins the words of s with single spaces: line breaks, tabs and runs of
// white space become one space, and none is left at either end.
func Fold(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
