package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testio"
)

// fastRestarts shortens the daemon's restart backoff for a test.
func fastRestarts(t *testing.T, lo, hi time.Duration) {
	t.Helper()
	oldLo, oldHi := restartDelayMin, restartDelayMax
	restartDelayMin, restartDelayMax = lo, hi
	t.Cleanup(func() { restartDelayMin, restartDelayMax = oldLo, oldHi })
}

// healthy reports whether a daemon answers on socket.
func healthy(socket string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return daemon.NewClient(socket).Health(ctx) == nil
}

// cmpStandIn is the child the sidecar runs in place of argocd-cmp-server: it
// records its pid (once per start), then runs plugin.yaml's generate command,
// argocd-image-resolver-generate, in the app directory whenever the file "go"
// appears in dir, as Argo CD's CMP server runs it for a render, and writes its exit
// status, stdout and stderr beside it (N.code, N.out, N.err for the Nth render).
const cmpStandIn = `echo $$ >> "$DIR/pids"
n=0
while :; do
  if [ -e "$DIR/go" ]; then
    rm "$DIR/go"; n=$((n+1))
    (cd "$APP" && "$THIN" > "$DIR/$n.out.tmp" 2> "$DIR/$n.err"; echo $? > "$DIR/$n.code.tmp")
    mv "$DIR/$n.out.tmp" "$DIR/$n.out"; mv "$DIR/$n.code.tmp" "$DIR/$n.code"
  fi
  sleep 0.02
done`

// cmpRender has the stand-in render once and returns what generate printed.
func cmpRender(t *testing.T, dir string, n int) run {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code := filepath.Join(dir, strconv.Itoa(n)+".code")
	waitFor(t, "render "+strconv.Itoa(n)+" of the cmp server", func() bool { _, err := os.Stat(code); return err == nil })
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(n)+"."+name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	c, err := strconv.Atoi(strings.TrimSpace(read("code")))
	if err != nil {
		t.Fatal(err)
	}
	return run{stdout: read("out"), stderr: read("err"), code: c}
}

// TestSidecarServesWhileTheDaemonIsDown: a daemon that cannot start never stops the
// CMP server. With a valid configuration (the daemon's port is taken) generate
// renders in-process, the same manifests as generate without a daemon; with a
// wrong one, it fails with the error naming the setting, the one the sidecar logs
// as "daemon down". The daemon is tried again with the configuration read again,
// and once it can start, renders go to it, without the CMP server being restarted.
// The sidecar is the built binary, with its real backoff (1s, 2s, ...).
func TestSidecarServesWhileTheDaemonIsDown(t *testing.T) {
	_, registries := demoRegistry(t)
	const app = "../../testdata/apps/plain-cron"
	appDir, err := filepath.Abs(app)
	if err != nil {
		t.Fatal(err)
	}
	argo := map[string]string{"ARGOCD_APP_NAME": "shop", "ARGOCD_APP_NAMESPACE": "shop"}
	inProcess := generate(t, app, map[string]string{"IMAGE_RESOLVER_REGISTRIES_CONFIG": registries,
		"ARGOCD_APP_NAME": "shop", "ARGOCD_APP_NAMESPACE": "shop"})
	if inProcess.code != 0 {
		t.Fatalf("generate without a daemon: exit %d: %s", inProcess.code, inProcess.stderr)
	}

	for _, tc := range []struct {
		name string
		// down makes the daemon unable to start and returns what ends that.
		down func(t *testing.T, configFile string) (fix func())
		// rendered checks the render while the daemon is down.
		rendered func(t *testing.T, r run)
		// logged is what "daemon down" says.
		logged string
	}{{
		name: "valid configuration, port taken",
		down: func(t *testing.T, configFile string) func() {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			write(t, configFile, fmt.Sprintf("metricsAddr: %q\n", ln.Addr().String()))
			return func() { ln.Close() }
		},
		rendered: func(t *testing.T, r run) {
			if r.code != 0 || r.stdout != inProcess.stdout {
				t.Errorf("render with the daemon down: exit %d, stderr %q; want generate's manifests, as without a daemon", r.code, r.stderr)
			}
			if !strings.Contains(r.stderr, "daemon unreachable") || !strings.Contains(r.stderr, "rendering in-process") {
				t.Errorf("render with the daemon down does not say so: %q", r.stderr)
			}
		},
		logged: "metrics address",
	}, {
		name: "wrong configuration",
		down: func(t *testing.T, configFile string) func() {
			write(t, configFile, "tagTTL: soon\n")
			return func() { write(t, configFile, "metricsAddr: 127.0.0.1:0\n") }
		},
		rendered: func(t *testing.T, r run) {
			if r.code == 0 || r.stdout != "" || !strings.Contains(r.stderr, "tagTTL") || !strings.Contains(r.stderr, `"soon"`) {
				t.Errorf("render with a wrong configuration: exit %d, stdout %q, stderr %q; want a failure naming tagTTL and its value", r.code, r.stdout, r.stderr)
			}
		},
		logged: "tagTTL",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			configFile := filepath.Join(dir, "config.yaml")
			fix := tc.down(t, configFile)
			socketDir, err := os.MkdirTemp("", "cir")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(socketDir) })
			socket := filepath.Join(socketDir, "d.sock")
			// The real binary: its daemon's render workers are its own render-worker.
			cmd := exec.Command(binary, "sidecar", "--", "sh", "-c", cmpStandIn)
			cmd.Env = append(os.Environ(), "IMAGE_RESOLVER_CONFIG="+configFile, "IMAGE_RESOLVER_REGISTRIES_CONFIG="+registries,
				"IMAGE_RESOLVER_SOCKET="+socket, "DIR="+dir, "APP="+appDir, "THIN="+thinBinary)
			for k, v := range argo {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			out := &testio.SyncBuffer{}
			cmd.Stdout, cmd.Stderr = out, out
			cmd.WaitDelay = time.Second
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

			downs := func() int { return strings.Count(out.String(), "daemon down") }
			waitFor(t, "two daemon starts to fail", func() bool { return downs() >= 2 })
			if !strings.Contains(out.String(), tc.logged) {
				t.Errorf("the daemon-down log does not say why (%q): %s", tc.logged, out)
			}
			tc.rendered(t, cmpRender(t, dir, 1))

			fix()
			waitFor(t, "the daemon to start once it can", func() bool { return healthy(socket) })
			if r := cmpRender(t, dir, 2); r.code != 0 || r.stdout != inProcess.stdout || strings.Contains(r.stderr, "in-process") {
				t.Errorf("render once the daemon serves: exit %d, stderr %q; want the manifests, through the daemon", r.code, r.stderr)
			}
			if !strings.Contains(out.String(), "daemon up again") {
				t.Errorf("the daemon's return is not logged: %s", out)
			}
			pids, _ := os.ReadFile(filepath.Join(dir, "pids"))
			if n := strings.Count(string(pids), "\n"); n != 1 {
				t.Errorf("the cmp server was started %d times, want once", n)
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("sidecar after SIGTERM: %v\n%s", err, out)
			}
		})
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSupervisorRestartsADaemonThatDies: a daemon that stops while the sidecar did
// not ask it to is logged as down and started again, on the same socket; the
// backoff doubles with each failure to start, up to its bound, and a stop by the
// sidecar stops the daemon for good.
func TestSupervisorRestartsADaemonThatDies(t *testing.T) {
	fastRestarts(t, 20*time.Millisecond, 80*time.Millisecond)
	cfg := sidecarConfig(t)
	out := &testio.SyncBuffer{}
	log := slog.New(slog.NewTextHandler(out, nil))
	fails := 4 // the first starts fail: the backoff grows
	load := func() (config.Config, error) {
		if fails > 0 {
			fails--
			return config.Config{}, fmt.Errorf("configuration %d not there yet", fails)
		}
		return cfg, nil
	}
	build := func(c config.Config) (*daemon.Daemon, error) {
		return daemon.New(c, daemon.WithLogger(log))
	}
	sup := newSupervisor(load, build, cfg.Socket, log)
	kill := make(chan struct{}, 1)
	var runs atomic.Int32
	sup.run = func(ctx context.Context, d *daemon.Daemon) error {
		runs.Add(1)
		dctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-kill: // the daemon dies: it stops while the sidecar goes on
				cancel()
			case <-dctx.Done():
			}
		}()
		return d.Run(dctx)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sup.Run(ctx) }()

	waitFor(t, "the daemon", func() bool { return healthy(cfg.Socket) })
	var delays []string
	for _, m := range regexp.MustCompile(`retryIn=(\S+)`).FindAllStringSubmatch(out.String(), -1) {
		delays = append(delays, m[1])
	}
	if want := "20ms 40ms 80ms 80ms"; strings.Join(delays, " ") != want {
		t.Errorf("backoff %q, want %q", delays, want)
	}

	time.Sleep(restartDelayMax + 20*time.Millisecond) // it served long enough to reset the backoff
	kill <- struct{}{}
	waitFor(t, "the dead daemon to be logged", func() bool { return strings.Contains(out.String(), errDaemonStopped.Error()) })
	waitFor(t, "the daemon to be restarted", func() bool { return healthy(cfg.Socket) })
	if n := runs.Load(); n != 2 {
		t.Errorf("daemon started %d times, want 2", n)
	}
	// After a daemon that served, the backoff starts again from its minimum.
	if !strings.Contains(out.String(), `msg="daemon down" err="the daemon stopped by itself" attempt=5 retryIn=20ms`) {
		t.Errorf("the death is not logged with the error and the first delay:\n%s", out)
	}

	stop()
	<-done
	if healthy(cfg.Socket) {
		t.Error("the daemon outlived the supervisor's stop")
	}
	if n := strings.Count(out.String(), "daemon down"); n != 5 {
		t.Errorf("%d daemon-down logs, want 5 (4 failed starts, 1 death), none for the requested stop:\n%s", n, out)
	}
}

// TestSupervisorAttemptedOnceServing: the sidecar starts the CMP server once its
// daemon serves, not only once the daemon has stopped (or after firstDaemonWait).
func TestSupervisorAttemptedOnceServing(t *testing.T) {
	cfg := sidecarConfig(t)
	log := slog.New(slog.DiscardHandler)
	sup := newSupervisor(func() (config.Config, error) { return cfg, nil },
		func(c config.Config) (*daemon.Daemon, error) { return daemon.New(c, daemon.WithLogger(log)) }, cfg.Socket, log)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sup.Run(ctx) }()
	defer func() { stop(); <-done }()
	select {
	case <-sup.Attempted():
	case <-time.After(firstDaemonWait):
		t.Fatalf("Attempted not closed within %s of a daemon starting", firstDaemonWait)
	}
	if !healthy(cfg.Socket) {
		t.Error("Attempted closed before the daemon served")
	}
}

// Without a CMP server, sidecar keeps the daemon alone running (the legacy
// variant's daemon container) until a signal.
func TestSidecarWithoutCMPServer(t *testing.T) {
	cfg := sidecarConfig(t)
	sigs, out, done := startSidecar(t, cfg)
	waitFor(t, "the daemon", func() bool { return healthy(cfg.Socket) })
	sigs <- syscall.SIGTERM
	if r := wait(t, done); r.code != 0 || r.err != nil {
		t.Fatalf("after SIGTERM: code %d err %v; output %q", r.code, r.err, out.String())
	}
	if healthy(cfg.Socket) {
		t.Error("the daemon outlived the sidecar")
	}
}

// A wrong flag is the one thing that stops the sidecar: flags cannot change
// without a new container, so it exits 2 (bad input) naming the flag, before
// the CMP server starts.
func TestSidecarBadFlagExits2(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "started")
	r := runIn(t, ".", nil, binary, "sidecar", "--tag-ttl", "soon", "--", "touch", marker)
	if r.code != exitInput || !strings.Contains(r.stderr, "--tag-ttl") {
		t.Errorf("exit %d, stderr %q; want %d naming --tag-ttl", r.code, r.stderr, exitInput)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the cmp server was started")
	}
}
