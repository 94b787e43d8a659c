package argocde2e

import (
	"strings"
	"testing"
)

// TestCorpus builds the fidelity corpus without a lab: every source is found, no two
// apps share a name, and each kind of app the scenario is for is in it.
func TestCorpus(t *testing.T) {
	apps, skipped, err := BuildCorpus(paths.Root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]int{}
	for _, a := range apps {
		types[a.Type]++
		if len(a.Name) > 50 || strings.Trim(a.Name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || strings.HasSuffix(a.Name, "-") {
			t.Errorf("app name %q is not a DNS label of at most 50 characters", a.Name)
		}
	}
	t.Logf("%d apps (%v), %d left out", len(apps), types, len(skipped))
	for _, typ := range []string{"Helm", "Kustomize", "Directory"} {
		if types[typ] < 3 {
			t.Errorf("the corpus has %d %s apps, want several", types[typ], typ)
		}
	}
}
