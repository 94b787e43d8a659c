package registrytest

import (
	"crypto/tls"
	"net/http"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testtls"
)

// startTLS generates a CA and a server certificate signed by it, and starts
// the server with HTTPS.
func (s *Server) startTLS() error {
	certs, err := testtls.New("registrytest")
	if err != nil {
		return err
	}
	s.CACertPEM = certs.CAPEM()
	s.srv.TLS = &tls.Config{Certificates: []tls.Certificate{certs.Server}, MinVersion: tls.VersionTLS12}
	s.srv.StartTLS()

	// httptest's client trusts the leaf; make it trust the CA instead, like a
	// client configured with CACertPEM.
	if tr, ok := s.srv.Client().Transport.(*http.Transport); ok {
		tr.TLSClientConfig = &tls.Config{RootCAs: certs.Pool(), MinVersion: tls.VersionTLS12}
	}
	return nil
}
