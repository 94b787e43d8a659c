package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/spf13/cobra"
)

// childStopGrace is how long the CMP server gets to exit after the first forwarded
// signal, or after SIGTERM when the daemon died, before SIGKILL. argocd-cmp-server
// ignores SIGTERM, so without a bound a pod's stop would take its whole
// terminationGracePeriodSeconds (30s by default); this leaves the daemon time to stop
// within it.
const childStopGrace = 10 * time.Second

// stopGrace is childStopGrace; tests shorten it.
var stopGrace = childStopGrace

// firstDaemonWait bounds how long the CMP server's start waits for the first
// daemon: the first renders find it, and a daemon slow to start does not keep the
// plugin from Argo CD.
const firstDaemonWait = 10 * time.Second

func newSidecarCommand() *cobra.Command {
	var (
		flags *config.Flags
		logs  logFlags
	)
	cmd := &cobra.Command{
		Use:   "sidecar [flags] [-- CMP-SERVER [ARGS...]]",
		Short: "Container entrypoint: run Argo CD's CMP server, and keep the daemon running beside it",
		Long: `Start the daemon (as serve does, with the same flags), then run Argo CD's CMP server
as a child with ` + api.SocketEnv + ` set to the daemon's socket, so every generate it
runs finds the daemon. Without a CMP server, only the daemon is kept running (the
legacy argocd-cm variant's daemon container).

The daemon is supervised, never a reason to stop the CMP server: a daemon that cannot
start (a configuration that does not load or validate, a socket or port taken) or that
stops is logged ("daemon down", with the error) and started again after a backoff of
` + minRestartDelay.String() + `, doubled after each failure up to ` + maxRestartDelay.String() + ` (back to ` + minRestartDelay.String() + ` after a daemon served
for ` + maxRestartDelay.String() + `), reading the configuration again each time. Meanwhile
argocd-image-resolver-generate finds no daemon on the socket and renders in-process,
with the same configuration: the same manifests, without the daemon's cache; with a
configuration that does not load, the render fails with the same error naming the
setting. The CMP server is given the socket of the configuration at start; when that
configuration does not load, the socket of --socket, else ` + api.SocketEnv + `,
else ` + api.DefaultSocket + `.

SIGTERM and SIGINT are forwarded to the CMP server; the daemon stops after it, so
renders in flight keep their cache. A CMP server still running ` + childStopGrace.String() + ` after the
first forwarded signal (argocd-cmp-server ignores SIGTERM) is killed with SIGKILL,
which counts as a requested stop. On Linux the CMP server is also killed (SIGKILL) if
the sidecar itself dies. If the CMP server exits by itself, the sidecar exits with its
status (at least 1) and Kubernetes restarts the container. After a forwarded signal,
a CMP server that exits 0, of that signal, or of the SIGKILL after the grace period
makes the sidecar exit 0.

Exit status: 0 after a signal (above), the CMP server's status when it exits by
itself, 2 bad flags.

` + daemonLong,
		Example: `  argocd-image-resolver sidecar -- /var/run/argocd/argocd-cmp-server
  argocd-image-resolver sidecar --config /etc/image-resolver/config.yaml -- /var/run/argocd/argocd-cmp-server --loglevel debug
  argocd-image-resolver sidecar   # the daemon alone, kept running`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := logs.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			load := func() (config.Config, error) { return flags.Load(os.LookupEnv) }
			fallback := api.SocketFromEnv()
			if f := cmd.Flags().Lookup("socket"); f != nil && f.Changed {
				fallback = f.Value.String()
			}
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
			defer signal.Stop(sigs)
			// Signals are handled here, through sigs, not by cmd.Context(): the
			// daemon must outlive the CMP server's own shutdown.
			code, err := runSidecar(context.WithoutCancel(cmd.Context()), load, fallback, log, args, sigs, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if code == 0 {
				return nil
			}
			return &exitError{code: code, err: err}
		},
	}
	// Flags after the CMP server's path belong to it, even without "--".
	cmd.Flags().SetInterspersed(false)
	flags = config.AddFlags(cmd.Flags())
	logs.add(cmd)
	return cmd
}

// runSidecar keeps a daemon running (supervisor) and runs the child argv, if any,
// until it ends, forwarding the signals received on sigs to it; without a child,
// until the first signal. load reads the daemon's configuration, at each start of
// a daemon; the child is given the socket of the configuration at start, else
// fallbackSocket. It returns the exit status for the sidecar and, when non-zero,
// why.
func runSidecar(ctx context.Context, load func() (config.Config, error), fallbackSocket string, log *slog.Logger, argv []string,
	sigs <-chan os.Signal, stdout, stderr io.Writer) (int, error) {
	daemon.TuneGC()
	socket := fallbackSocket
	if cfg, err := load(); err == nil {
		socket = cfg.Socket
	}
	sup := newSupervisor(load, func(cfg config.Config) (*daemon.Daemon, error) {
		d, err := daemon.New(cfg, daemonOptions(cfg, log)...)
		if err == nil {
			d.LimitMemory()
		}
		return d, err
	}, socket, log)
	dctx, stopDaemon := context.WithCancel(ctx)
	defer stopDaemon()
	supDone := make(chan struct{})
	go func() { defer close(supDone); sup.Run(dctx) }()
	stop := func() {
		stopDaemon()
		<-supDone
	}

	if len(argv) == 0 {
		sig := <-sigs
		log.Info("stopping the daemon", "signal", sig.String())
		sup.SaveWatchList()
		stop()
		return 0, nil
	}
	select {
	case <-sup.Attempted():
	case <-time.After(firstDaemonWait):
		log.Warn("the daemon is not serving yet; starting the cmp server without it", "waited", firstDaemonWait.String())
	}
	child, childDone, err := startChild(argv, socket, stdout, stderr)
	if err != nil {
		stop()
		return 1, err
	}
	log.Info("cmp server started", "command", argv[0], "pid", child.Process.Pid, "socket", socket)
	return superviseChild(child, childDone, sup, stop, log, sigs)
}

// superviseChild forwards sigs to the running CMP server until it exits; then it
// stops the daemon (stop) and returns the sidecar's exit status.
func superviseChild(child *exec.Cmd, childDone <-chan error, sup *supervisor, stop func(), log *slog.Logger, sigs <-chan os.Signal) (int, error) {
	var (
		forwarded os.Signal        // the first signal forwarded: a requested shutdown
		graceOver <-chan time.Time // set by the first forwarded signal
		killed    bool             // SIGKILL sent after the grace period
	)
	for {
		select {
		case sig := <-sigs:
			if forwarded == nil {
				forwarded = sig
				sup.SaveWatchList() // the pod may be killed before the daemon stops
				grace := time.NewTimer(stopGrace)
				defer grace.Stop()
				graceOver = grace.C
			}
			log.Info("forwarding signal to the cmp server", "signal", sig.String(), "pid", child.Process.Pid)
			if err := child.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
				log.Warn("forwarding signal", "err", err)
			}

		case <-graceOver:
			graceOver = nil
			log.Warn("cmp server killed after the grace period", "signal", forwarded.String(), "grace", stopGrace.String(),
				"pid", child.Process.Pid)
			if err := child.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
				log.Warn("killing the cmp server", "err", err)
			}
			killed = true

		case <-childDone:
			state := child.ProcessState
			stop()
			code, how := exitStatus(state)
			if forwarded != nil {
				if code == 0 || diedOf(state, forwarded) || (killed && diedOf(state, syscall.SIGKILL)) {
					log.Info("cmp server stopped", "status", how)
					return 0, nil
				}
				return code, fmt.Errorf("cmp server %s after %s", how, forwarded)
			}
			log.Error("cmp server exited; exiting so that the container restarts", "status", how)
			return max(code, 1), fmt.Errorf("cmp server %s; exiting so that the container restarts", how)
		}
	}
}

// startChild starts the CMP server argv with the daemon's socket in its
// environment; childDone receives its Wait.
func startChild(argv []string, socket string, stdout, stderr io.Writer) (child *exec.Cmd, childDone <-chan error, err error) {
	child = exec.Command(argv[0], argv[1:]...)
	child.Env = append(os.Environ(), api.SocketEnv+"="+socket)
	child.Stdout, child.Stderr = stdout, stderr
	setParentDeathSignal(child)
	started := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that started the child
		// exits, not the process (go.dev/issue/27505). Go ends a thread when a
		// goroutine locked to it returns still locked, which any goroutine that
		// once ran on this thread could do; locking it here until the child is
		// reaped keeps it ours, so only the sidecar's death kills the CMP server.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := child.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- child.Wait()
	}()
	if err := <-started; err != nil {
		return nil, nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	return child, done, nil
}

// exitStatus returns a process's exit status as a shell reports it (128+N when
// killed by signal N) and a description.
func exitStatus(s *os.ProcessState) (int, string) {
	if ws, ok := s.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), fmt.Sprintf("killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
	}
	return s.ExitCode(), fmt.Sprintf("exited with status %d", s.ExitCode())
}

func diedOf(s *os.ProcessState, sig os.Signal) bool {
	ws, ok := s.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}
