// Package suggest finds the closest of a few known names to one that is not known,
// for "did you mean" hints in the messages about unknown keys, parameters and
// aliases.
package suggest

import (
	"fmt"
	"strings"
)

// DidYouMean returns `; did you mean "x"?` for the candidate closest to s (by edit
// distance, ignoring case), else for the only candidate s begins; "" when none is
// close enough or the closest is s itself.
func DidYouMean(s string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := levenshtein(strings.ToLower(s), strings.ToLower(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 || bestD == 0 && s == best {
		return ""
	}
	if bestD <= 2 || bestD*4 <= len(s) {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	if p := onlyExtension(s, candidates); p != "" {
		return fmt.Sprintf("; did you mean %q?", p)
	}
	return ""
}

// onlyExtension is the one candidate that s, of 3 characters or more, begins
// (token: tokenFile), or "" when none or several do.
func onlyExtension(s string, candidates []string) string {
	if len(s) < 3 {
		return ""
	}
	found := ""
	for _, c := range candidates {
		if strings.HasPrefix(strings.ToLower(c), strings.ToLower(s)) {
			if found != "" {
				return ""
			}
			found = c
		}
	}
	return found
}

func levenshtein(a, b string) int {
	if len(a) > 256 || len(b) > 256 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
