package daemon

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// withSocketLimits sets the socket server's bounds for one (serial) test.
func withSocketLimits(t *testing.T, header, read, idle time.Duration) {
	t.Helper()
	old := socketLimits
	socketLimits.ReadHeader, socketLimits.Read, socketLimits.Idle = header, read, idle
	t.Cleanup(func() { socketLimits = old })
}

// serveSocket serves h with the socket API's server on a fresh unix socket.
func serveSocket(t *testing.T, h http.Handler) string {
	t.Helper()
	socket := socketPath(t)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := newSocketServer(h)
	go srv.Serve(ln) //nolint:errcheck // ErrServerClosed
	t.Cleanup(func() { srv.Close() })
	return socket
}

func dialSocket(t *testing.T, socket string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWhileSending waits for the server to close c (a read that ends), while
// trickle, if not nil, is sent one byte per tick. It returns what was read and
// whether the trickle was still being sent when the connection closed. The wait
// is bounded by a minute, a hang guard: which timeout closed the connection is
// told by the test's other bounds being an hour, not by a measure of time.
func closedWhileSending(t *testing.T, c net.Conn, trickle []byte) (got string, sending bool) {
	t.Helper()
	stop := make(chan struct{})
	var sent atomic.Bool // the whole trickle went out
	trickled := make(chan struct{})
	if trickle != nil {
		go func() {
			defer close(trickled)
			for _, b := range trickle {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
			}
			sent.Store(true)
		}()
	} else {
		close(trickled)
	}
	defer func() { close(stop); <-trickled }()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after a minute (read %q)", b)
	}
	return string(b), trickle != nil && !sent.Load()
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Write(b)
})

// A client sending its header a byte at a time cannot hold the connection past the
// header timeout: the connection closes while it is still sending (30s of
// trickle), and with the other bounds at an hour only the header timeout can
// have closed it.
func TestSlowHeaderDisconnected(t *testing.T) {
	withSocketLimits(t, 300*time.Millisecond, time.Hour, time.Hour)
	c := dialSocket(t, serveSocket(t, okHandler))
	header := []byte("POST /v1/generate HTTP/1.1\r\nHost: d\r\nX-Slow: " + strings.Repeat("a", 600))
	if _, sending := closedWhileSending(t, c, header); !sending {
		t.Errorf("closed only once the client had sent its whole trickle, want at the 300ms header timeout")
	}
}

// A client sending its body a byte at a time is disconnected at the read timeout:
// the daemon's own handler answers the broken body 400 naming the timeout and
// closes, while the client is still sending (30s of trickle, a body that never
// completes); the idle bound is an hour.
func TestSlowBodyDisconnected(t *testing.T) {
	withSocketLimits(t, 300*time.Millisecond, 500*time.Millisecond, time.Hour)
	d, _ := startDaemon(t, testConfig())
	for _, path := range []string{api.PathGenerate, api.PathResolve} {
		c := dialSocket(t, d.cfg.Socket)
		if _, err := io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: d\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		got, sending := closedWhileSending(t, c, []byte(strings.Repeat(" ", 600)))
		if !strings.HasPrefix(got, "HTTP/1.1 400") || !strings.Contains(got, "timeout") {
			t.Errorf("%s: answer %q, want 400 naming the timeout", path, got)
		}
		if !sending {
			t.Errorf("%s: closed only once the client had sent its whole trickle, want at the 500ms read timeout", path)
		}
	}
}

// A kept-alive connection with nothing to ask is closed at the idle timeout (the
// other bounds are an hour: only it can close the connection).
func TestIdleConnectionClosed(t *testing.T) {
	withSocketLimits(t, time.Hour, time.Hour, 300*time.Millisecond)
	c := dialSocket(t, serveSocket(t, okHandler))
	if _, err := io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: d\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v %v", resp, err)
	}
	resp.Body.Close()
	closedWhileSending(t, c, nil) // fails the test if still open after a minute
}

// Headers past MaxHeaderBytes are refused (431); bodies past each path's limit are
// refused (400 or 413) without being read whole.
func TestHeaderAndBodyBounded(t *testing.T) {
	d, _ := startDaemon(t, testConfig())
	c := dialSocket(t, d.cfg.Socket)
	big := strings.Repeat("a", socketLimits.MaxHeaderBytes+8192)
	go io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: d\r\nX-Big: "+big+"\r\n\r\n") //nolint:errcheck
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("big header: %v, %v; want 431", resp, err)
	}

	hc := unixHTTP(d.cfg.Socket)
	for _, tt := range []struct {
		path   string
		size   int
		status int
	}{
		{api.PathGenerate, 1<<20 + 1, http.StatusBadRequest},
		{api.PathResolve, maxBatchBytes + 1, http.StatusRequestEntityTooLarge},
	} {
		body := `{"x":"` + strings.Repeat("a", tt.size) + `"}`
		r, err := hc.Post("http://d"+tt.path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != tt.status || !strings.Contains(string(msg), "too large") {
			t.Errorf("%s with %d bytes: %s %q, want %d saying too large", tt.path, len(body), r.Status, msg, tt.status)
		}
	}
}

// The read timeout bounds reading the request, not the render: a handler that runs
// past it keeps its context, and loses it when its caller goes away.
func TestLongRenderNotCutByReadTimeout(t *testing.T) {
	withSocketLimits(t, 100*time.Millisecond, 200*time.Millisecond, time.Second)
	ctxErr := make(chan error, 1)
	started := make(chan struct{}, 1) // the handler has the request
	socket := serveSocket(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) //nolint:errcheck
		started <- struct{}{}
		// 800ms: a render that runs past the 200ms read timeout, the point here
		select {
		case <-r.Context().Done():
			ctxErr <- r.Context().Err()
		case <-time.After(800 * time.Millisecond):
			ctxErr <- nil
			io.WriteString(w, "rendered") //nolint:errcheck
		}
	}))
	r, err := unixHTTP(socket).Post("http://d/v1/generate", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if err := <-ctxErr; err != nil || string(b) != "rendered" {
		t.Errorf("render cut short: ctx %v, answer %q", err, b)
	}
	<-started

	// A caller that goes away cancels the render.
	c := dialSocket(t, socket)
	io.WriteString(c, "POST /v1/generate HTTP/1.1\r\nHost: d\r\nContent-Length: 2\r\n\r\n{}") //nolint:errcheck
	select {
	case <-started: // the render is under way: now the caller goes
	case <-time.After(time.Minute):
		t.Fatal("the handler did not get the request within a minute")
	}
	c.Close()
	if err := <-ctxErr; !errors.Is(err, context.Canceled) {
		t.Errorf("render of a caller gone: ctx %v, want cancelled", err)
	}
}

// unixHTTP is a client of the socket API; its minute's timeout is a hang guard.
func unixHTTP(socket string) *http.Client {
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}
}

// The daemon's socket is owner-only, in a directory it creates owner-only.
func TestSocketOwnerOnly(t *testing.T) {
	cfg := testConfig()
	cfg.Socket = filepath.Join(shortTempDir(t), "run", "d.sock")
	startDaemon(t, cfg)
	fi, err := os.Stat(cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %s, want a socket of mode 0600", fi.Mode())
	}
	di, err := os.Stat(filepath.Dir(cfg.Socket))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("created directory mode %s, want 0700", di.Mode().Perm())
	}
}

// A directory others can write without the sticky bit is refused; a sticky one
// (like /tmp) is fine.
func TestSocketDirectoryChecked(t *testing.T) {
	for _, tt := range []struct {
		mode os.FileMode
		ok   bool
	}{
		{0o700, true}, {0o755, true}, {0o777 | os.ModeSticky, true},
		{0o777, false}, {0o770, false}, {0o703, false},
	} {
		dir := shortTempDir(t)
		if err := os.Chmod(dir, tt.mode); err != nil {
			t.Fatal(err)
		}
		err := prepareSocket(filepath.Join(dir, "d.sock"))
		if tt.ok && err != nil {
			t.Errorf("mode %s: %v", tt.mode, err)
		}
		if !tt.ok && (err == nil || !strings.Contains(err.Error(), "writable by other users")) {
			t.Errorf("mode %s: %v, want a refusal", tt.mode, err)
		}
	}
	// The daemon says so when it starts.
	dir := shortTempDir(t)
	os.Chmod(dir, 0o777) //nolint:errcheck
	cfg := testConfig()
	cfg.Socket = filepath.Join(dir, "d.sock")
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "writable by other users") {
		t.Errorf("Run in a world-writable directory: %v", err)
	}
	if _, err := os.Lstat(cfg.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket created anyway: %v", err)
	}
}

// TestFallbackFromASilentDaemon: generate's batches go to the daemon; one that
// accepts and never answers is treated as unreachable after the wait, and the
// render resolves directly, saying so.
func TestFallbackFromASilentDaemon(t *testing.T) {
	sock := socketPath(t)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	var stderr strings.Builder
	directCalled := false
	fb := NewFallback(NewClient(sock), func() (resolve.Batch, error) {
		directCalled = true
		return fixedBatch{}, nil
	}, &stderr)
	fb.after = 200 * time.Millisecond
	answers, err := fb.ResolveBatch(context.Background(), "web", []resolve.Request{{Image: "reg/web"}})
	if err != nil || !directCalled || len(answers) != 1 {
		t.Fatalf("answers %v, err %v, direct %v", answers, err, directCalled)
	}
	if !strings.Contains(stderr.String(), "no answer within 200ms") || !strings.Contains(stderr.String(), "resolving directly") {
		t.Errorf("stderr %q", stderr.String())
	}
}

// A daemon that is not there is said as such at once, not as a silent one.
func TestFallbackFromAMissingDaemonSaysWhy(t *testing.T) {
	var stderr strings.Builder
	fb := NewFallback(NewClient(filepath.Join(t.TempDir(), "none.sock")), func() (resolve.Batch, error) { return fixedBatch{}, nil }, &stderr)
	if _, err := fb.ResolveBatch(context.Background(), "web", []resolve.Request{{Image: "reg/web"}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr.String(), "no answer within") || !strings.Contains(stderr.String(), "no such file or directory") {
		t.Errorf("stderr %q, want the dial error, not a wait", stderr.String())
	}
}

type fixedBatch struct{}

func (fixedBatch) ResolveBatch(_ context.Context, _ string, reqs []resolve.Request) ([]resolve.Answer, error) {
	return make([]resolve.Answer, len(reqs)), nil
}
