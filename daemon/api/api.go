// Package api is the daemon's socket API, in one place: the socket's variable and
// default, the environment variables the daemon's callers read, every endpoint's
// path, and its request and response types. The thin generate client (Call,
// CallWithin) lives here too.
//
// It imports only the standard library on purpose: it is linked into
// argocd-image-resolver-generate, a binary that starts in a few milliseconds because
// it links no Helm, Kustomize or Kubernetes code (whose package initialisation alone
// costs ~20 ms per process). The daemon, which has them loaded already, renders.
// Types that carry the resolver's own values (ResolveRequest, ResolveResponse) are
// generic over them, so that their shape is said here and the resolver's types stay
// in package resolve.
package api

import "time"

// The socket: SocketEnv names it for the daemon, generate and preview alike;
// DefaultSocket is used when it is unset.
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

// RenderTimeoutEnv names the render deadline setting; the thin client sets it for
// an in-process render that must fit in what is left of Argo CD's exec timeout.
const RenderTimeoutEnv = "IMAGE_RESOLVER_RENDER_TIMEOUT"

// Paths on the daemon's socket.
const (
	// PathGenerate takes a GenerateRequest and answers a generate stream
	// (GenerateStreamType): a whole render, as argocd-image-resolver-generate hands
	// it over, its manifests streamed.
	PathGenerate = "/v1/generate"
	// PathResolve takes a ResolveRequest and answers a ResolveResponse: resolutions
	// only, for a render done elsewhere (preview --socket).
	PathResolve = "/v1/resolve"
	// PathHealth answers a Health.
	PathHealth = "/v1/health"
)

// GenerateRequest is a render as Argo CD's CMP server asked for it: the app
// directory and the environment Argo CD gave (only the variables a render reads:
// RenderEnviron).
type GenerateRequest struct {
	Dir     string   `json:"dir"`
	Environ []string `json:"environ"`
}

// GenerateResponse is what `generate` would have printed and its exit status. On
// the socket, Stderr and ExitCode are the trailer of a generate stream, after the
// manifests (Stdout, empty there); Call fills Stdout.
type GenerateResponse struct {
	Stdout   []byte `json:"stdout,omitempty"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exitCode"`
}

// ResolveRequest is the body of POST /v1/resolve, over the resolver's request
// type (resolve.Request).
type ResolveRequest[Req any] struct {
	// App names the application the render is for (e.g. namespace/name); logged,
	// never a metric label. It is trusted from the caller in the same pod: the
	// socket is the daemon user's alone.
	App      string `json:"app"`
	Requests []Req  `json:"requests"`
}

// ResolveResponse answers a ResolveRequest: one answer (resolve.Answer) per
// request, in order.
type ResolveResponse[Answer any] struct {
	Answers []Answer `json:"answers"`
}

// Health is the answer of GET /v1/health.
type Health struct {
	Status string `json:"status"`
}

// ErrorResponse is the body of a failed call of /v1/resolve or /v1/health.
type ErrorResponse struct {
	Error string `json:"error"`
}
