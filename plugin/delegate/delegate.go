// Package delegate is how a CMP generate run hands its render to the daemon: the
// wire types of the daemon's POST /v1/generate and the client that calls it.
//
// It imports only the standard library on purpose: the client is linked into
// argocd-image-resolver-generate, a binary that starts in a few milliseconds because
// it links no Helm, Kustomize or Kubernetes code (whose package initialisation alone
// costs ~20 ms per process). The daemon, which has them loaded already, renders.
package delegate

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

// Path is the daemon's endpoint for a delegated render.
const Path = "/v1/generate"

// SocketEnv names the daemon's socket; DefaultSocket is used when it is unset.
const (
	SocketEnv = "IMAGE_RESOLVER_SOCKET"
	// DefaultSocket is in a directory of its own, which the daemon creates with mode
	// 0700: in a pod /tmp is an emptyDir (mode 0777, no sticky bit), where the
	// daemon refuses a socket others could replace.
	DefaultSocket = "/tmp/image-resolver/daemon.sock"
)

// TimeoutEnv names the deadline of a whole delegated render (a Go duration such as
// 50s or 1m); DefaultTimeout is used when it is unset. Past it, the thin client
// stops waiting for the daemon and renders in-process in its place.
//
// Argo CD kills a CMP generate after its exec timeout (ARGOCD_EXEC_TIMEOUT, 90s by
// default). The default leaves the in-process fallback ~40s of those 90s: a daemon
// that accepts and never answers costs 50s, not the whole render. It is above the
// render's own deadline in the daemon, so a slow but healthy daemon answers (with its
// own error, if it has to) before the client gives up on it. With a longer exec
// timeout, raise both.
const (
	TimeoutEnv     = "IMAGE_RESOLVER_DELEGATE_TIMEOUT"
	DefaultTimeout = 50 * time.Second
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

// Request is a render as Argo CD's CMP server asked for it: the app directory and
// the environment Argo CD gave (only the variables a render reads).
type Request struct {
	Dir     string   `json:"dir"`
	Environ []string `json:"environ"`
}

// Response is what `generate` would have printed and its exit status.
type Response struct {
	Stdout   []byte `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exitCode"`
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
func CallWithin(ctx context.Context, socket string, req Request, timeout time.Duration) (*Response, error) {
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
func Call(ctx context.Context, socket string, req Request) (*Response, error) {
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
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://daemon"+Path, bytes.NewReader(body))
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
	var out Response
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(&out); err != nil {
		return nil, fmt.Errorf("%w: malformed answer: %v", ErrUnavailable, err)
	}
	return &out, nil
}
