package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SocketEnv names the daemon's unix socket, for the daemon and for generate
// (cache.SocketEnv of the main module).
const SocketEnv = "IMAGE_RESOLVER_SOCKET"

// maxSocketPath is the longest unix socket path Linux takes (sun_path is 108 bytes
// with its NUL).
const maxSocketPath = 107

// Daemon is the resolver's daemon, `argocd-image-resolver serve`, run as a process
// next to the in-process cmp-server, as the sidecar deployment runs it next to
// argocd-cmp-server.
type Daemon struct {
	// Socket is the unix socket it serves the resolution API on; generate finds it
	// through IMAGE_RESOLVER_SOCKET.
	Socket string

	cmd     *exec.Cmd
	logs    *lockedBuffer
	done    chan struct{}
	mu      sync.Mutex
	stopped bool
}

// StartDaemon runs `argocd-image-resolver serve --socket S --metrics-addr
// 127.0.0.1:0 --registries-config REGISTRIES [args...]` with the binary the cmp-server
// runs (built once per test run), its socket in a fresh short temp dir (unix socket
// paths must stay under 108 bytes), and waits until GET /v1/health answers on the
// socket. It is stopped at the end of the test.
//
// Its environment is PATH, HOME, DOCKER_CONFIG (empty dirs: no credentials of the
// machine) and TMPDIR: none of the test process's IMAGE_RESOLVER_* variables, which the
// daemon reads as settings. The settings are the arguments.
func StartDaemon(t testing.TB, registriesConfig string, args ...string) *Daemon {
	t.Helper()
	bin := ResolverBinary(t)
	dir, err := os.MkdirTemp("", "air")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "d.sock")
	if len(socket) > maxSocketPath {
		t.Fatalf("daemon socket path %s is %d bytes, more than a unix socket takes (%d): set TMPDIR shorter", socket, len(socket), maxSocketPath)
	}

	argv := append([]string{"serve", "--socket", socket, "--metrics-addr", "127.0.0.1:0", "--registries-config", registriesConfig}, args...)
	cmd := exec.Command(bin, argv...)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"DOCKER_CONFIG=" + t.TempDir(),
		"TMPDIR=" + os.TempDir(),
	}
	d := &Daemon{Socket: socket, cmd: cmd, logs: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = d.logs, d.logs
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s %v: %v", bin, argv, err)
	}
	go func() {
		_ = cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.Logs())
		}
	})

	if err := d.waitHealthy(15 * time.Second); err != nil {
		t.Fatalf("daemon %v: %v; log:\n%s", argv, err, d.Logs())
	}
	return d
}

func (d *Daemon) waitHealthy(timeout time.Duration) error {
	client := &http.Client{
		Timeout: time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", d.Socket)
			},
			DisableKeepAlives: true,
		},
	}
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-d.done:
			return fmt.Errorf("exited before answering on %s", d.Socket)
		default:
		}
		resp, err := client.Get("http://daemon/v1/health")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /v1/health: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not healthy on %s within %s: %v", d.Socket, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop sends SIGTERM (the daemon shuts down gracefully), waits for it to exit and
// kills it after 10s. It is safe to call twice.
func (d *Daemon) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	d.stopped = true
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// Running reports whether the daemon process is still up.
func (d *Daemon) Running() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// Logs returns what the daemon wrote to stdout and stderr.
func (d *Daemon) Logs() string { return d.logs.String() }

// lockedBuffer is a bytes.Buffer a process writes to while a test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
