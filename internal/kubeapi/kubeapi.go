// Package kubeapi builds the HTTP client the sidecar talks to the Kubernetes API
// with (notify's Application patches, the keychain's pull secrets). The API
// server is a peer like any other: one answer is read up to MaxBody bytes and no
// further, and a redirect is refused rather than followed, because client-go's
// credential round trippers would send the ServiceAccount token to whatever host
// the redirect names.
package kubeapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"k8s.io/client-go/rest"
)

// MaxBody bounds one answer of the Kubernetes API, in bytes. The objects the
// sidecar reads (an Application, a Secret) are stored in etcd, which refuses
// requests over 1.5 MiB by default: 16 MiB leaves room for any of them.
const MaxBody = 16 << 20

// ErrBodyTooLarge is wrapped by the error of an answer longer than MaxBody.
var ErrBodyTooLarge = errors.New("answer larger than the bound")

// ErrRedirect is wrapped by the error of a request the API server answered
// with a redirect.
var ErrRedirect = errors.New("redirect refused")

// HTTPClient returns an HTTP client for the API server of cfg (its TLS, its
// credentials) that bounds every answer to maxBody bytes (MaxBody when
// maxBody <= 0) and follows no redirect. Use it with client-go's
// NewForConfigAndClient constructors.
func HTTPClient(cfg *rest.Config, maxBody int64) (*http.Client, error) {
	if maxBody <= 0 {
		maxBody = MaxBody
	}
	c := rest.CopyConfig(cfg)
	wrap := c.WrapTransport
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if wrap != nil {
			rt = wrap(rt)
		}
		return boundedTransport{next: rt, max: maxBody}
	}
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes http client: %w", err)
	}
	// The transport refuses a redirect already (and so client-go never reads
	// the closed body of one); CheckRedirect is the backstop should any
	// wrapper above it hand the client one.
	own := *hc // never set CheckRedirect on a shared client (http.DefaultClient)
	own.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		return redirectError(via[len(via)-1], req.Response.StatusCode, req.URL)
	}
	return &own, nil
}

// redirectError names both ends of a refused redirect.
func redirectError(from *http.Request, code int, to *url.URL) error {
	return fmt.Errorf("the Kubernetes API answered %s %s with %d to %s: %w (redirects are not followed, so the ServiceAccount token stays with the API server)",
		from.Method, from.URL.Redacted(), code, clip(to), ErrRedirect)
}

// clip is u without its user information, at most 256 bytes: a redirect's
// target is the peer's to choose.
func clip(u *url.URL) string {
	s := u.Redacted()
	if len(s) > 256 {
		s = s[:256] + "..."
	}
	return s
}

// boundedTransport refuses a redirect and an answer that announces more than
// max bytes, and cuts one that sends more.
type boundedTransport struct {
	next http.RoundTripper
	max  int64
}

func (t boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if loc, err := resp.Location(); err == nil && resp.StatusCode >= 300 && resp.StatusCode < 400 {
		resp.Body.Close()
		return nil, redirectError(req, resp.StatusCode, loc)
	}
	if resp.ContentLength > t.max {
		resp.Body.Close()
		return nil, tooLarge(req, t.max, fmt.Sprintf("announces %d bytes", resp.ContentLength))
	}
	resp.Body = &boundedBody{rc: resp.Body, left: t.max, req: req, max: t.max}
	return resp, nil
}

func tooLarge(req *http.Request, maxBody int64, what string) error {
	return fmt.Errorf("the Kubernetes API's answer to %s %s %s: %w of %d MiB for one answer (an Application or a Secret is far smaller)",
		req.Method, req.URL.Redacted(), what, ErrBodyTooLarge, maxBody>>20)
}

// boundedBody reads at most max bytes of an answer and fails past them.
type boundedBody struct {
	rc   io.ReadCloser
	left int64
	max  int64
	req  *http.Request
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		var one [1]byte
		if n, err := io.ReadFull(b.rc, one[:]); n == 0 {
			return 0, err
		}
		return 0, tooLarge(b.req, b.max, "goes on past "+fmt.Sprint(b.max)+" bytes")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
