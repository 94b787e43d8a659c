//go:build !unix

package credentials

import "os/exec"

// setProcessGroup is a no-op where process groups are not available: the script
// itself is killed when its context ends.
func setProcessGroup(*exec.Cmd) {}
