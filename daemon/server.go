package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// API paths on the daemon's socket.
const (
	PathResolve = "/v1/resolve"
	PathHealth  = "/v1/health"
	// PathRenders takes a Render to remember, from a generate that resolved
	// through the daemon.
	PathRenders = "/v1/renders"
)

// Limits of one batch.
const (
	maxBatchBytes    = 16 << 20
	maxBatchRequests = 10000
)

// BatchRequest is the body of POST /v1/resolve.
type BatchRequest struct {
	// App names the application the render is for (e.g. namespace/name); logged,
	// never a metric label.
	App      string            `json:"app"`
	Requests []resolve.Request `json:"requests"`
}

// BatchResponse is the answer to a BatchRequest: one Answer per request, in order.
type BatchResponse struct {
	Answers []resolve.Answer `json:"answers"`
}

// errorResponse is the body of a failed API call.
type errorResponse struct {
	Error string `json:"error"`
}

// Server serves resolution batches on the socket API with a resolve.Resolver over
// the cached registry, and records their latency.
type Server struct {
	resolver *resolve.Resolver
	m        *Metrics
	log      *slog.Logger
}

// NewServer returns a Server resolving with r. Nil m or log are replaced by
// metrics of its own and a discarding logger.
func NewServer(r *resolve.Resolver, m *Metrics, log *slog.Logger) *Server {
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
}

// Handler serves the socket API: POST /v1/resolve and GET /v1/health.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathResolve, s.serveResolve)
	mux.HandleFunc("GET "+PathHealth, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
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
		writeJSON(w, status, errorResponse{Error: "bad batch: " + err.Error()})
		return
	}
	if len(req.Requests) > maxBatchRequests {
		s.m.Batches.WithLabelValues("error").Observe(time.Since(start).Seconds())
		writeJSON(w, http.StatusRequestEntityTooLarge, errorResponse{Error: fmt.Sprintf("bad batch: %d requests, at most %d", len(req.Requests), maxBatchRequests)})
		return
	}
	answers, err := s.resolver.ResolveBatch(r.Context(), req.App, req.Requests)
	if err != nil {
		s.m.Batches.WithLabelValues("error").Observe(time.Since(start).Seconds())
		writeJSON(w, http.StatusInternalServerError, errorResponse{Error: err.Error()})
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
