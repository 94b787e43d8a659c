package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon"
)

// The backoff between the starts of a daemon that cannot start or died: 1s,
// doubled after each failure, at most 1 min; back to 1s once a daemon served for
// that minute.
const (
	minRestartDelay = time.Second
	maxRestartDelay = time.Minute
)

// restartDelayMin and restartDelayMax are the backoff's bounds; tests shorten them.
var restartDelayMin, restartDelayMax = minRestartDelay, maxRestartDelay

// errDaemonStopped is a daemon that stopped by itself, without an error, while the
// sidecar did not ask it to.
var errDaemonStopped = errors.New("the daemon stopped by itself")

// supervisor keeps the sidecar's daemon running: it reads the configuration and
// starts a daemon; a daemon that cannot start (a configuration that does not load
// or validate, a socket or port taken, a budget too small) or that stops is logged
// as "daemon down" with the error, and started again after a backoff, with the
// configuration read again. Renders go on meanwhile: the generate client renders
// in-process when no daemon answers on the socket.
type supervisor struct {
	load   func() (config.Config, error)
	build  func(config.Config) (*daemon.Daemon, error)
	socket string // the CMP server's: every daemon listens there
	log    *slog.Logger
	// run runs a built daemon until ctx ends (tests stop it from outside).
	run func(ctx context.Context, d *daemon.Daemon) error

	mu        sync.Mutex
	current   *daemon.Daemon // the daemon serving now, if any
	attempted chan struct{}  // closed once the first start has served or failed
	once      sync.Once
}

func newSupervisor(load func() (config.Config, error), build func(config.Config) (*daemon.Daemon, error), socket string, log *slog.Logger) *supervisor {
	return &supervisor{load: load, build: build, socket: socket, log: log, attempted: make(chan struct{}),
		run: func(ctx context.Context, d *daemon.Daemon) error { return d.Run(ctx) }}
}

// Run keeps a daemon running until ctx ends, then returns once it has stopped.
func (s *supervisor) Run(ctx context.Context) {
	delay := restartDelayMin
	for attempt := 1; ; attempt++ {
		served, err := s.serveOnce(ctx, attempt)
		s.once.Do(func() { close(s.attempted) })
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errDaemonStopped
		}
		if served >= restartDelayMax {
			delay = restartDelayMin
		}
		s.log.Error("daemon down", "err", err, "attempt", attempt, "retryIn", delay.String(),
			"renders", "in-process, by each generate, until a daemon serves again")
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, restartDelayMax)
	}
}

// serveOnce reads the configuration, starts a daemon and runs it until it stops
// or ctx ends; served is how long it served.
func (s *supervisor) serveOnce(ctx context.Context, attempt int) (served time.Duration, err error) {
	cfg, err := s.load()
	if err != nil {
		return 0, err
	}
	if cfg.Socket != s.socket {
		s.log.Warn("the configuration names another socket than the one the cmp server was started with; the daemon listens on the cmp server's until the container restarts",
			"socket", cfg.Socket, "listening", s.socket)
		cfg.Socket = s.socket
	}
	d, err := s.build(cfg)
	if err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- s.run(ctx, d) }()
	select {
	case <-d.Ready():
	case err := <-done:
		return 0, err
	}
	s.once.Do(func() { close(s.attempted) }) // it serves: the cmp server may start
	if attempt > 1 {
		s.log.Info("daemon up again", "attempt", attempt)
	}
	s.mu.Lock()
	s.current = d
	s.mu.Unlock()
	up := time.Now()
	err = <-done
	s.mu.Lock()
	s.current = nil
	s.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("the daemon failed: %w", err)
	}
	return time.Since(up), err
}

// SaveWatchList asks the daemon serving now, if any, to save its watch list.
func (s *supervisor) SaveWatchList() {
	s.mu.Lock()
	d := s.current
	s.mu.Unlock()
	if d != nil {
		d.SaveWatchList()
	}
}

// Attempted is closed once the first daemon serves or failed to start.
func (s *supervisor) Attempted() <-chan struct{} { return s.attempted }
