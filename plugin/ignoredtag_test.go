package plugin

import (
	"strings"
	"testing"
)

// TestIgnoredListTag: the one decision the plugin's image-list and resolve's IMAGE
// share: a tag is ignored only under the strategies that have no use for one.
func TestIgnoredListTag(t *testing.T) {
	for _, tt := range []struct {
		tag, strategy string
		ignored       bool
	}{
		{"latest", "newest-build", true},
		{"latest", "latest", true}, // the old name of newest-build
		{"main", "alphabetical", true},
		{"main", "name", true}, // the old name of alphabetical
		{"1", "numeric", true},
		{"~1.2", "semver", false},
		{"~1.2", "", false}, // semver by default
		{"stable", "digest", false},
		{"", "newest-build", false},
		{"latest", "fastest", false}, // unknown: compiling the policy says so
	} {
		w, ignored := IgnoredListTag("IMAGE app:"+tt.tag, tt.tag, tt.strategy, "--strategy")
		if ignored != tt.ignored {
			t.Errorf("IgnoredListTag(%q, %q) ignored = %v, want %v", tt.tag, tt.strategy, ignored, tt.ignored)
		}
		if ignored && (!strings.HasPrefix(w, "IMAGE app:"+tt.tag+": ") || !strings.Contains(w, `remove ":`+tt.tag+`"`) || !strings.Contains(w, "(from --strategy)")) {
			t.Errorf("IgnoredListTag(%q, %q) warning %q does not name where the tag and the strategy were given", tt.tag, tt.strategy, w)
		}
		if !ignored && w != "" {
			t.Errorf("IgnoredListTag(%q, %q) warns %q without ignoring", tt.tag, tt.strategy, w)
		}
	}
}
