package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// maxAnswerBytes bounds the manifests the client reads from the daemon (as the
// daemon bounds a render's).
const maxAnswerBytes = 256 << 20

// TimeoutFromEnv returns $IMAGE_RESOLVER_DELEGATE_TIMEOUT, or DefaultTimeout when it
// is unset. A value that is no positive duration returns DefaultTimeout and an error
// saying so (the caller prints it and goes on).
func TimeoutFromEnv() (time.Duration, error) {
	v := strings.TrimSpace(os.Getenv(TimeoutEnv))
	if v == "" {
		return DefaultTimeout, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return DefaultTimeout, fmt.Errorf("%s=%q is not a positive duration (e.g. 50s); using %s", TimeoutEnv, v, DefaultTimeout)
	}
	return d, nil
}

// ErrUnavailable wraps every failure that is the daemon's, not the render's: no
// socket, nobody listening, a broken or malformed answer. The caller renders itself.
var ErrUnavailable = errors.New("daemon unavailable for delegated render")

// RenderEnviron keeps the variables a render reads from environ: Argo CD's
// (ARGOCD_*, KUBE_*). The operator's settings are the daemon's own configuration,
// read from the same file and environment as generate's, never from a request.
func RenderEnviron(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if strings.HasPrefix(kv, "ARGOCD_") || strings.HasPrefix(kv, "KUBE_") {
			out = append(out, kv)
		}
	}
	return out
}

// SocketFromEnv returns $IMAGE_RESOLVER_SOCKET or the default socket path.
func SocketFromEnv() string {
	if s := os.Getenv(SocketEnv); s != "" {
		return s
	}
	return DefaultSocket
}

// CallWithin is CallTo with a deadline on the whole call: connecting, sending, the
// daemon's render and reading its answer. A daemon that has not answered within
// timeout is unavailable (ErrUnavailable), as one that is not there; a ctx of the
// caller's that ends first returns its error.
func CallWithin(ctx context.Context, socket string, req GenerateRequest, timeout time.Duration, stdout io.Writer) (*GenerateResponse, error) {
	cctx, cancel := context.WithTimeoutCause(ctx, timeout, errNoAnswer)
	defer cancel()
	resp, err := CallTo(cctx, socket, req, stdout)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(cctx), errNoAnswer) {
		return nil, fmt.Errorf("%w: %s: no answer within %s (%s)", ErrUnavailable, socket, timeout, TimeoutEnv)
	}
	return resp, err
}

var errNoAnswer = errors.New("delegated render deadline")

// Call asks the daemon on socket to render req, for as long as ctx allows, and
// returns its answer whole, the manifests in Stdout (only when the exit code is
// 0). It holds them in memory: generate streams them (CallTo).
func Call(ctx context.Context, socket string, req GenerateRequest) (*GenerateResponse, error) {
	var stdout bytes.Buffer
	resp, err := CallTo(ctx, socket, req, &stdout)
	if err != nil {
		return nil, err
	}
	if resp.ExitCode == 0 {
		resp.Stdout = stdout.Bytes()
	}
	return resp, nil
}

// CallTo asks the daemon on socket to render req, for as long as ctx allows, and
// copies the manifests to stdout as they come (the generate stream). They count
// only if the answer's exit code is 0; else the caller discards what stdout got.
// Every failure but stdout's is the daemon's (ErrUnavailable): no socket, nobody
// listening, a broken or malformed answer; stdout may then have got some bytes.
func CallTo(ctx context.Context, socket string, req GenerateRequest, stdout io.Writer) (*GenerateResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true, // one call per process
	}}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://daemon"+PathGenerate, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%w: %s: %s", ErrUnavailable, resp.Status, strings.TrimSpace(string(msg)))
	}
	if ct := resp.Header.Get("Content-Type"); ct != GenerateStreamType {
		return nil, fmt.Errorf("%w: malformed answer: Content-Type %q, want %s", ErrUnavailable, ct, GenerateStreamType)
	}
	out := &stdoutWriter{w: stdout}
	answer, err := ReadStream(resp.Body, out, maxAnswerBytes)
	if err != nil {
		if out.err != nil {
			return nil, out.err
		}
		return nil, fmt.Errorf("%w: malformed answer: %w", ErrUnavailable, err)
	}
	return answer, nil
}

// stdoutWriter keeps the error of the caller's stdout apart from the stream's.
type stdoutWriter struct {
	w   io.Writer
	err error
}

func (s *stdoutWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		s.err = fmt.Errorf("write the manifests: %w", err)
	}
	return n, err
}
