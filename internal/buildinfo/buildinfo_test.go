package buildinfo

import (
	"runtime"
	"testing"
)

func TestRead(t *testing.T) {
	v := Read("tool", "v1.2.3", "abc123")
	want := "tool v1.2.3 (commit abc123, " + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")"
	if v.String() != want {
		t.Errorf("String() = %q, want %q", v.String(), want)
	}
	// Unstamped (a test binary records no module version or VCS revision): said so.
	u := Read("tool", "", "")
	if u.Version == "" || u.Commit == "" {
		t.Errorf("unstamped: %+v, want a version and a commit, if only (devel) and unknown", u)
	}
}
