package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Listen binds the socket and the metrics address, so that a caller learns of a
// taken address before anything else starts. Run calls it when needed.
//
// The socket is mode 0600 (owner only) in a directory only the daemon's user can
// write: who can connect is trusted, the app name it sends included (see
// socketLimits in server.go).
func (d *Daemon) Listen() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.socketLn != nil {
		return nil
	}
	if err := prepareSocket(d.cfg.Socket); err != nil {
		return err
	}
	ln, err := net.Listen("unix", d.cfg.Socket)
	if err != nil {
		return fmt.Errorf("socket %s: %w", d.cfg.Socket, err)
	}
	// Owner only. The directory is the daemon user's alone (prepareSocket), so no
	// one else can reach the socket between its creation and this.
	if err := os.Chmod(d.cfg.Socket, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("socket %s: %w", d.cfg.Socket, err)
	}
	if d.cfg.MetricsAddr != "" {
		mln, err := net.Listen("tcp", d.cfg.MetricsAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("metrics address %s: %w", d.cfg.MetricsAddr, err)
		}
		d.metricsLn = mln
	}
	if d.cfg.WebhookAddr != "" {
		hln, err := net.Listen("tcp", d.cfg.WebhookAddr)
		if err != nil {
			ln.Close()
			if d.metricsLn != nil {
				d.metricsLn.Close()
			}
			return fmt.Errorf("webhook address %s (webhookAddr): %w", d.cfg.WebhookAddr, err)
		}
		// Whoever serves it bounds its connections (webhook.MaxConns).
		d.hookLn = hln
	}
	d.socketLn = ln
	return nil
}

// MetricsAddr returns the address /metrics is served on once listening ("" when
// off or not yet listening).
func (d *Daemon) MetricsAddr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.metricsLn == nil {
		return ""
	}
	return d.metricsLn.Addr().String()
}

// WebhookAddr returns the address the registry webhooks are served on once
// listening ("" when off or not yet listening).
func (d *Daemon) WebhookAddr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hookLn == nil {
		return ""
	}
	return d.hookLn.Addr().String()
}

// prepareSocket makes way for a new socket: it creates the directory (mode 0700)
// or refuses one that another user could replace the socket in, removes a stale
// socket file left by a daemon that died, and refuses to take over one a live daemon
// listens on.
func prepareSocket(path string) error {
	if err := checkSocketDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("socket %s: %w", path, err)
	case fi.Mode()&os.ModeSocket == 0:
		return fmt.Errorf("socket %s: exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, 500*time.Millisecond); err == nil {
		c.Close()
		return fmt.Errorf("socket %s: another daemon is listening on it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("socket %s: removing the stale socket: %w", path, err)
	}
	return nil
}
