package argocde2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// pidsFile is where a lab lists the process groups it started, with the PID of the
// test binary that owns them on the first line.
const pidsFile = "pgids"

func (ps *Procs) record(pgid int, name string) {
	f := filepath.Join(filepath.Dir(ps.logDir), pidsFile)
	if _, err := os.Stat(f); os.IsNotExist(err) {
		_ = os.WriteFile(f, []byte(fmt.Sprintf("owner %d\n", os.Getpid())), 0o644)
	}
	fh, err := os.OpenFile(f, os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer fh.Close()
	fmt.Fprintf(fh, "%d %s\n", pgid, name)
}

// KillLeftovers ends what an earlier test binary started and could not stop because it
// was KILLed itself (a process group leader dies with it through Pdeathsig, but not
// the sidecar's argocd-cmp-server child): for each run dir under tmp whose owner is
// gone, every process still in a recorded group whose command line names that run dir.
// It returns what it did, one line per process.
func KillLeftovers(tmp string) []string {
	dirs, _ := filepath.Glob(filepath.Join(tmp, "argocd-e2e-*"))
	var done []string
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, pidsFile))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		owner, err := strconv.Atoi(strings.TrimPrefix(lines[0], "owner "))
		if err != nil || owner == os.Getpid() || alive(owner) {
			continue
		}
		groups := map[int]bool{}
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) == 2 {
				if g, err := strconv.Atoi(f[0]); err == nil {
					groups[g] = true
				}
			}
		}
		procs, _ := filepath.Glob("/proc/[0-9]*")
		for _, p := range procs {
			pid, _ := strconv.Atoi(filepath.Base(p))
			pgid, err := syscall.Getpgid(pid)
			if err != nil || !groups[pgid] {
				continue
			}
			cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
			if !bytes.Contains(cmd, []byte(dir)) {
				continue
			}
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				done = append(done, fmt.Sprintf("killed pid %d (group %d) left by an earlier run: %s", pid, pgid, strings.ReplaceAll(string(cmd), "\x00", " ")))
			}
		}
		// Recorded groups are dealt with: the run dir stays for its logs.
		_ = os.Remove(filepath.Join(dir, pidsFile))
	}
	return done
}

func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}
