package resolve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
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
	o        remoteOptions
	common   []remote.Option
	table    registryTable
	pullers  sync.Map // page size -> func() (*remote.Puller, error)
	manMemo  sync.Map // digest string -> *Manifest
	blobMemo sync.Map // digest string -> []byte
}

type remoteOptions struct {
	keychain   authn.Keychain
	transport  http.RoundTripper
	insecure   bool
	pageSize   int
	retry      RetryPolicy
	userAgent  string
	jobs       int
	registries []RegistryConfig
	noMemo     bool
	wrap       func(http.RoundTripper) http.RoundTripper
}

// RemoteOption configures a Remote.
type RemoteOption func(*remoteOptions)

// WithKeychain sets where credentials come from (default: the docker config
// keychain, which reads $DOCKER_CONFIG/config.json).
func WithKeychain(k authn.Keychain) RemoteOption { return func(o *remoteOptions) { o.keychain = k } }

// WithTransport sets the base HTTP transport; retries and auth are layered on top.
func WithTransport(t http.RoundTripper) RemoteOption {
	return func(o *remoteOptions) { o.transport = t }
}

// WithInsecure allows plain HTTP and unverified TLS for every registry. Loopback
// registries use plain HTTP without it.
func WithInsecure(insecure bool) RemoteOption {
	return func(o *remoteOptions) { o.insecure = insecure }
}

// WithPageSize sets the tag list page size asked for (0: the registry's default).
func WithPageSize(n int) RemoteOption { return func(o *remoteOptions) { o.pageSize = n } }

// WithRetry sets the retry policy for 429 and 5xx answers.
func WithRetry(p RetryPolicy) RemoteOption { return func(o *remoteOptions) { o.retry = p } }

// WithUserAgent sets the User-Agent sent to registries.
func WithUserAgent(ua string) RemoteOption { return func(o *remoteOptions) { o.userAgent = ua } }

// WithRegistries sets per-registry configuration (endpoint, insecure, page size),
// matched by the longest prefix of each repository.
func WithRegistries(cfgs []RegistryConfig) RemoteOption {
	return func(o *remoteOptions) { o.registries = cfgs }
}

// WithTransportWrapper wraps the HTTP transport below retries and authentication, so
// the wrapper sees every attempt of every request, ping and token requests included:
// the place for rate limits and request metrics.
func WithTransportWrapper(wrap func(http.RoundTripper) http.RoundTripper) RemoteOption {
	return func(o *remoteOptions) { o.wrap = wrap }
}

// WithoutMemo turns off memoising manifests and blobs by digest, for a caller that
// keeps its own bounded cache (the daemon).
func WithoutMemo() RemoteOption { return func(o *remoteOptions) { o.noMemo = true } }

// NewRemote returns a registry client.
func NewRemote(opts ...RemoteOption) (*Remote, error) {
	o := remoteOptions{
		keychain:  authn.DefaultKeychain,
		pageSize:  DefaultPageSize,
		retry:     DefaultRetryPolicy,
		userAgent: "argocd-image-resolver",
		jobs:      8,
	}
	for _, opt := range opts {
		opt(&o)
	}
	r := &Remote{o: o, table: newRegistryTable(o.registries)}
	insecureHosts := map[string]bool{}
	for _, rc := range r.table {
		if rc.Insecure {
			host, _, _ := strings.Cut(rc.Prefix, "/")
			insecureHosts[host] = true
			if rc.API != "" {
				insecureHosts[rc.API] = true
			}
		}
	}
	base := o.transport
	if base == nil {
		base = newBaseTransport(o.insecure, insecureHosts)
	}
	if o.wrap != nil {
		base = o.wrap(base)
	}
	rt := &retryTransport{next: base, policy: o.retry}
	r.common = []remote.Option{
		remote.WithTransport(rt),
		remote.WithAuthFromKeychain(o.keychain),
		remote.WithUserAgent(o.userAgent),
		remote.WithJobs(o.jobs),
		// Our transport retries, honouring Retry-After; ggcr's own retry would not.
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}),
		remote.WithRetryPredicate(func(error) bool { return false }),
		remote.WithRetryStatusCodes(),
	}
	if _, err := r.puller(o.pageSize); err != nil {
		return nil, fmt.Errorf("registry client: %w", err)
	}
	return r, nil
}

// puller returns the shared Puller for a page size (0: none). Pullers keep one
// authenticated transport per repository, so a repository costs one ping and one
// token however many requests follow.
func (r *Remote) puller(pageSize int) (*remote.Puller, error) {
	newPuller := sync.OnceValues(func() (*remote.Puller, error) {
		// ggcr asks for 1000 unless told otherwise; 0 sends no n at all.
		opts := append(append([]remote.Option(nil), r.common...), remote.WithPageSize(pageSize))
		return remote.NewPuller(opts...)
	})
	f, _ := r.pullers.LoadOrStore(pageSize, newPuller)
	return f.(func() (*remote.Puller, error))()
}

// newBaseTransport is the HTTP transport below retries and auth. TLS verification is
// off only for registries configured insecure (or all, with insecureAll).
func newBaseTransport(insecureAll bool, insecureHosts map[string]bool) http.RoundTripper {
	secure := http.DefaultTransport.(*http.Transport).Clone()
	if !insecureAll && len(insecureHosts) == 0 {
		return secure
	}
	insecure := secure.Clone()
	insecure.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // configured explicitly
	if insecureAll {
		return insecure
	}
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if insecureHosts[req.URL.Host] {
			return insecure.RoundTrip(req)
		}
		return secure.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// endpoint maps a repository to where it is read from (its configured API endpoint,
// plain HTTP when insecure) and the page size to ask for.
func (r *Remote) endpoint(repo name.Repository) (name.Repository, int) {
	rc, ok := r.table.lookup(repo)
	pageSize := r.o.pageSize
	if ok && rc.PageSize > 0 {
		pageSize = rc.PageSize
	}
	insecure := r.o.insecure || (ok && rc.Insecure)
	if !ok || (rc.API == "" && !insecure) {
		return repo, pageSize
	}
	host := repo.RegistryStr()
	if rc.API != "" {
		host = rc.API
	}
	opts := []name.Option{name.WeakValidation}
	if insecure {
		opts = append(opts, name.Insecure)
	}
	if mapped, err := name.NewRepository(host+"/"+repo.RepositoryStr(), opts...); err == nil {
		return mapped, pageSize
	}
	return repo, pageSize
}

// ListTags lists every tag, following Link pagination. A registry that rejects the
// page size is asked again without one.
func (r *Remote) ListTags(ctx context.Context, repo name.Repository) ([]string, error) {
	repo, pageSize := r.endpoint(repo)
	p, err := r.puller(pageSize)
	if err != nil {
		return nil, err
	}
	tags, err := p.List(ctx, repo)
	if err != nil && pageSize > 0 && rejectsPageSize(err) {
		if p, err = r.puller(0); err == nil {
			tags, err = p.List(ctx, repo)
		}
	}
	if err != nil {
		return nil, &RegistryError{Op: "list tags", Image: repo.String(), Err: err}
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
	repo, pageSize := r.endpoint(repo)
	p, err := r.puller(pageSize)
	if err != nil {
		return v1.Descriptor{}, err
	}
	d, err := p.Head(ctx, repo.Tag(tag))
	if err != nil {
		return v1.Descriptor{}, &RegistryError{Op: "head manifest", Image: repo.String() + ":" + tag, Err: err}
	}
	return *d, nil
}

// Manifest returns the manifest for a tag or digest, memoised by digest.
func (r *Remote) Manifest(ctx context.Context, repo name.Repository, ref string) (*Manifest, error) {
	repo, pageSize := r.endpoint(repo)
	if m, ok := r.manMemo.Load(ref); ok {
		return m.(*Manifest), nil
	}
	var nref name.Reference
	if h, err := v1.NewHash(ref); err == nil {
		nref = repo.Digest(h.String())
	} else {
		nref = repo.Tag(ref)
	}
	p, err := r.puller(pageSize)
	if err != nil {
		return nil, err
	}
	d, err := p.Get(ctx, nref)
	if err != nil {
		return nil, &RegistryError{Op: "get manifest", Image: nref.String(), Err: err}
	}
	m := &Manifest{Digest: d.Digest, MediaType: d.MediaType, Raw: d.Manifest}
	if !r.o.noMemo {
		r.manMemo.Store(d.Digest.String(), m)
	}
	return m, nil
}

// Blob returns a blob by digest, memoised.
func (r *Remote) Blob(ctx context.Context, repo name.Repository, digest v1.Hash) ([]byte, error) {
	repo, pageSize := r.endpoint(repo)
	if b, ok := r.blobMemo.Load(digest.String()); ok {
		return b.([]byte), nil
	}
	ref := repo.Digest(digest.String())
	b, err := r.readBlob(ctx, ref, pageSize)
	if err != nil {
		return nil, &RegistryError{Op: "get blob", Image: ref.String(), Err: err}
	}
	if !r.o.noMemo {
		r.blobMemo.Store(digest.String(), b)
	}
	return b, nil
}

func (r *Remote) readBlob(ctx context.Context, ref name.Digest, pageSize int) ([]byte, error) {
	p, err := r.puller(pageSize)
	if err != nil {
		return nil, err
	}
	l, err := p.Layer(ctx, ref)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	// Configs are small; the limit guards against a registry sending a layer.
	const maxConfig = 4 << 20
	b, err := io.ReadAll(io.LimitReader(rc, maxConfig+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxConfig {
		return nil, fmt.Errorf("blob larger than %d bytes; not an image config", maxConfig)
	}
	return b, nil
}
