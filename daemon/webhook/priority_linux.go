package webhook

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// lowerPriority gives every thread of this process the nice value nice and,
// with idle, the SCHED_IDLE policy: the kernel then runs them only on CPU time
// no other thread wants, and a waking thread of the daemon takes the CPU from
// them at once (a thread of a higher nice value may run out its slice first).
// Linux keeps both per thread, and a thread starts with its creator's: a pass
// over the threads running now, then another for those started during the
// first, leaves every later thread to inherit them. Neither needs a privilege.
func lowerPriority(nice int, idle bool) error {
	var errs []error
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := setThreadPriority(tid, nice, idle); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func setThreadPriority(tid, nice int, idle bool) error {
	if nice > 0 {
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil {
			return fmt.Errorf("nice %d: %w", nice, err)
		}
	}
	if idle {
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE, Nice: int32(nice)}
		if err := unix.SchedSetAttr(tid, &attr, 0); err != nil {
			return fmt.Errorf("SCHED_IDLE: %w", err)
		}
	}
	return nil
}
