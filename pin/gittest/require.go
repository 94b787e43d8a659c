package gittest

import (
	"os"
	"testing"
)

// CIEnv names the variable CI sets (.ci/run exports CI=1): with it set, a test
// whose tool is missing fails instead of skipping.
const CIEnv = "CI"

// Required reports whether a test that lacks a tool it needs must fail rather
// than skip: the variable env is 1 (env "" names none), or CIEnv is set. On a
// developer's machine neither is, and the test is skipped.
func Required(env string) bool {
	return (env != "" && os.Getenv(env) == "1") || os.Getenv(CIEnv) != ""
}

// RequireOrSkip ends a test that cannot run here because a tool is missing;
// missing says which, and how to install it. It fails the test when
// Required(env), and skips it (saying how to require the tool) otherwise.
// New and NewSSH use it, and so may a test that runs a tool itself.
func RequireOrSkip(t testing.TB, env, missing string) {
	t.Helper()
	how := CIEnv + " set"
	if env != "" {
		how = env + "=1 or " + how
	}
	if Required(env) {
		t.Fatalf("%s; it is required here (%s)", missing, how)
	}
	t.Skipf("%s; skipped (%s would make this a failure)", missing, how)
}
