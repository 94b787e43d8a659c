package suggest

import (
	"strings"
	"testing"
)

func TestDidYouMean(t *testing.T) {
	keys := []string{"tagTTL", "headTTL", "insecure", "address", "registries", "tokenFile", "requireTlog", "requireSCT"}
	for _, tt := range []struct {
		in   string
		want string
	}{
		{"tagTTl", `; did you mean "tagTTL"?`},    // case only
		{"insecur", `; did you mean "insecure"?`}, // one letter short
		{"adress", `; did you mean "address"?`},
		{"registres", `; did you mean "registries"?`},
		{"TAGTTL", `; did you mean "tagTTL"?`},   // same but for case: still worth saying
		{"token", `; did you mean "tokenFile"?`}, // too far to edit, but the only key it begins
		{"require", ""},                          // begins two keys: neither
		{"tok", `; did you mean "tokenFile"?`},
		{"to", ""},     // too short to begin a key
		{"tagTTL", ""}, // known: nothing to suggest
		{"zzzzzz", ""}, // nothing close
		{"", ""},
		{strings.Repeat("a", 300), ""}, // long input: bounded work, no suggestion
	} {
		if got := DidYouMean(tt.in, keys); got != tt.want {
			t.Errorf("DidYouMean(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := DidYouMean("x", nil); got != "" {
		t.Errorf("DidYouMean with no candidates = %q, want none", got)
	}
}
