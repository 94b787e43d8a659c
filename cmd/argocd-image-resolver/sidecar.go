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

func newSidecarCommand() *cobra.Command {
	var (
		flags *config.Flags
		logs  logFlags
	)
	cmd := &cobra.Command{
		Use:   "sidecar [flags] -- CMP-SERVER [ARGS...]",
		Short: "Container entrypoint: run the daemon and Argo CD's CMP server; exit when either dies",
		Long: `Start the daemon (as serve does, with the same flags), then run Argo CD's CMP server
as a child with ` + api.SocketEnv + ` set to the daemon's socket, so every generate it
runs finds the daemon. SIGTERM and SIGINT are forwarded to the CMP server; the daemon
stops after it, so renders in flight keep their cache. A CMP server still running
` + childStopGrace.String() + ` after the first forwarded signal (argocd-cmp-server ignores SIGTERM) is
killed with SIGKILL, which counts as a requested stop. On Linux the CMP server is
also killed (SIGKILL) if the sidecar itself dies.

Nothing is restarted silently: if the CMP server exits, or the daemon fails, the
sidecar exits non-zero (the CMP server's status, or 1) and Kubernetes restarts the
container. After a forwarded signal, a CMP server that exits 0, of that signal, or
of the SIGKILL after the grace period makes the sidecar exit 0.

Exit status: 0 after a forwarded signal (above), the CMP server's status when it exits
by itself, 1 when the daemon fails, 2 bad configuration.

` + daemonLong,
		Example: `  argocd-image-resolver sidecar -- /var/run/argocd/argocd-cmp-server
  argocd-image-resolver sidecar --config /etc/image-resolver/config.yaml -- /var/run/argocd/argocd-cmp-server --loglevel debug`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, cfg, err := daemonSettings(cmd, &logs, flags)
			if err != nil {
				return err
			}
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
			defer signal.Stop(sigs)
			// Signals are handled here, through sigs, not by cmd.Context(): the
			// daemon must outlive the CMP server's own shutdown.
			code, err := runSidecar(context.WithoutCancel(cmd.Context()), cfg, log, args, sigs, cmd.OutOrStdout(), cmd.ErrOrStderr())
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

// runSidecar runs the daemon and the child argv until either ends, forwarding the
// signals received on sigs to the child. It returns the exit status for the
// sidecar and, when non-zero, why.
func runSidecar(ctx context.Context, cfg config.Config, log *slog.Logger, argv []string, sigs <-chan os.Signal,
	stdout, stderr io.Writer) (int, error) {
	daemon.TuneGC()
	d, err := daemon.New(cfg, daemonOptions(cfg, log)...)
	if err != nil {
		return exitCode(err), err
	}
	d.LimitMemory()
	if err := d.Listen(); err != nil {
		return 1, fmt.Errorf("daemon: %w", err)
	}
	dctx, stopDaemon := context.WithCancel(ctx)
	defer stopDaemon()
	daemonDone := make(chan error, 1)
	go func() { daemonDone <- d.Run(dctx) }()
	select {
	case <-d.Ready():
	case err := <-daemonDone:
		return 1, fmt.Errorf("daemon: %w", err)
	}

	child, childDone, err := startChild(argv, cfg.Socket, stdout, stderr)
	if err != nil {
		stopDaemon()
		<-daemonDone
		return 1, err
	}
	log.Info("cmp server started", "command", argv[0], "pid", child.Process.Pid, "socket", cfg.Socket)

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
				d.SaveWatchList() // the pod may be killed before the daemon stops
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
			stopDaemon()
			if err := <-daemonDone; err != nil {
				log.Error("daemon", "err", err)
			}
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

		case err := <-daemonDone:
			if err == nil {
				err = errors.New("stopped")
			}
			log.Error("daemon failed; stopping the cmp server so that the container restarts", "err", err)
			_ = child.Process.Signal(syscall.SIGTERM)
			select {
			case <-childDone:
			case <-time.After(stopGrace):
				_ = child.Process.Kill()
				<-childDone
			}
			return 1, fmt.Errorf("daemon: %w; cmp server stopped so that the container restarts", err)
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
