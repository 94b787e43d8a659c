package resolve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"

	"github.com/google/go-containerregistry/pkg/authn"
)

// originKeychain asks the keychain for the repository as written when a
// credential source is configured for it (so that credentials bind to the
// registry entry, whatever endpoint serves it), else for the endpoint.
type originKeychain struct{ r *Remote }

func (k originKeychain) Resolve(target authn.Resource) (authn.Authenticator, error) {
	return k.ResolveContext(context.Background(), target)
}

func (k originKeychain) ResolveContext(ctx context.Context, target authn.Resource) (authn.Authenticator, error) {
	if origin, ok := originFrom(ctx); ok && k.r.creds != nil && k.r.creds.CredentialSource(origin) != "" {
		target = origin
	}
	a, err := authn.Resolve(ctx, k.r.o.keychain, target)
	return DefaultRedactor.Authenticator(a), err
}

// newBaseTransport is the HTTP transport below retries and auth. TLS verification is
// off only for registries configured insecure (or all, with insecureAll); hosts
// with a configured CA trust it besides the system's. jobs is WithJobs's bound.
func newBaseTransport(insecureAll bool, insecureHosts map[string]bool, caHosts map[string]*x509.CertPool, jobs int) http.RoundTripper {
	secure := http.DefaultTransport.(*http.Transport).Clone()
	// Resolution talks to few hosts with many concurrent requests (a Resolver
	// inspects up to registryConcurrency tags at once, 64 by default); with fewer
	// idle connections per host than requests in flight, each request beyond the
	// pool closes its connection when done and a later one dials again (and
	// handshakes TLS). The total idle pool leaves room for a few such hosts.
	perHost := max(DefaultRegistryConcurrency, jobs)
	secure.MaxIdleConnsPerHost = perHost
	secure.MaxIdleConns = max(secure.MaxIdleConns, 4*perHost)
	if !insecureAll && len(insecureHosts) == 0 && len(caHosts) == 0 {
		return secure
	}
	insecure := secure.Clone()
	insecure.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // configured explicitly
	if insecureAll {
		return insecure
	}
	withCA := map[string]http.RoundTripper{}
	for h, pool := range caHosts {
		t := secure.Clone()
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		withCA[h] = t
	}
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if insecureHosts[req.URL.Host] {
			return insecure.RoundTrip(req)
		}
		if t := withCA[req.URL.Host]; t != nil {
			return t.RoundTrip(req)
		}
		return secure.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
