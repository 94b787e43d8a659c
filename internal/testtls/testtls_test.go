package testtls_test

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testtls"
)

// TestServerTrustedThroughCA serves HTTPS with the server certificate, from a
// certificate and key read back from PEM, and checks that a client trusting the
// CA (and only it) connects by each loopback name, and that one trusting
// another CA does not.
func TestServerTrustedThroughCA(t *testing.T) {
	certs, err := testtls.New("testtls")
	if err != nil {
		t.Fatal(err)
	}
	chain, key, err := certs.ServerPEM()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(chain, key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}

	get := func(host string, c *testtls.Certs) error {
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.Pool(), MinVersion: tls.VersionTLS12}}}
		resp, err := cl.Get("https://" + host + ":" + port + "/")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if err := get(host, certs); err != nil {
			t.Errorf("%s with the CA: %v", host, err)
		}
	}
	other, err := testtls.New("other")
	if err != nil {
		t.Fatal(err)
	}
	if err := get("127.0.0.1", other); err == nil {
		t.Errorf("trusting another CA: connected")
	}
	if len(certs.CAPEM()) == 0 {
		t.Errorf("no CA PEM")
	}
}
