package registrytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// ---- faults ----

// Fault makes the server answer matching requests with an error instead of
// handling them. Faults are checked before authentication and before the
// registry, in the order they were injected; the first match answers.
type Fault struct {
	Kind Kind // "" matches every kind
	// PathContains, when set, must be a substring of the request path plus
	// "?" and the raw query when there is one (a repository, a digest, "last=").
	PathContains string
	Status       int    // HTTP status; 0 means 503
	RetryAfter   string // Retry-After header value, optional
	Times        int    // how many requests to answer; 0 = forever
	// Every, when above 1, answers only every Every-th matching request (the
	// others go through): 50 fails 2% of requests, deterministically.
	Every   int
	Code    string // error code in the body; "" derives it from Status
	Message string // error message in the body; "" derives it from Status

	// The hostile behaviours below answer instead of an error body.

	// Hang accepts the request and never answers: the handler waits until the
	// client goes away or the server closes (a registry that accepts and hangs).
	Hang bool
	// HangBody sends the status line and headers of the real answer, then never
	// writes its body (a registry that stalls mid-answer).
	HangBody bool
	// Body, when not nil, is sent as a 200 (or Status) answer instead of an error,
	// with Header; e.g. a huge tags/list page, a tag list with tags that break
	// the OCI grammar, or a gzip bomb (GzipBomb) with Content-Encoding: gzip.
	Body []byte
	// Header is set on the answer: on Body's, or, with PassThrough, on the real
	// registry's answer (replacing its values), e.g. a lying
	// Docker-Content-Digest or a Link back to a page already served.
	Header http.Header
	// PassThrough lets the request be handled as usual, with Header applied to
	// the answer. Counts as a fault in the request log.
	PassThrough bool
}

type faultState struct {
	Fault
	served  int
	matched int
}

// Inject appends a fault.
func (s *Server) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &faultState{Fault: f})
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

func (s *Server) matchFault(kind Kind, r *http.Request) (Fault, bool) {
	target := r.URL.Path
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.faults {
		if f.Kind != "" && f.Kind != kind {
			continue
		}
		if f.PathContains != "" && !strings.Contains(target, f.PathContains) {
			continue
		}
		if f.Times > 0 && f.served >= f.Times {
			continue
		}
		if f.Every > 1 {
			if f.matched++; f.matched%f.Every != 0 {
				continue
			}
		}
		f.served++
		return f.Fault, true
	}
	return Fault{}, false
}

func (s *Server) writeFault(w http.ResponseWriter, r *http.Request, kind Kind, f Fault) {
	if f.Hang {
		select {
		case <-r.Context().Done():
		case <-s.closing:
		}
		return
	}
	if f.Body != nil {
		status := f.Status
		if status == 0 {
			status = http.StatusOK
		}
		h := w.Header()
		h.Set("Docker-Distribution-API-Version", "registry/2.0")
		if h.Get("Content-Type") == "" {
			h.Set("Content-Type", "application/json")
		}
		for k, v := range f.Header {
			h[k] = v
		}
		h.Set("Content-Length", fmt.Sprint(len(f.Body)))
		w.WriteHeader(status)
		if f.HangBody {
			_ = http.NewResponseController(w).Flush()
			<-r.Context().Done()
			return
		}
		if r.Method != http.MethodHead {
			_, _ = w.Write(f.Body)
		}
		return
	}
	for k, v := range f.Header {
		w.Header()[k] = v
	}
	status := f.Status
	if status == 0 {
		status = http.StatusServiceUnavailable
	}
	code, msg := errorFor(status, kind)
	if f.Code != "" {
		code = f.Code
	}
	if f.Message != "" {
		msg = f.Message
	} else {
		msg += " (registrytest fault)"
	}
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	writeError(w, r, status, code, msg, nil)
}

// errorFor returns distribution's error code and message for a status.
func errorFor(status int, kind Kind) (code, msg string) {
	switch status {
	case http.StatusUnauthorized:
		return "UNAUTHORIZED", "authentication required"
	case http.StatusForbidden:
		return "DENIED", "requested access to the resource is denied"
	case http.StatusNotFound:
		switch kind {
		case ManifestGet, ManifestHead:
			return "MANIFEST_UNKNOWN", "manifest unknown"
		case BlobGet:
			return "BLOB_UNKNOWN", "blob unknown to registry"
		}
		return "NAME_UNKNOWN", "repository name not known to registry"
	case http.StatusTooManyRequests:
		return "TOOMANYREQUESTS", "too many requests"
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return "UNAVAILABLE", "service unavailable"
	}
	if status >= 500 {
		return "UNKNOWN", "unknown error"
	}
	return "UNSUPPORTED", "the operation is unsupported"
}

type errorBody struct {
	Errors []errorEntry `json:"errors"`
}

type errorEntry struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Detail  any    `json:"detail,omitempty"`
}

// writeError answers with a distribution-style JSON error body.
func writeError(w http.ResponseWriter, r *http.Request, status int, code, msg string, detail any) {
	b, _ := json.Marshal(errorBody{Errors: []errorEntry{{Code: code, Message: msg, Detail: detail}}})
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Docker-Distribution-API-Version", "registry/2.0")
	h.Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}
