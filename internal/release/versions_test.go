package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// TestVersionsAgree checks the tree as it is: the image tag of the manifests
// (deploy/), the ?ref= of the install instructions (deploy/, docs/, README.md) and the
// newest version of CHANGELOG.md agree, so that what the docs install is what the
// next release publishes. It fails naming each file:line that differs.
func TestVersionsAgree(t *testing.T) {
	root := moduleRoot(t)
	data, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseChangelog("CHANGELOG.md", data)
	if err != nil {
		t.Fatal(err)
	}
	latest, ok := c.Latest()
	if !ok {
		t.Fatal("CHANGELOG.md has no version section")
	}
	if err := CheckVersions(root, latest.Version); err != nil {
		t.Errorf("CHANGELOG.md:%d: the newest version is %s, but\n%v", latest.Line, latest.Version, err)
	}
	refs, err := FindRefs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		t.Logf("%s", r)
	}
}
