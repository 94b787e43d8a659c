//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testio"
)

// alive reports whether pid is a process that has not died: a killed child
// reparented to an init that does not reap it stays a zombie ("Z").
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "PID (COMM) STATE ...": COMM may hold spaces and parentheses.
	rest := b[bytes.LastIndexByte(b, ')')+1:]
	fields := strings.Fields(string(rest))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// A SIGKILLed sidecar cannot stop its child itself: the kernel's parent-death
// signal does, so no CMP server lives on orphaned without its daemon.
func TestSidecarProcessKilledTakesTheChild(t *testing.T) {
	registered(t, "sidecar")
	cfg := sidecarConfig(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command(binary, "sidecar", "--socket", cfg.Socket, "--metrics-addr", "127.0.0.1:0", "--",
		"sh", "-c", `echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 600`, pidFile)
	out := &testio.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// A surviving child keeps the output pipe open: Wait must not wait for it.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	waitFor(t, "the child's pid", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if !alive(pid) {
		t.Fatalf("child %d not running; output:\n%s", pid, out)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitFor(t, "the child to die with the sidecar", func() bool { return !alive(pid) })
}
