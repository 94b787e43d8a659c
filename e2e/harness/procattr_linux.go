//go:build linux

package harness

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes a child process (the registry) get SIGKILL when the test binary
// dies, e.g. on a go test -timeout panic, so no registry outlives its test run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
