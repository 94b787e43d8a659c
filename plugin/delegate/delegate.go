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
	SocketEnv     = "IMAGE_RESOLVER_SOCKET"
	DefaultSocket = "/tmp/argocd-image-resolver.sock"
)

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

// Call asks the daemon on socket to render req.
func Call(ctx context.Context, socket string, req Request) (*Response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "unix", socket)
		},
	}}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://daemon"+Path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%w: %s: %s", ErrUnavailable, resp.Status, strings.TrimSpace(string(msg)))
	}
	var out Response
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("%w: malformed answer: %v", ErrUnavailable, err)
	}
	return &out, nil
}
