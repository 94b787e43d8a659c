package registrytest

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

const (
	realm    = "registrytest"
	service  = "registrytest"
	tokenTTL = 300 * time.Second
)

func (s *Server) credsOK(r *http.Request) bool {
	u, p, ok := r.BasicAuth()
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(u), []byte(s.cfg.user)) == 1 &&
		subtle.ConstantTimeCompare([]byte(p), []byte(s.cfg.pass)) == 1
}

// authorized reports whether a registry request carries valid credentials.
func (s *Server) authorized(r *http.Request) bool {
	switch s.cfg.auth {
	case authBasic:
		return s.credsOK(r)
	case authBearer:
		h := r.Header.Get("Authorization")
		if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
			return false
		}
		tok := strings.TrimSpace(h[7:])
		s.mu.Lock()
		defer s.mu.Unlock()
		exp, ok := s.tokens[tok]
		return ok && time.Now().Before(exp)
	}
	return true
}

// challenge answers 401 with the WWW-Authenticate header of the auth mode.
func (s *Server) challenge(w http.ResponseWriter, r *http.Request, repo string) {
	switch s.cfg.auth {
	case authBasic:
		w.Header().Set("WWW-Authenticate", fmt.Sprintf("Basic realm=%q", realm))
	case authBearer:
		c := fmt.Sprintf("Bearer realm=%q,service=%q", s.URL+"/token", service)
		if repo != "" {
			actions := "pull"
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				actions = "pull,push"
			}
			c += fmt.Sprintf(",scope=%q", "repository:"+repo+":"+actions)
		}
		w.Header().Set("WWW-Authenticate", c)
	}
	writeError(w, r, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required", nil)
}

type tokenResponse struct {
	Token       string `json:"token"`
	AccessToken string `json:"access_token"`
	ExpiresIn   int    `json:"expires_in"`
	IssuedAt    string `json:"issued_at"`
}

// serveToken is the token server: GET /token with Basic credentials.
// Other methods get 404, which tells OAuth2 clients (POST) to fall back to GET.
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, r, http.StatusNotFound, "UNSUPPORTED", "the token endpoint only supports GET", nil)
		return
	}
	if !s.credsOK(r) {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf("Basic realm=%q", realm))
		writeError(w, r, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required", nil)
		return
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	now := time.Now()
	s.mu.Lock()
	s.tokens[tok] = now.Add(tokenTTL)
	s.mu.Unlock()
	body, _ := json.Marshal(tokenResponse{
		Token:       tok,
		AccessToken: tok,
		ExpiresIn:   int(tokenTTL / time.Second),
		IssuedAt:    now.UTC().Format(time.RFC3339),
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// RevokeTokens invalidates every bearer token issued so far, as if they had
// expired: clients must fetch a new one.
func (s *Server) RevokeTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = map[string]time.Time{}
}
