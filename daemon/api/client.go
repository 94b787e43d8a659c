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

// maxAnswerBytes bounds the daemon's answer the client reads.
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

// CallWithin is Call with a deadline on the whole call: connecting, sending, the
// daemon's render and reading its answer. A daemon that has not answered within
// timeout is unavailable (ErrUnavailable), as one that is not there; a ctx of the
// caller's that ends first returns its error.
func CallWithin(ctx context.Context, socket string, req GenerateRequest, timeout time.Duration) (*GenerateResponse, error) {
	cctx, cancel := context.WithTimeoutCause(ctx, timeout, errNoAnswer)
	defer cancel()
	resp, err := Call(cctx, socket, req)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(cctx), errNoAnswer) {
		return nil, fmt.Errorf("%w: %s: no answer within %s (%s)", ErrUnavailable, socket, timeout, TimeoutEnv)
	}
	return resp, err
}

var errNoAnswer = errors.New("delegated render deadline")

// Call asks the daemon on socket to render req, for as long as ctx allows.
func Call(ctx context.Context, socket string, req GenerateRequest) (*GenerateResponse, error) {
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
	var out GenerateResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(&out); err != nil {
		return nil, fmt.Errorf("%w: malformed answer: %v", ErrUnavailable, err)
	}
	return &out, nil
}
