package registrytest

import "net/http"

// ---- faults ----

// APIFault makes an APIServer answer matching requests in a hostile way.
// Faults are checked before authentication, in the order injected; the first
// match applies.
type APIFault struct {
	Kind APIKind // "" matches every kind
	Repo string  // "" matches every repository
	// Status, when not 0, answers with this status and the vendor's error body
	// (or Body), e.g. 429 with RetryAfter, 500, 401.
	Status     int
	RetryAfter string // Retry-After header value, optional
	// Body, when not nil, is sent instead of the answer (status Status, else
	// 200), e.g. a malformed JSON body.
	Body []byte
	// NextURL replaces the next page's link of the real answer (Docker Hub's
	// next, Harbor's Link header), e.g. a URL on another host.
	NextURL string
	// NextLoop makes the next page's link the page's own URL (Quay, whose pages
	// are numbered: the first page served again, has_additional still true).
	NextLoop bool
	// Header is set on the real answer, replacing its values; an empty value
	// removes the header (e.g. Harbor's Link).
	Header http.Header
	Skip   int // matching requests let through before the fault applies
	Times  int // how many requests the fault answers; 0 = forever
}

type apiFaultState struct {
	APIFault
	matched, served int
}

// Inject appends a fault.
func (a *APIServer) Inject(f APIFault) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.faults = append(a.faults, &apiFaultState{APIFault: f})
}

// ClearFaults removes every fault.
func (a *APIServer) ClearFaults() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.faults = nil
}

func (a *APIServer) matchFault(kind APIKind, repo string) *APIFault {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, f := range a.faults {
		if (f.Kind != "" && f.Kind != kind) || (f.Repo != "" && f.Repo != repo) {
			continue
		}
		f.matched++
		if f.matched <= f.Skip || (f.Times > 0 && f.served >= f.Times) {
			continue
		}
		f.served++
		c := f.APIFault
		return &c
	}
	return nil
}

// apiStatusWriter records the answer's status in the request log.
type apiStatusWriter struct {
	http.ResponseWriter
	a        *APIServer
	rec      *APIRequest
	wrote    bool
	override http.Header // a fault's Header
}

func (w *apiStatusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		for k, v := range w.override {
			if len(v) == 0 || v[0] == "" {
				w.Header().Del(k)
			} else {
				w.Header()[http.CanonicalHeaderKey(k)] = v
			}
		}
		w.a.mu.Lock()
		w.rec.Status = code
		w.a.mu.Unlock()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *apiStatusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}
