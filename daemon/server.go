package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/google/go-containerregistry/pkg/name"
)

// Limits of one batch.
const (
	maxBatchBytes    = 16 << 20
	maxBatchRequests = 10000
)

// Bounds of the socket's HTTP server: a caller that sends its header (ReadHeader)
// or its whole request (Read) too slowly, or keeps a connection open with nothing to
// ask (Idle), is disconnected; a header is at most MaxHeaderBytes. Bodies are
// bounded by each handler (MaxBytesReader: maxBatchBytes for /v1/resolve, 1 MiB
// for /v1/generate). There is no write timeout on a whole answer: a render takes
// as long as its own deadline allows, and ends early when its caller goes away
// (the read deadline does not cut a render short:
// TestLongRenderNotCutByReadTimeout). A render's answer is streamed instead, each
// chunk written within Write: a caller that stops reading is cut, and its render
// stopped (generateStream).
//
// Who may ask: the socket is mode 0600 in a directory only the daemon's user can
// write (Listen), so only processes of that user in the pod (the CMP sidecar's
// generate) can connect. What they send is trusted as Argo CD gave it to them, the
// app name (ARGOCD_APP_NAME) included: it scopes registries and names the app whose
// renders are remembered and pinned; nothing authenticates it beyond the socket.
var socketLimits = struct {
	ReadHeader     time.Duration // request line and headers
	Read           time.Duration // the whole request, headers and body
	Idle           time.Duration // between two requests on a kept-alive connection
	Write          time.Duration // each chunk of a generate stream
	MaxHeaderBytes int
}{
	ReadHeader:     5 * time.Second,
	Read:           30 * time.Second,
	Idle:           60 * time.Second,
	Write:          30 * time.Second,
	MaxHeaderBytes: 64 << 10,
}

// newSocketServer is the HTTP server of the socket API, bounded by socketLimits.
func newSocketServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: socketLimits.ReadHeader,
		ReadTimeout:       socketLimits.Read,
		IdleTimeout:       socketLimits.Idle,
		MaxHeaderBytes:    socketLimits.MaxHeaderBytes,
	}
}

// BatchRequest is the body of POST /v1/resolve (api.PathResolve).
type BatchRequest = api.ResolveRequest[resolve.Request]

// BatchResponse is the answer to a BatchRequest: one Answer per request, in order.
type BatchResponse = api.ResolveResponse[resolve.Answer]

// Server serves resolution batches on the socket API with a resolve.Resolver over
// the cached registry, and records their latency.
type Server struct {
	resolver resolve.Batch
	m        *Metrics
	log      *slog.Logger
}

// NewServer returns a Server resolving with r. Nil m or log are replaced by
// metrics of its own and a discarding logger.
func NewServer(r resolve.Batch, m *Metrics, log *slog.Logger) *Server {
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{resolver: r, m: m, log: log}
}

// observeResolution records one resolution in the histogram (a resolve.Observer).
func (m *Metrics) observeResolution(req resolve.Request, a resolve.Answer, took time.Duration) {
	strategy := "invalid"
	if st, _, err := resolve.ParseStrategy(req.Policy.Strategy); err == nil {
		strategy = string(st)
	}
	result := "ok"
	if a.Error != "" {
		result = string(a.ErrorKind)
	}
	m.Resolutions.WithLabelValues(strategy, result).Observe(took.Seconds())
	if a.Result == nil {
		return
	}
	registry := "invalid"
	if ref, err := name.ParseReference(req.Image); err == nil {
		registry = ref.Context().RegistryStr()
	}
	if a.Result.InvalidTags > 0 {
		m.InvalidTags.WithLabelValues(registry).Add(float64(a.Result.InvalidTags))
	}
	if n := signatureSkips(a.Result); n > 0 {
		m.SignatureSkips.WithLabelValues(registry).Add(float64(n))
	}
}

// signatureSkips is how many of a result's candidates were skipped for their
// signature.
func signatureSkips(res *resolve.Result) int {
	n := 0
	for _, sk := range res.Skipped {
		if strings.HasPrefix(sk.Reason, resolve.SignatureSkipPrefix) {
			n++
		}
	}
	return n
}

// Handler serves the socket API: POST /v1/resolve and GET /v1/health.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+api.PathResolve, s.serveResolve)
	mux.HandleFunc("GET "+api.PathHealth, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
	})
	return mux
}

func (s *Server) serveResolve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req BatchRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBatchBytes))
	if err := dec.Decode(&req); err != nil {
		status := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			status = http.StatusRequestEntityTooLarge
		}
		s.m.Batches.WithLabelValues("error").Observe(time.Since(start).Seconds())
		writeJSON(w, status, api.ErrorResponse{Error: "bad batch: " + err.Error()})
		return
	}
	if len(req.Requests) > maxBatchRequests {
		s.m.Batches.WithLabelValues("error").Observe(time.Since(start).Seconds())
		writeJSON(w, http.StatusRequestEntityTooLarge, api.ErrorResponse{Error: fmt.Sprintf("bad batch: %d requests, at most %d", len(req.Requests), maxBatchRequests)})
		return
	}
	answers, err := s.resolver.ResolveBatch(r.Context(), req.App, req.Requests)
	if err != nil {
		s.m.Batches.WithLabelValues("error").Observe(time.Since(start).Seconds())
		writeJSON(w, http.StatusInternalServerError, api.ErrorResponse{Error: err.Error()})
		return
	}
	failed, stale := 0, 0
	for _, a := range answers {
		if a.Error != "" {
			failed++
		}
		if a.Result != nil && len(a.Result.Stale) > 0 {
			stale++
		}
	}
	d := time.Since(start)
	s.m.Batches.WithLabelValues("ok").Observe(d.Seconds())
	level := slog.LevelDebug
	if failed > 0 || stale > 0 {
		level = slog.LevelInfo
	}
	s.log.Log(r.Context(), level, "batch resolved", "app", req.App, "images", len(req.Requests),
		"failed", failed, "stale", stale, "duration", d.Round(time.Millisecond))
	writeJSON(w, http.StatusOK, BatchResponse{Answers: answers})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// checkSocketDir creates dir (0700) when missing, and refuses one that is writable
// by group or others without the sticky bit, or owned by another user than this one
// or root: there, another user could remove the socket and put their own in its
// place. A sticky world-writable directory such as /tmp (the default) is fine: only
// the socket's owner can remove or rename it.
func checkSocketDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		return os.Chmod(dir, 0o700) // whatever the umask
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("directory %s is writable by other users (mode %s): another user could replace the socket; use a directory only this user can write (mode 0700 or 0755), or one with the sticky bit such as /tmp", dir, fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("directory %s belongs to user %d, not to this user (%d) or root: it could replace the socket", dir, st.Uid, os.Getuid())
	}
	return nil
}
