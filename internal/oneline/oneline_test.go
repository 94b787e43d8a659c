package oneline_test

import (
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/oneline"
)

func TestFold(t *testing.T) {
	for in, want := range map[string]string{
		"":         "",
		"one line": "one line",
		"yaml: line 2:\n\tmapping  values\r\nare not allowed\n": "yaml: line 2: mapping values are not allowed",
		"  \n ": "",
	} {
		if got := oneline.Fold(in); got != want {
			t.Errorf("Fold(%q) = %q, want %q", in, got, want)
		}
	}
}
