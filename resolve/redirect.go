package resolve

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// maxRedirects is net/http's default bound on the redirects of one request.
const maxRedirects = 10

// checkRedirectSSRF refuses a redirect from a registry's host to another host
// that is a private, loopback or link-local IP literal (a cloud metadata
// service), as go-containerregistry's fetcher does. It also stops after
// maxRedirects, as net/http's default check does: go-containerregistry's
// replaces that check without the bound, so a registry redirecting a request
// to itself would hold it (and its worker) until the request timeout.
func checkRedirectSSRF(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if len(via) == 0 || req.Response == nil {
		return nil
	}
	origHost := via[0].URL.Hostname()
	destHost := req.URL.Hostname()
	if destHost == origHost {
		return nil
	}
	if isPrivateOrLinkLocal(destHost) {
		return fmt.Errorf("SSRF protection: redirect from %q to private/link-local host %q denied", origHost, destHost)
	}
	return nil
}

func isPrivateOrLinkLocal(host string) bool {
	addr, ok := parseIPLiteral(host)
	if !ok {
		return false
	}
	return addr.IsLoopback() || addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() ||
		addr.IsPrivate() || addr.IsUnspecified()
}

// parseIPLiteral parses host as the dialer would connect to it: zone dropped,
// IPv4-mapped IPv6 as IPv4, and the legacy IPv4 forms (127.1, 0x7f.1).
func parseIPLiteral(host string) (netip.Addr, bool) {
	host, _, _ = strings.Cut(host, "%")
	if addr, err := netip.ParseAddr(host); err == nil {
		return addr.WithZone("").Unmap(), true
	}
	parts := strings.Split(host, ".")
	if len(parts) < 1 || len(parts) > 4 {
		return netip.Addr{}, false
	}
	var b [4]byte
	for i, part := range parts[:len(parts)-1] {
		v, err := strconv.ParseUint(part, 0, 8)
		if err != nil {
			return netip.Addr{}, false
		}
		b[i] = byte(v)
	}
	lastBits := [...]int{32, 24, 16, 8}[len(parts)-1]
	last, err := strconv.ParseUint(parts[len(parts)-1], 0, lastBits)
	if err != nil {
		return netip.Addr{}, false
	}
	v := uint32(last)
	for i := len(parts) - 1; i < 4; i++ {
		b[i] = byte(v >> (8 * (3 - i)))
	}
	return netip.AddrFrom4(b), true
}

// redactedParams are the query parameters the registry protocol sends; the
// values of others (a redirect's signed URL) are redacted from errors.
var redactedParams = map[string]bool{"scope": true, "service": true, "mount": true, "from": true,
	"digest": true, "n": true, "last": true}

// redactURLError redacts the query values of a *url.Error's URL outside the
// registry protocol's, as go-containerregistry does for blob reads.
func redactURLError(err error) error {
	var uerr *url.Error
	if !errors.As(err, &uerr) {
		return err
	}
	u, perr := url.Parse(uerr.URL)
	if perr != nil {
		return err
	}
	qs := u.Query()
	for k, v := range qs {
		for i := range v {
			if !redactedParams[k] {
				v[i] = "REDACTED"
			}
		}
	}
	c := *u
	c.RawQuery = qs.Encode()
	uerr.URL = c.Redacted()
	return uerr
}
