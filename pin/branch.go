package pin

// CheckBranch checks a branch name by git's rules, as the writer will ("" and HEAD
// mean the repository's default branch), so that a bad pin-branch is an input
// error at render time, not a dropped change later.
func CheckBranch(b string) error { return checkBranchName(normalizeBranch(b)) }

// CheckChange checks a change as Submit would before queueing it (Submit drops a
// change that fails it, with a log line): the caller can tell the app why.
func CheckChange(c Change) error { return checkChange(c) }
