package argocde2e

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Proc is one process the tests started: its own process group (Setpgid), so that
// stopping it also ends its children (the sidecar's argocd-cmp-server), by that group's
// id only. Its stdout and stderr go to Log.
type Proc struct {
	Name string
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's, valid once done is closed
}

// Pid is the process's id, which is also its process group's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Procs starts processes and stops every one of them, by process group, in reverse
// order. Every Procs is also listed in allProcs, so that an interrupted test binary
// (SIGINT, SIGTERM) still stops them (see StopAllOnSignal).
type Procs struct {
	logDir string
	mu     sync.Mutex
	list   []*Proc
}

var (
	allMu    sync.Mutex
	allProcs = map[*Procs]bool{}
)

func NewProcs(logDir string) *Procs {
	ps := &Procs{logDir: logDir}
	allMu.Lock()
	allProcs[ps] = true
	allMu.Unlock()
	return ps
}

// Start runs argv with exactly env (nothing inherited) in its own process group.
// Its output goes to logDir/NAME.log (appended: a restarted process keeps one log).
func (ps *Procs) Start(name string, env []string, argv ...string) (*Proc, error) {
	if err := os.MkdirAll(ps.logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(ps.logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== %s start: %q\n", time.Now().Format(time.RFC3339Nano), argv)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	// Setpgid: a group of its own. Pdeathsig: the group leader dies with the test binary
	// even if the test binary is killed without running its cleanups (a go test -timeout
	// panic); its children are ended by Stop in every other case.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	ps.record(cmd.Process.Pid, name)
	p := &Proc{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(f, "=== %s exit: %v\n", time.Now().Format(time.RFC3339Nano), cmd.ProcessState)
		f.Close()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

// Stop ends p's process group: SIGTERM, then SIGKILL after grace. It returns how
// long the process took to end and whether it needed SIGKILL. The group is KILLed in
// any case at the end, so that no child outlives its leader.
func (p *Proc) Stop(grace time.Duration) (took time.Duration, killed bool) {
	t0 := time.Now()
	pgid := p.Pid()
	if !p.Exited() {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			killed = true
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // children left behind, if any
	<-p.done
	return time.Since(t0), killed
}

// KillLeader sends SIGKILL to the group leader only (not its group) and waits for it: the
// sidecar's children (argocd-cmp-server) go on running, orphaned, in the same group.
func (p *Proc) KillLeader() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// StopAll stops every process, newest first. grace is per process; the results are
// written to w.
func (ps *Procs) StopAll(w io.Writer, grace func(name string) time.Duration) {
	ps.mu.Lock()
	list := append([]*Proc(nil), ps.list...)
	ps.list = nil
	ps.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		p := list[i]
		if p.Exited() {
			_ = syscall.Kill(-p.Pid(), syscall.SIGKILL) // orphans of a dead leader
			continue
		}
		took, killed := p.Stop(grace(p.Name))
		how := "after SIGTERM"
		if killed {
			how = "SIGKILL after SIGTERM was not enough"
		}
		if w != nil {
			fmt.Fprintf(w, "stopped %s (pgid %d) in %s, %s\n", p.Name, p.Pid(), took.Round(time.Millisecond), how)
		}
	}
	allMu.Lock()
	delete(allProcs, ps)
	allMu.Unlock()
}

// killEverything KILLs every process group still listed: for a test binary that is
// being interrupted.
func killEverything() {
	allMu.Lock()
	defer allMu.Unlock()
	for ps := range allProcs {
		ps.mu.Lock()
		for _, p := range ps.list {
			_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		}
		ps.mu.Unlock()
	}
}

// errExited is returned by waits whose process ended first.
var errExited = errors.New("process exited")
