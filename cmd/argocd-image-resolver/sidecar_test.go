package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testio"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sidecarConfig is a daemon configuration on a short socket path and a free port.
func sidecarConfig(t *testing.T) config.Config {
	t.Helper()
	dir, err := os.MkdirTemp("", "cir")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := config.DefaultConfig()
	cfg.Socket = filepath.Join(dir, "d.sock")
	cfg.MetricsAddr = "127.0.0.1:0"
	return cfg
}

type sidecarRun struct {
	code int
	err  error
}

// startSidecar runs runSidecar in the background with the configuration cfg; the
// child's output and the sidecar's logs go to the returned buffer.
func startSidecar(t *testing.T, cfg config.Config, argv ...string) (chan<- os.Signal, *testio.SyncBuffer, <-chan sidecarRun) {
	t.Helper()
	return startSidecarLoad(t, func() (config.Config, error) { return cfg, nil }, cfg.Socket, argv...)
}

// startSidecarLoad is startSidecar with the daemon's configuration read by load,
// at every start of a daemon, and fallback as the socket when it fails at start.
func startSidecarLoad(t *testing.T, load func() (config.Config, error), fallback string, argv ...string) (chan<- os.Signal, *testio.SyncBuffer, <-chan sidecarRun) {
	t.Helper()
	sigs := make(chan os.Signal, 4)
	out := &testio.SyncBuffer{}
	done := make(chan sidecarRun, 1)
	go func() {
		code, err := runSidecar(context.Background(), load, fallback, slog.New(slog.NewTextHandler(out, nil)), argv, sigs, out, out)
		done <- sidecarRun{code, err}
	}()
	t.Cleanup(func() {
		select {
		case sigs <- syscall.SIGKILL: // whatever still runs stops
		default:
		}
	})
	return sigs, out, done
}

func wait(t *testing.T, done <-chan sidecarRun) sidecarRun {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("sidecar did not exit")
	}
	return sidecarRun{}
}

// The child sees the daemon's socket; a forwarded SIGTERM reaches it; its clean
// exit after the signal is a clean stop of the sidecar; the daemon stops after it.
const trapScript = `trap 'echo "got TERM"; exit 0' TERM
test -S "$IMAGE_RESOLVER_SOCKET" && echo "socket ok"
while :; do sleep 0.05; done`

func TestSidecarForwardsSignals(t *testing.T) {
	cfg := sidecarConfig(t)
	sigs, out, done := startSidecar(t, cfg, "sh", "-c", trapScript)
	waitFor(t, "the child to see the daemon's socket", func() bool { return strings.Contains(out.String(), "socket ok") })
	if err := daemon.NewClient(cfg.Socket).Health(context.Background()); err != nil {
		t.Fatalf("daemon while the child runs: %v", err)
	}
	sigs <- syscall.SIGTERM
	r := wait(t, done)
	if r.code != 0 || r.err != nil {
		t.Fatalf("after SIGTERM: code %d err %v; output %q", r.code, r.err, out.String())
	}
	if !strings.Contains(out.String(), "got TERM") {
		t.Errorf("the child never got SIGTERM: %q", out.String())
	}
	if _, err := os.Stat(cfg.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the daemon's socket outlived the sidecar: %v", err)
	}
}

func TestSidecarChildKilledByForwardedSignalIsACleanStop(t *testing.T) {
	sigs, _, done := startSidecar(t, sidecarConfig(t), "sleep", "60")
	sigs <- syscall.SIGINT
	if r := wait(t, done); r.code != 0 {
		t.Fatalf("sleep killed by the forwarded SIGINT: code %d err %v", r.code, r.err)
	}
}

// argocd-cmp-server ignores SIGTERM: after the grace period the sidecar kills it and
// stops as asked, whichever signal was forwarded, and not before the grace is over.
func TestSidecarKillsAChildThatIgnoresTheSignalAfterTheGrace(t *testing.T) {
	const grace = 300 * time.Millisecond
	defer func(g time.Duration) { stopGrace = g }(stopGrace)
	stopGrace = grace
	for _, sig := range []os.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cfg := sidecarConfig(t)
			// The ignored signals are inherited by each sleep too.
			sigs, out, done := startSidecar(t, cfg, "sh", "-c", `trap "" TERM INT; echo trapped; while :; do sleep 0.05; done`)
			waitFor(t, "the trap", func() bool { return strings.Contains(out.String(), "trapped") })
			sent := time.Now()
			sigs <- sig
			r := wait(t, done)
			if r.code != 0 || r.err != nil {
				t.Fatalf("code %d err %v, want a clean stop; output %q", r.code, r.err, out.String())
			}
			if took := time.Since(sent); took < grace {
				t.Errorf("killed %v after the signal, before the %v grace", took, grace)
			}
			if !strings.Contains(out.String(), "cmp server killed after the grace period") ||
				!strings.Contains(out.String(), "killed by signal 9") {
				t.Errorf("the kill is not logged: %q", out.String())
			}
			if _, err := os.Stat(cfg.Socket); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the daemon did not stop after the kill: %v", err)
			}
		})
	}
}

func TestSidecarExitsWhenTheChildDies(t *testing.T) {
	for _, tt := range []struct {
		name string
		argv []string
		code int
		msg  string
	}{
		{"non-zero", []string{"sh", "-c", "exit 3"}, 3, "exited with status 3"},
		{"zero is still a death", []string{"true"}, 1, "exited with status 0"},
		{"killed", []string{"sh", "-c", "kill -KILL $$"}, 128 + 9, "killed by signal 9"},
		{"after a signal, failing", []string{"sh", "-c", "trap 'exit 5' TERM; echo trapped; while :; do sleep 0.05; done"}, 5, "after terminated"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sigs, out, done := startSidecar(t, sidecarConfig(t), tt.argv...)
			if tt.code == 5 {
				waitFor(t, "the trap", func() bool { return strings.Contains(out.String(), "trapped") })
				sigs <- syscall.SIGTERM
			}
			r := wait(t, done)
			if r.code != tt.code || r.err == nil || !strings.Contains(r.err.Error(), tt.msg) {
				t.Fatalf("code %d err %v, want %d and %q; output %q", r.code, r.err, tt.code, tt.msg, out.String())
			}
		})
	}
}

// registered fails the test unless the built binary has the command.
func registered(t *testing.T, command string) {
	t.Helper()
	if out, err := exec.Command(binary, command, "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "Usage:") ||
		strings.Contains(string(out), "unknown command") {
		t.Fatalf("%s is not a command of the binary: %v\n%s", command, err, out)
	}
}

// The real binary as a process: real SIGTERM to the sidecar, forwarded to the child.
func TestSidecarProcess(t *testing.T) {
	registered(t, "sidecar")
	cfg := sidecarConfig(t)
	cmd := exec.Command(binary, "sidecar", "--socket", cfg.Socket, "--metrics-addr", "127.0.0.1:0", "--", "sh", "-c", trapScript)
	out := &testio.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the child to see the daemon's socket", func() bool { return strings.Contains(out.String(), "socket ok") })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sidecar after SIGTERM: %v; output:\n%s", err, out)
	}
	if !strings.Contains(out.String(), "got TERM") {
		t.Errorf("SIGTERM not forwarded; output:\n%s", out)
	}

	cmd = exec.Command(binary, "sidecar", "--socket", cfg.Socket, "--metrics-addr", "127.0.0.1:0", "--", "sh", "-c", "exit 3")
	b, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("cmp server exiting 3: %v; output:\n%s", err, b)
	}
}

// serve as a process: it answers on its socket and stops cleanly on SIGTERM.
func TestServeProcess(t *testing.T) {
	registered(t, "serve")
	cfg := sidecarConfig(t)
	cmd := exec.Command(binary, "serve", "--metrics-addr", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = append(os.Environ(), api.SocketEnv+"="+cfg.Socket)
	out := &testio.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	client := daemon.NewClient(cfg.Socket)
	waitFor(t, "the daemon", func() bool { return client.Health(context.Background()) == nil })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v; output:\n%s", err, out)
	}
	if !strings.Contains(out.String(), `"msg":"daemon stopped"`) {
		t.Errorf("no structured log of the stop:\n%s", out)
	}
	if _, err := client.ResolveBatch(context.Background(), "app", nil); !errors.Is(err, daemon.ErrUnreachable) {
		t.Errorf("after stop: %v", err)
	}

	// Bad configuration: exit status 2 and the key named.
	b, err := exec.Command(binary, "serve", "--socket", cfg.Socket, "--tag-ttl", "soon").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(b), "--tag-ttl") {
		t.Fatalf("bad flag: %v\n%s", err, b)
	}
}
