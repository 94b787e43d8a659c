package webhook

import (
	"errors"
	"os"
	"strconv"
	"syscall"
)

// lowerPriority sets the nice value of every thread of this process to nice.
// Linux keeps a nice value per thread, and a thread starts with its creator's:
// a pass over the threads running now, then another for those started during
// the first, leaves every later thread to inherit it.
func lowerPriority(nice int) error {
	if nice <= 0 {
		return nil
	}
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
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
