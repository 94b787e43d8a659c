//go:build unix

package credentials

import (
	"os/exec"
	"syscall"
)

// setProcessGroup runs cmd in its own process group and kills the whole group when
// its context ends, so that a script's children do not outlive a timeout.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
