package render

import (
	"cmp"
	"errors"
	"net"
	"net/url"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// RemoteHost is a host an operator lets Kustomize renders fetch remote resources
// and bases from (the kustomizeRemoteHosts setting; none by default). Fetches go
// over HTTPS, or plain HTTP when the entry is spelled http://host.
type RemoteHost struct {
	// Host is the lower-case host name, with ":port" when the entry named one
	// (then only that port matches; without, the scheme's default port). A leading
	// "*." matches every subdomain, not the domain itself.
	Host string `json:"host"`
	// HTTP allows plain HTTP to this host (entries spelled "http://host").
	HTTP bool `json:"http,omitempty"`
}

// RemoteHostsAccepted says what ParseRemoteHost accepts, for error messages.
const RemoteHostsAccepted = `host names (github.com, *.githubusercontent.com, git.example.com:8443), HTTPS only; "http://host[:port]" also allows plain HTTP to that host`

// ParseRemoteHost reads one kustomizeRemoteHosts entry.
func ParseRemoteHost(s string) (RemoteHost, error) {
	in := strings.TrimSpace(s)
	bad := func(why string) (RemoteHost, error) {
		return RemoteHost{}, &resolve.InputError{Field: "remote Kustomize host", Value: s, Accepted: RemoteHostsAccepted, Err: errors.New(why)}
	}
	var h RemoteHost
	rest := in
	if scheme, after, ok := strings.Cut(in, "://"); ok {
		switch strings.ToLower(scheme) {
		case "https":
		case "http":
			h.HTTP = true
		default:
			return bad("the scheme " + scheme + " is not fetched")
		}
		rest = strings.TrimSuffix(after, "/")
	}
	if rest == "" {
		return bad("no host")
	}
	if strings.ContainsAny(rest, "/@?# \t") {
		return bad("a host, without path, user or query")
	}
	host, port := rest, ""
	if hp, p, err := net.SplitHostPort(rest); err == nil {
		host, port = hp, p
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return bad("the port is not a number")
		}
	}
	host = strings.ToLower(host)
	name := strings.TrimPrefix(host, "*.")
	if name == "" || strings.Contains(name, "*") || !validHostName(name) {
		return bad("not a host name")
	}
	h.Host = host
	if port != "" {
		h.Host = net.JoinHostPort(host, port)
	}
	return h, nil
}

// validHostName accepts DNS names and IP addresses.
func validHostName(s string) bool {
	if net.ParseIP(s) != nil {
		return true
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// String is the entry as ParseRemoteHost reads it back.
func (h RemoteHost) String() string {
	if h.HTTP {
		return "http://" + h.Host
	}
	return h.Host
}

// allows reports whether a request to u may be sent under h.
func (h RemoteHost) allows(u *url.URL) bool {
	scheme := strings.ToLower(u.Scheme)
	if scheme != "https" && !(scheme == "http" && h.HTTP) {
		return false
	}
	defaultPort := "443"
	if scheme == "http" {
		defaultPort = "80"
	}
	host, port := strings.ToLower(u.Hostname()), cmp.Or(u.Port(), defaultPort)
	want, wantPort := h.Host, defaultPort
	if hp, p, err := net.SplitHostPort(h.Host); err == nil {
		want, wantPort = hp, p
	}
	if port != wantPort {
		return false
	}
	if sub, ok := strings.CutPrefix(want, "*."); ok {
		return strings.HasSuffix(host, "."+sub)
	}
	return host == want
}

// remoteHostsAllow reports whether any of hosts allows u.
func remoteHostsAllow(hosts []RemoteHost, u *url.URL) bool {
	for _, h := range hosts {
		if h.allows(u) {
			return true
		}
	}
	return false
}
