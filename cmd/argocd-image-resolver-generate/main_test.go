package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
)

var thinBinary string

// thinVersion and thinCommit are stamped into thinBinary as make build stamps it.
const (
	thinVersion = "v0.0.0-thin"
	thinCommit  = "fedcba9876543210"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "air-thin")
	if err != nil {
		panic(err)
	}
	thinBinary = filepath.Join(dir, "argocd-image-resolver-generate")
	if log, err := exec.Command("go", "build", "-ldflags", "-X main.version="+thinVersion+" -X main.commit="+thinCommit, "-o", thinBinary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, log)
		os.Exit(1)
	}
	// The fallback: a stand-in for argocd-image-resolver next to the thin binary, which
	// says how it was run.
	fake := "#!/bin/sh\necho \"fallback ran: $*\"\necho 'fallback stderr' >&2\n"
	if err := os.WriteFile(filepath.Join(dir, "argocd-image-resolver"), []byte(fake), 0o755); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// silentDaemon listens on a unix socket, accepts every connection, reads what it is
// sent and never answers. Each connection's end as the daemon sees it is sent on
// the returned channel: how many bytes it read, and the read's error (nil: the
// client hung up).
func silentDaemon(t *testing.T) (string, <-chan connEnd) {
	t.Helper()
	dir, err := os.MkdirTemp("", "air-sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ends := make(chan connEnd, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go func() {
				n, err := io.Copy(io.Discard, c) // until the client hangs up
				select {
				case ends <- connEnd{n, err}:
				default:
				}
			}()
		}
	}()
	return socket, ends
}

type connEnd struct {
	read int64
	err  error
}

func runThin(t *testing.T, env ...string) (stdout, stderr string, took time.Duration, code int) {
	t.Helper()
	cmd := exec.Command(thinBinary)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		took = time.Since(start)
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("thin client still running after 30s; stderr:\n%s", errb.String())
	}
	return out.String(), errb.String(), took, code
}

// A daemon that accepts and never answers costs the delegate deadline, then the
// render runs in-process, said on stderr: the client gives the daemon up at its
// deadline (the stderr names it), and the daemon sees it hang up after sending
// the request.
func TestSilentDaemonFallsBackAtDeadline(t *testing.T) {
	socket, ends := silentDaemon(t)
	stdout, stderr, took, code := runThin(t, api.SocketEnv+"="+socket, api.TimeoutEnv+"=1s")
	if code != 0 {
		t.Errorf("exit %d; stderr:\n%s", code, stderr)
	}
	if stdout != "fallback ran: generate\n" {
		t.Errorf("stdout = %q, want the fallback's", stdout)
	}
	for _, want := range []string{"no answer within 1s", api.TimeoutEnv, "rendering in-process", "fallback stderr"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	// A lower bound only: the deadline cannot pass early; a client that waited
	// on (for the 50s default, or for ever) is stopped by runThin's guard.
	if took < time.Second {
		t.Errorf("took %s, want the 1s deadline waited out", took)
	}
	select {
	case end := <-ends:
		if end.read == 0 || end.err != nil {
			t.Errorf("the daemon read %d bytes, then %v; want the request, then the client hanging up", end.read, end.err)
		}
	case <-time.After(time.Minute):
		t.Error("the daemon's connection still open a minute after the client fell back")
	}
}

// No daemon at all: straight to the fallback, after one line that says so. At
// once: with an hour's deadline, a client that waited for it would be stopped by
// runThin's 30s guard.
func TestNoDaemonFallsBackAtOnce(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "none.sock")
	stdout, stderr, _, code := runThin(t, api.SocketEnv+"="+socket, api.TimeoutEnv+"=1h")
	if code != 0 || stdout != "fallback ran: generate\n" {
		t.Errorf("exit %d, stdout %q; stderr:\n%s", code, stdout, stderr)
	}
	if lines := strings.Split(strings.TrimSpace(stderr), "\n"); len(lines) != 2 || !strings.Contains(lines[0], "daemon unreachable") ||
		!strings.Contains(lines[0], socket) || lines[1] != "fallback stderr" || strings.Contains(stderr, "no answer within") {
		t.Errorf("want one line naming the unreachable daemon and its socket, then the fallback's own, and no wait:\n%s", stderr)
	}
}

// A bad deadline is said and the default used.
func TestBadTimeoutEnv(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "none.sock")
	_, stderr, _, code := runThin(t, api.SocketEnv+"="+socket, api.TimeoutEnv+"=soon")
	if code != 0 || !strings.Contains(stderr, `IMAGE_RESOLVER_DELEGATE_TIMEOUT="soon" is not a positive duration`) {
		t.Errorf("exit %d; stderr:\n%s", code, stderr)
	}
}
