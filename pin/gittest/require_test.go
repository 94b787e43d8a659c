package gittest

import (
	"testing"
)

// outcome runs f with an outcomeTB in a goroutine of its own (Skipf and Fatalf
// end it) and says whether it skipped or failed.
func outcome(t *testing.T, f func(tb testing.TB)) (skipped, failed bool) {
	o := &outcomeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(o)
	}()
	<-done
	return o.skipped, o.failed
}

// Without the git CLI, or without gpg, a test is skipped on a developer's
// machine and fails in CI.
func TestRequireOrSkipWithoutTools(t *testing.T) {
	for name, f := range map[string]func(testing.TB){
		"New":                   func(tb testing.TB) { New(tb) },
		"VerifyCommitSignature": func(tb testing.TB) { VerifyCommitSignature(tb, t.TempDir(), "HEAD", "") },
	} {
		for _, tc := range []struct {
			ci   string
			skip bool
		}{{"", true}, {"1", false}, {"true", false}} {
			t.Setenv("PATH", t.TempDir()) // no git, no gpg
			t.Setenv(CIEnv, tc.ci)
			t.Setenv(RequireSSHDEnv, "1") // names sshd only: no effect here
			if skipped, failed := outcome(t, f); skipped != tc.skip || failed == tc.skip {
				t.Errorf("%s with CI=%q: skipped %v, failed %v", name, tc.ci, skipped, failed)
			}
		}
	}
}

func TestRequired(t *testing.T) {
	for _, tc := range []struct {
		env, value, ci string
		want           bool
	}{
		{"", "", "", false},
		{"", "", "1", true},
		{"GITTEST_REQUIRE_X", "1", "", true},
		{"GITTEST_REQUIRE_X", "0", "", false},
		{"GITTEST_REQUIRE_X", "", "", false},
		{"GITTEST_REQUIRE_X", "0", "true", true},
	} {
		if tc.env != "" {
			t.Setenv(tc.env, tc.value)
		}
		t.Setenv(CIEnv, tc.ci)
		if got := Required(tc.env); got != tc.want {
			t.Errorf("Required(%q) with %s=%q, CI=%q: %v", tc.env, tc.env, tc.value, tc.ci, got)
		}
	}
}
