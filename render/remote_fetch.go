package render

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpproxy"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// ErrRemoteFetch marks a remote Kustomize input from an allowed host that could not
// be fetched (the host's answer, a bound, a deadline); the message says which.
var ErrRemoteFetch = errors.New("remote Kustomize input not fetched")

// Bounds of what one Kustomize render fetches from allowed remote hosts. Each
// file also stays within maxFileSize, like every file a render reads.
const (
	maxRemoteFetches   = 50        // distinct remote entries
	maxRemoteNetBytes  = 64 << 20  // bytes read from the network, all fetches together
	maxRemoteHeldBytes = 128 << 20 // bytes of fetched files and git objects held
	maxRemoteFiles     = 20000     // files of the git trees
	maxRemoteRedirects = 5
	remoteHeaderWait   = 30 * time.Second // for the first byte of an answer
)

// remoteDirName is the directory, beside the kustomization naming a remote entry,
// where the fetched files appear to kustomize. It exists only in the render's view
// of the file system: nothing is written.
const remoteDirName = ".image-resolver-remote"

// remoteFetcher fetches the remote inputs one Kustomize render may reach (hosts
// in kustomizeRemoteHosts, over HTTPS or HTTP where allowed), bounded in bytes,
// entries and time (the render's deadline), and holds them in memory. Redirects
// are followed only to allowed hosts; no credential is ever sent.
type remoteFetcher struct {
	ctx       context.Context
	hosts     []RemoteHost
	client    *http.Client
	transport *http.Transport
	mem       filesys.FileSystem // fetched trees, each under /<id>
	netLeft   atomic.Int64
	heldLeft  atomic.Int64

	mu      sync.Mutex
	fetched map[string]*remoteTree // by entry and role
	repos   map[string]gitTree     // fetched git trees by canonicalRepo and ref
	order   []*remoteTree          // as fetched, for the render's report
}

// remoteTree is one fetched entry: a file or a git repository at a commit.
type remoteTree struct {
	id     string // directory in mem
	sub    string // path inside it that the entry names ("" for the whole tree)
	source string // what was fetched, for messages (no credentials)
	entry  string // the entry, without a URL's password
	commit string // a git repository's commit
	err    error
}

func newRemoteFetcher(ctx context.Context, hosts []RemoteHost) *remoteFetcher {
	if len(hosts) == 0 {
		return nil
	}
	r := &remoteFetcher{ctx: ctx, hosts: hosts, mem: filesys.MakeFsInMemory(), fetched: map[string]*remoteTree{}, repos: map[string]gitTree{}}
	r.netLeft.Store(maxRemoteNetBytes)
	r.heldLeft.Store(maxRemoteHeldBytes)
	r.transport = &http.Transport{
		Proxy:                  proxyFromEnvironment(), // as the registry requests do (the daemon gives its workers these variables)
		DialContext:            (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  remoteHeaderWait,
		MaxResponseHeaderBytes: 1 << 20,
		ForceAttemptHTTP2:      true,
		IdleConnTimeout:        30 * time.Second,
	}
	r.client = &http.Client{
		Transport: &allowedTransport{f: r, next: r.transport},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > maxRemoteRedirects {
				return fmt.Errorf("more than %d redirects", maxRemoteRedirects)
			}
			return nil // the transport checks the host
		},
	}
	return r
}

// proxyFromEnvironment is http.ProxyFromEnvironment read now, not once per process.
func proxyFromEnvironment() func(*http.Request) (*url.URL, error) {
	proxy := httpproxy.FromEnvironment().ProxyFunc()
	return func(req *http.Request) (*url.URL, error) { return proxy(req.URL) }
}

// inputs are the entries fetched, for the render's report.
func (r *remoteFetcher) inputs() []RemoteInput {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []RemoteInput
	for _, t := range r.order {
		out = append(out, RemoteInput{Entry: t.entry, Fetched: t.source, Commit: t.commit})
	}
	return out
}

// close drops the fetcher's connections.
func (r *remoteFetcher) close() {
	if r != nil {
		r.transport.CloseIdleConnections()
	}
}

// allowedTransport sends only to allowed hosts (redirects included) and counts
// every body read against the render's network bound.
type allowedTransport struct {
	f    *remoteFetcher
	next http.RoundTripper
}

func (t *allowedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !remoteHostsAllow(t.f.hosts, req.URL) {
		return nil, &hostRefused{u: redactedURL(req.URL)}
	}
	req = req.Clone(req.Context())
	req.Header.Del("Authorization") // never a credential, even one a URL carried
	req.Header.Set("User-Agent", "argocd-image-resolver (kustomize remote input)")
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, left: &t.f.netLeft}
	return resp, nil
}

// hostRefused is a request (or redirect) to a host not in kustomizeRemoteHosts.
type hostRefused struct{ u string }

func (e *hostRefused) Error() string {
	return fmt.Sprintf("%s is not on an allowed host (kustomizeRemoteHosts)", e.u)
}

// countedBody fails a read past the render's network bound.
type countedBody struct {
	io.ReadCloser
	left *atomic.Int64
}

var errNetBound = fmt.Errorf("the remote inputs of this render exceed %d MiB read from the network (a bound of the sidecar)", maxRemoteNetBytes>>20)

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.left.Add(-int64(n)) < 0 {
		return n, errNetBound
	}
	return n, err
}

// hold takes n bytes from the bound of what the render holds in memory.
func (r *remoteFetcher) hold(n int64) error {
	if r.heldLeft.Add(-n) < 0 {
		return fmt.Errorf("the remote inputs of this render exceed %d MiB (a bound of the sidecar)", maxRemoteHeldBytes>>20)
	}
	return nil
}

// get fetches the remote entry ref (once per render) and returns where it is.
func (r *remoteFetcher) get(ref string, role remoteRole) (*remoteTree, error) {
	key := fetchKey(ref, role)
	r.mu.Lock()
	t, ok := r.fetched[key]
	if !ok && len(r.fetched) >= maxRemoteFetches {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: more than %d remote entries in one render (a bound of the sidecar)", ErrRemoteFetch, maxRemoteFetches)
	}
	if !ok {
		t = &remoteTree{entry: redactRef(ref)}
		r.fetched[key] = t
		if t.err = r.fetch(t, ref, role); t.err == nil {
			r.order = append(r.order, t)
		}
	}
	r.mu.Unlock()
	return t, t.err
}

// fetchKey names the fetch of ref in a render: a git base by its repository,
// directory and ref however it is spelled (a git:: prefix, ".git/" or "//",
// version= or ref=, a trailing slash, and canonicalRepo's), else the entry as
// written.
func fetchKey(ref string, role remoteRole) string {
	spec, err := parseRemoteRef(ref)
	if err != nil || role == roleFile || !spec.explicitGit || spec.repo == nil {
		return fmt.Sprintf("%d %s", role, ref)
	}
	return "git " + canonicalRepo(spec.repo) + "//" + spec.sub + "?ref=" + spec.ref
}

// canonicalRepo is a repository URL without what does not change the
// repository: the case of the scheme and host, a default port, a trailing
// slash, user information (never sent).
func canonicalRepo(u *url.URL) string {
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	if h, port, err := net.SplitHostPort(host); err == nil && (scheme == "https" && port == "443" || scheme == "http" && port == "80") {
		host = h
		if strings.Contains(h, ":") {
			host = "[" + h + "]"
		}
	}
	return scheme + "://" + host + strings.TrimSuffix(u.EscapedPath(), "/")
}

// fetch fetches ref as kustomize would load it: a file entry is an HTTP(S) file;
// a resource is a git repository when its URL says so (a "//" or ".git" path, a
// ref query, the git:: prefix, github.com/ without a scheme) and a file otherwise,
// falling back to a git repository when the file is not there, as kustomize does.
func (r *remoteFetcher) fetch(t *remoteTree, ref string, role remoteRole) error {
	spec, err := parseRemoteRef(ref)
	if err != nil {
		return err
	}
	if role == roleFile || (role == roleResource && !spec.explicitGit) {
		status, err := r.fetchFile(t, spec.url)
		if err == nil || role == roleFile || status < 400 {
			return err
		}
		if spec.repo == nil {
			return err
		}
		// not a file: a git repository, as kustomize tries next
	}
	if spec.repo == nil {
		return fmt.Errorf("%w: %s is not a git repository URL (https://host/org/repo//path?ref=...)", ErrRemoteFetch, redactedURL(spec.url))
	}
	return r.fetchGit(t, spec)
}

// fetchFile fetches u into the render's memory as one file; status is the HTTP
// status when the host answered.
func (r *remoteFetcher) fetchFile(t *remoteTree, u *url.URL) (status int, err error) {
	shown := redactedURL(u)
	t.source = shown
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%w: GET %s: %s", ErrRemoteFetch, shown, fmt.Sprintf(format, a...))
	}
	if !remoteHostsAllow(r.hosts, u) {
		return 0, r.notAllowed(u)
	}
	req, err := http.NewRequestWithContext(r.ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, fail("%v", err)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		var hr *hostRefused
		if errors.As(err, &hr) {
			return 0, fmt.Errorf("%w: GET %s: redirected to %s, which is not on an allowed host (kustomizeRemoteHosts: %s)", ErrRemote, shown, hr.u, r.hostList())
		}
		return 0, fail("%v", unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fail("%s", resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxFileSize+1))
	if err != nil {
		return resp.StatusCode, fail("%v", err)
	}
	if len(data) > maxFileSize {
		return resp.StatusCode, fail("larger than %d MiB (a bound of the sidecar)", maxFileSize>>20)
	}
	if err := r.hold(int64(len(data))); err != nil {
		return resp.StatusCode, fail("%v", err)
	}
	name := path.Base(u.Path)
	if name == "/" || name == "." || name == "" {
		name = "resource.yaml"
	}
	t.id, t.sub = treeID("file "+u.String()), name
	if err := r.mem.WriteFile("/"+t.id+"/"+name, data); err != nil {
		return resp.StatusCode, fail("%v", err)
	}
	return resp.StatusCode, nil
}

// notAllowed is the error for a remote entry whose host is not allowed.
func (r *remoteFetcher) notAllowed(u *url.URL) error {
	scheme := strings.ToLower(u.Scheme)
	if scheme == "http" && remoteHostsAllow(r.hosts, &url.URL{Scheme: "https", Host: u.Host}) {
		return fmt.Errorf("%w: %s is plain HTTP and %s is allowed over HTTPS only (list it as http://%s in kustomizeRemoteHosts to allow HTTP)", ErrRemote, redactedURL(u), u.Host, u.Host)
	}
	return fmt.Errorf("%w: the host %s is not in kustomizeRemoteHosts (%s)", ErrRemote, u.Host, r.hostList())
}

func (r *remoteFetcher) hostList() string {
	var s []string
	for _, h := range r.hosts {
		s = append(s, h.String())
	}
	return strings.Join(s, ", ")
}

// treeID names a fetched tree by what was fetched.
func treeID(what string) string {
	sum := sha256.Sum256([]byte(what))
	return hex.EncodeToString(sum[:6])
}

// redactedURL is u without its user information.
func redactedURL(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// unwrapURLError drops the method and URL net/http puts before an error (the
// message names them already).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
