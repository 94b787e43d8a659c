//go:build linux

package main

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel SIGKILL the child when the sidecar dies, even
// of SIGKILL, so that the CMP server never lives on orphaned without its daemon.
// The caller must start the child from a goroutine locked to its OS thread (see
// runSidecar): the signal follows the thread, not the process.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
