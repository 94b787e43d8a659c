package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// ErrUnreachable is wrapped by every error of a Client that is the daemon's failure
// rather than a resolution's: no socket, nobody listening, the connection broke, or
// an answer that is not one. generate falls back to resolving directly on it.
var ErrUnreachable = errors.New("image resolver daemon unreachable")

// dialTimeout bounds connecting to the daemon's socket: a daemon that does not
// accept within it is treated as unreachable, and the render goes on without it.
const dialTimeout = time.Second

// Client talks to the daemon over its unix socket. It implements resolve.Batch.
type Client struct {
	socket string
	http   *http.Client
}

var _ resolve.Batch = (*Client)(nil)

// NewClient returns a client of the daemon listening on socket.
func NewClient(socket string) *Client {
	dialer := &net.Dialer{Timeout: dialTimeout}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    1,
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{socket: socket, http: &http.Client{Transport: tr}}
}

// Socket returns the socket path the client dials.
func (c *Client) Socket() string { return c.socket }

// ResolveBatch sends one batch to the daemon and returns its answers, one per
// request in order. Errors that are the daemon's wrap ErrUnreachable; a cancelled
// ctx returns ctx's error.
func (c *Client) ResolveBatch(ctx context.Context, app string, reqs []resolve.Request) ([]resolve.Answer, error) {
	if reqs == nil {
		reqs = []resolve.Request{}
	}
	body, err := json.Marshal(BatchRequest{App: app, Requests: reqs})
	if err != nil {
		return nil, err
	}
	var resp BatchResponse
	if err := c.do(ctx, http.MethodPost, api.PathResolve, body, &resp); err != nil {
		return nil, err
	}
	if len(resp.Answers) != len(reqs) {
		return nil, fmt.Errorf("%w: %s: %d answers to %d requests", ErrUnreachable, c.socket, len(resp.Answers), len(reqs))
	}
	return resp.Answers, nil
}

// Health asks the daemon whether it is up.
func (c *Client) Health(ctx context.Context) error {
	var v api.Health
	return c.do(ctx, http.MethodGet, api.PathHealth, nil, &v)
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://image-resolver"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, c.socket, unwrapURLError(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s: reading the answer: %v", ErrUnreachable, c.socket, err)
	}
	if resp.StatusCode == http.StatusNoContent && out == nil {
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		var e api.ErrorResponse
		msg := string(bytes.TrimSpace(raw))
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return fmt.Errorf("%w: %s: daemon answered %s: %s", ErrUnreachable, c.socket, resp.Status, msg)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%w: %s: malformed answer: %v", ErrUnreachable, c.socket, err)
	}
	return nil
}

// unwrapURLError drops net/http's "Post \"http://image-resolver/v1/resolve\":"
// prefix, which names a URL that does not exist.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// fallbackAfter is how long a batch waits for the daemon before resolving
// directly: well inside a render's deadline, beyond any warm answer.
const fallbackAfter = 15 * time.Second

// Fallback asks the daemon and, if it cannot be reached, resolves directly with the
// resolver direct builds (once), after one line on stderr. The daemon is an
// optimisation, never a single point of failure for rendering: direct is built from
// the same configuration, so both give the same answer.
type Fallback struct {
	daemon *Client
	stderr io.Writer
	direct func() (resolve.Batch, error)

	once     sync.Once
	resolver resolve.Batch
	err      error

	after time.Duration // wait for the daemon (0: fallbackAfter)
}

// NewFallback returns a Fallback over the daemon's client.
func NewFallback(daemon *Client, direct func() (resolve.Batch, error), stderr io.Writer) *Fallback {
	return &Fallback{daemon: daemon, direct: direct, stderr: stderr}
}

// ResolveBatch implements resolve.Batch.
func (f *Fallback) ResolveBatch(ctx context.Context, app string, reqs []resolve.Request) ([]resolve.Answer, error) {
	wait := f.after
	if wait <= 0 {
		wait = fallbackAfter
	}
	dctx, cancel := context.WithTimeout(ctx, wait)
	answers, err := f.daemon.ResolveBatch(dctx, app, reqs)
	silent := errors.Is(dctx.Err(), context.DeadlineExceeded) // before cancel sets its own error
	cancel()
	if err != nil && ctx.Err() == nil && silent {
		// The daemon accepted and did not answer: as good as unreachable.
		err = fmt.Errorf("%w: %s: no answer within %s", ErrUnreachable, f.daemon.Socket(), wait)
	}
	if err == nil || !errors.Is(err, ErrUnreachable) {
		return answers, err
	}
	fmt.Fprintf(f.stderr, "argocd-image-resolver: daemon unreachable (%v); resolving directly, without its cache\n", err)
	f.once.Do(func() { f.resolver, f.err = f.direct() })
	if f.err != nil {
		return nil, f.err
	}
	return f.resolver.ResolveBatch(ctx, app, reqs)
}
