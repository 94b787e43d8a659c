package resolve

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// DefaultPageSize is the tag page size asked for; ECR's maximum. Registries that
// reject it are asked again without a page size.
const DefaultPageSize = 1000

// Remote reads registries over HTTP with go-containerregistry. It keeps one Puller
// (so one ping and one token per repository, not one per request), memoises
// manifests and blobs by digest (content addressed, so never stale), and retries 429
// and 5xx answers honouring Retry-After.
type Remote struct {
	o      remoteOptions
	common []remote.Option
	table  registryTable
	// creds is o.keychain when it knows configured credential sources.
	creds CredentialKeychain
	// clients holds, by clientKey, the *repoClient of every repository read:
	// its authenticated transport and Puller (fetch.go). Every request looks
	// its client up: a map of its own type, whose keys hash as strings do, not
	// a sync.Map, whose interface keys of structs of strings hash by walking
	// their types (with endpoints', 0.8% of a cold resolution's client CPU).
	clientsMu sync.RWMutex
	clients   map[clientKey]*repoClient
	// jobs holds, by pullerKey, the bound of blob reads in flight (WithJobs).
	jobs sync.Map
	// endpoints memoises endpoint by repository: the registries table is
	// fixed, and every request would otherwise look it up again.
	endpointsMu sync.RWMutex
	endpoints   map[name.Repository]target
	genMu       sync.Mutex
	gens        map[string]uint64 // entry prefix -> credential generation
	manMemo     memo[*Manifest]   // by digest string
	blobMemo    memo[[]byte]      // by digest string
	// rt carries every request: bounds, limiter, credential redaction, retries.
	rt http.RoundTripper
	// ua is rt with go-containerregistry's User-Agent, what the repositories'
	// authenticated transports are built on.
	ua http.RoundTripper
}

// Transport is the transport the Remote's requests go through (the limiter, the
// bounds of one answer, retries honouring Retry-After, credential redaction):
// for a registry's metadata API client, so that its requests are governed and
// counted as the registry's are.
func (r *Remote) Transport() http.RoundTripper { return r.rt }

// Keychain is the credentials keychain of the Remote (the registries entries'
// credential sources).
func (r *Remote) Keychain() authn.Keychain { return r.o.keychain }

// pullerKey selects the clients of repositories (clientKey): one per page size,
// registry entry and credential generation, so that a rejected credential is
// fetched again with fresh authenticated transports for that entry only.
type pullerKey struct {
	pageSize int
	entry    string
	gen      uint64
}

// NewRemote returns a registry client.
func NewRemote(opts ...RemoteOption) (*Remote, error) {
	o := remoteOptions{
		keychain:  authn.DefaultKeychain,
		pageSize:  DefaultPageSize,
		retry:     DefaultRetryPolicy,
		userAgent: "argocd-image-resolver",
		jobs:      8,

		maxPages:     DefaultMaxTagPages,
		maxTags:      DefaultMaxTags,
		maxPageBytes: DefaultMaxTagPageBytes,

		maxReferrersBytes: DefaultMaxSignatureBytes,
		headerTimeout:     DefaultResponseHeaderTimeout,
		requestTimeout:    DefaultRequestTimeout,
	}
	for _, opt := range opts {
		opt(&o)
	}
	r := &Remote{o: o, table: newRegistryTable(o.registries), gens: map[string]uint64{},
		clients: map[clientKey]*repoClient{}, endpoints: map[name.Repository]target{}}
	r.creds, _ = o.keychain.(CredentialKeychain)
	insecureHosts := map[string]bool{}
	caHosts := map[string]*x509.CertPool{}
	for _, rc := range r.table {
		hosts := []string{rc.Host()}
		if rc.Host() == "docker.io" {
			hosts = append(hosts, name.DefaultRegistry, "registry-1.docker.io")
		}
		if rc.API != "" {
			hosts = append(hosts, rc.API)
		}
		if rc.Insecure {
			for _, h := range hosts {
				insecureHosts[h] = true
			}
		}
		if rc.CA != "" {
			certs, err := LoadCAFile(rc.CA)
			if err != nil {
				return nil, fmt.Errorf("registry client: ca of %s: %s: %w", rc.Prefix, rc.CA, err)
			}
			for _, h := range hosts {
				pool := caHosts[h]
				if pool == nil {
					if pool, err = x509.SystemCertPool(); err != nil {
						pool = x509.NewCertPool()
					}
					caHosts[h] = pool
				}
				for _, c := range certs {
					pool.AddCert(c)
				}
			}
		}
	}
	base := o.transport
	if base == nil {
		base = newBaseTransport(o.insecure, insecureHosts, caHosts, o.jobs)
	}
	if o.wrap != nil {
		base = o.wrap(base)
	}
	// Every credential sent (Basic, and the Bearer tokens registries hand out) is
	// registered, so that registry text quoting it is redacted before it is shown.
	base = DefaultRedactor.Transport(base)
	// Bounds below retries: each attempt has its own timeouts and page cap.
	base = &boundedTransport{next: base, header: o.headerTimeout, overall: o.requestTimeout, maxPageBytes: o.maxPageBytes,
		maxReferrersBytes: o.maxReferrersBytes}
	rt := &retryTransport{next: base, policy: o.retry}
	r.rt = rt
	// The User-Agent go-containerregistry would put on rt (WithUserAgent): the
	// handshake of each repository's transport keeps it (fetch.go).
	r.ua = transport.NewUserAgent(rt, o.userAgent)
	// The Pullers are given a repository's authenticated transport, a
	// *transport.Wrapper: go-containerregistry adds no retry of its own to it (our
	// transport retries, honouring Retry-After).
	r.common = []remote.Option{
		remote.WithJobs(o.jobs),
		// Referrers (referrers.go) tells a registry without the referrers API
		// apart; the caller reads the fallback tag itself.
		remote.WithReferrersTagFallback(false),
	}
	// The options are checked as go-containerregistry checks them.
	if _, err := remote.NewPuller(append(append([]remote.Option(nil), r.common...),
		remote.WithTransport(rt), remote.WithAuthFromKeychain(originKeychain{r}), remote.WithUserAgent(o.userAgent),
		remote.WithPageSize(o.pageSize))...); err != nil {
		return nil, fmt.Errorf("registry client: %w", err)
	}
	return r, nil
}

// generation returns the credential generation of a registry entry.
func (r *Remote) generation(entry string) uint64 {
	r.genMu.Lock()
	defer r.genMu.Unlock()
	return r.gens[entry]
}

// renew makes the credential of origin's entry be fetched again and drops the
// entry's authenticated transports, once per generation however many requests
// saw the rejection.
func (r *Remote) renew(origin name.Repository, entry string, gen uint64) {
	r.genMu.Lock()
	defer r.genMu.Unlock()
	if r.gens[entry] != gen {
		return
	}
	r.gens[entry] = gen + 1
	r.creds.Invalidate(origin)
	r.clientsMu.Lock()
	for k := range r.clients {
		if k.entry == entry && k.gen == gen {
			delete(r.clients, k)
		}
	}
	r.clientsMu.Unlock()
	r.jobs.Range(func(k, _ any) bool {
		if pk := k.(pullerKey); pk.entry == entry && pk.gen == gen {
			r.jobs.Delete(k)
		}
		return true
	})
}

// call runs f with the Puller of t's repository for t's entry (see do).
func (r *Remote) call(ctx context.Context, origin name.Repository, t target, pageSize int, f func(context.Context, *remote.Puller) error) error {
	return r.do(ctx, origin, t, pageSize, func(ctx context.Context, c *repoClient) error { return f(ctx, c.puller) })
}

// do runs f with the client of t's repository for t's entry; a repository costs
// one ping and one token however many requests follow. When the registry
// rejects a configured credential (401/403), the credential is fetched once more
// and f run once more; a second rejection is an *AuthError naming the registry
// and the credential source.
func (r *Remote) do(ctx context.Context, origin name.Repository, t target, pageSize int, f func(context.Context, *repoClient) error) error {
	gen := r.generation(t.entry)
	c, err := r.client(ctx, origin, clientKey{t.repo, pullerKey{pageSize, t.entry, gen}})
	if err == nil {
		err = f(ctx, c)
	}
	if err == nil || !IsAuthFailure(err) || r.creds == nil {
		return err
	}
	src := r.creds.CredentialSource(origin)
	if src == "" {
		return err
	}
	r.renew(origin, t.entry, gen)
	if c, err = r.client(ctx, origin, clientKey{t.repo, pullerKey{pageSize, t.entry, r.generation(t.entry)}}); err == nil {
		err = f(ctx, c)
	}
	if IsAuthFailure(err) {
		reg := t.entry
		if reg == "" {
			reg = origin.RegistryStr()
		}
		return &AuthError{Registry: reg, Source: src, Err: err,
			Reason: "the registry refused the credential, also when fetched once more"}
	}
	return err
}

// target is where a repository is read from.
type target struct {
	repo     name.Repository // the endpoint: API host, default namespace, insecure applied
	pageSize int
	entry    string // prefix of the matching registry entry, "" for none
}

// registryError is a failure to read image, of the repository written, from t. It
// names t's address when that is another registry's: the errors below name only
// the address, which is in no manifest.
func (t target) registryError(op string, written name.Repository, image string, err error) *RegistryError {
	re := &RegistryError{Op: op, Image: image, Err: err}
	if t.repo.RegistryStr() != written.RegistryStr() {
		re.Via = t.repo.RegistryStr()
	}
	return re
}

// endpoint maps a repository to where it is read from (its configured API endpoint,
// plain HTTP when insecure, the default namespace before a one-component name) and
// the page size to ask for. The answer depends on the repository alone (the table
// is fixed): it is worked out once per repository.
func (r *Remote) endpoint(repo name.Repository) target {
	r.endpointsMu.RLock()
	t, ok := r.endpoints[repo]
	r.endpointsMu.RUnlock()
	if ok {
		return t
	}
	t = r.lookupEndpoint(repo)
	r.endpointsMu.Lock()
	r.endpoints[repo] = t
	r.endpointsMu.Unlock()
	return t
}

func (r *Remote) lookupEndpoint(repo name.Repository) target {
	rc, ok := r.table.lookup(repo)
	t := target{repo: repo, pageSize: r.o.pageSize, entry: rc.Prefix}
	if ok && rc.PageSize > 0 {
		t.pageSize = rc.PageSize
	}
	insecure := r.o.insecure || (ok && rc.Insecure)
	path := repo.RepositoryStr()
	if ok && rc.DefaultNamespace != "" && !strings.Contains(path, "/") {
		path = rc.DefaultNamespace + "/" + path
	}
	if !ok || (rc.API == "" && !insecure && path == repo.RepositoryStr()) {
		return t
	}
	host := repo.RegistryStr()
	if rc.API != "" {
		host = rc.API
	}
	opts := []name.Option{name.WeakValidation}
	if insecure {
		opts = append(opts, name.Insecure)
	}
	if mapped, err := name.NewRepository(host+"/"+path, opts...); err == nil {
		t.repo = mapped
	}
	return t
}

// ListTags lists every tag, following Link pagination. A registry that rejects the
// page size is asked again without one. The list is bounded (WithTagListLimits):
// over a cap on pages, tags or bytes per page, or at a Link back to a page already
// read, it fails with a *TagListLimitError and returns no tags.
func (r *Remote) ListTags(ctx context.Context, repo name.Repository) ([]string, error) {
	t := r.endpoint(repo)
	var tags []string
	list := func(pageSize int) func(context.Context, *remote.Puller) error {
		return func(ctx context.Context, p *remote.Puller) (err error) {
			tags, err = r.listPages(ctx, p, repo, t.repo, pageSize)
			return err
		}
	}
	err := r.call(ctx, repo, t, t.pageSize, list(t.pageSize))
	if err != nil && t.pageSize > 0 && rejectsPageSize(err) {
		err = r.call(ctx, repo, t, 0, list(0))
	}
	if err != nil {
		return nil, t.registryError("list tags", repo, repo.String(), err)
	}
	return tags, nil
}

// listPages reads the pages of ep's tag list (written is the repository as
// written, for errors), within the caps.
func (r *Remote) listPages(ctx context.Context, p *remote.Puller, written, ep name.Repository, pageSize int) ([]string, error) {
	limitErr := func(limit string, max int64, link string) error {
		return &TagListLimitError{Registry: written.RegistryStr(), Repository: written.RepositoryStr(),
			Limit: limit, Max: max, Link: link}
	}
	pageErr := func(err error) error {
		var pb *pageBytesError
		if errors.As(err, &pb) {
			return limitErr("bytes per page", pb.max, "")
		}
		return err
	}
	// The first page's URL as ggcr builds it, so that a Link back to it is seen.
	first := &url.URL{Scheme: ep.Scheme(), Host: ep.RegistryStr(), Path: fmt.Sprintf("/v2/%s/tags/list", ep.RepositoryStr())}
	if pageSize > 0 {
		first.RawQuery = fmt.Sprintf("n=%d", pageSize)
	}
	seen := map[string]bool{pageKey(first): true}
	l, err := p.Lister(ctx, ep)
	if err != nil {
		return nil, pageErr(err)
	}
	var tags []string
	for pages := 0; l.HasNext(); {
		page, err := l.Next(ctx)
		if err != nil {
			return nil, pageErr(err)
		}
		if pages++; pages > r.o.maxPages {
			return nil, limitErr("pages", int64(r.o.maxPages), "")
		}
		if len(tags)+len(page.Tags) > r.o.maxTags {
			return nil, limitErr("tags", int64(r.o.maxTags), "")
		}
		tags = append(tags, page.Tags...)
		if f := tagPagesOf(ctx); f != nil {
			f(page.Tags) // a resolution may start reading metadata before the last page
		}
		if page.Next == "" {
			break
		}
		next, err := url.Parse(page.Next)
		if err != nil {
			return nil, err
		}
		k := pageKey(next)
		if seen[k] {
			return nil, limitErr("link loop", 0, next.RequestURI())
		}
		seen[k] = true
		if pages == r.o.maxPages {
			// Another page follows: over the cap without reading it.
			return nil, limitErr("pages", int64(r.o.maxPages), "")
		}
	}
	return tags, nil
}

// rejectsPageSize reports whether a tag list failed because of the n parameter
// (distribution answers 400 PAGINATION_NUMBER_INVALID; others a bare 400).
func rejectsPageSize(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusBadRequest
}

// Head returns the descriptor a tag points at.
func (r *Remote) Head(ctx context.Context, repo name.Repository, tag string) (v1.Descriptor, error) {
	t := r.endpoint(repo)
	var d *v1.Descriptor
	err := r.call(ctx, repo, t, t.pageSize, func(ctx context.Context, p *remote.Puller) (err error) {
		d, err = p.Head(ctx, t.repo.Tag(tag))
		return err
	})
	if err != nil {
		return v1.Descriptor{}, t.registryError("head manifest", repo, repo.Tag(tag).String(), err)
	}
	return *d, nil
}

// Manifest returns the manifest for a tag or digest, memoised by digest.
func (r *Remote) Manifest(ctx context.Context, repo name.Repository, ref string) (*Manifest, error) {
	if m, ok := r.manMemo.load(ref); ok {
		return m, nil
	}
	t := r.endpoint(repo)
	// A tag has no colon: v1.NewHash fails on it (allocating its error).
	byDigest := false
	if strings.IndexByte(ref, ':') >= 0 {
		_, err := v1.NewHash(ref)
		byDigest = err == nil // a valid hash is spelt as its String
	}
	var m *Manifest
	err := r.do(ctx, repo, t, t.pageSize, func(ctx context.Context, c *repoClient) error {
		raw, digest, mediaType, err := c.fetchManifest(ctx, ref, byDigest)
		if err == nil {
			m = &Manifest{Digest: digest, MediaType: mediaType, Raw: raw}
		}
		return err
	})
	if err != nil {
		var written name.Reference = repo.Tag(ref)
		if byDigest {
			written = repo.Digest(ref)
		}
		return nil, t.registryError("get manifest", repo, written.String(), err)
	}
	if !r.o.noMemo {
		r.manMemo.store(hashString(m.Digest), m)
	}
	return m, nil
}

// memo holds what was read by digest (content addressed, so never stale): a
// map of its own type, not a sync.Map, which boxed each key and allocated a
// node per entry (a cold resolution stores two manifests and a config per tag).
type memo[V any] struct {
	mu sync.RWMutex
	m  map[string]V
}

func (c *memo[V]) load(k string) (V, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *memo[V]) store(k string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]V{}
	}
	c.m[k] = v
}

// hashString is h.String() (algorithm:hex) without fmt.Sprintf's boxing.
func hashString(h v1.Hash) string { return h.Algorithm + ":" + h.Hex }

// maxConfigBytes bounds a blob read: configs are small; the limit guards against
// a registry sending a layer.
const maxConfigBytes = 4 << 20

// Blob returns a blob by digest, memoised.
func (r *Remote) Blob(ctx context.Context, repo name.Repository, digest v1.Hash) ([]byte, error) {
	key := hashString(digest)
	if b, ok := r.blobMemo.load(key); ok {
		return b, nil
	}
	t := r.endpoint(repo)
	var b []byte
	err := r.do(ctx, repo, t, t.pageSize, func(ctx context.Context, c *repoClient) (err error) {
		b, err = c.fetchBlob(ctx, key, maxConfigBytes)
		return err
	})
	if err != nil {
		return nil, t.registryError("get blob", repo, repo.Digest(key).String(), err)
	}
	if !r.o.noMemo {
		r.blobMemo.store(key, b)
	}
	return b, nil
}
