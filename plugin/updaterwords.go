package plugin

import (
	"strings"
)

// argocd-image-updater reads the function names of allow-tags (any, regexp:)
// case-insensitively: ANY, RegExp:, Regexp: work there. The resolver accepts the
// same spellings and reads them as the lowercase names, so an annotation moved into
// a parameter keeps its meaning.

// hasPrefixFold reports whether s begins with prefix, ignoring case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// canonicalAllowTags spells an allow-tags value's function in lowercase: ANY is any,
// RegExp:EXPR is regexp:EXPR, Glob:P is glob:P. The expression or pattern is kept
// as written.
func canonicalAllowTags(s string) string {
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

// canonicalIgnoreTags spells the functions of ignore-tags values in lowercase: a
// value starting with regexp: in any case, and each comma-separated item starting
// with glob: in any case.
func canonicalIgnoreTags(values []string) []string {
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
