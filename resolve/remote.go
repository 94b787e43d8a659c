package resolve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
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
	o       remoteOptions
	puller  *remote.Puller
	noPage  func() (*remote.Puller, error) // puller without a page size, made on first need
	manMemo sync.Map                       // digest string -> *Manifest
	blobMem sync.Map                       // digest string -> []byte
}

type remoteOptions struct {
	keychain  authn.Keychain
	transport http.RoundTripper
	insecure  bool
	pageSize  int
	retry     RetryPolicy
	userAgent string
	jobs      int
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
	base := o.transport
	if base == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		if o.insecure {
			t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for explicitly
		}
		base = t
	}
	rt := &retryTransport{next: base, policy: o.retry}
	common := []remote.Option{
		remote.WithTransport(rt),
		remote.WithAuthFromKeychain(o.keychain),
		remote.WithUserAgent(o.userAgent),
		remote.WithJobs(o.jobs),
		// Our transport retries, honouring Retry-After; ggcr's own retry would not.
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}),
		remote.WithRetryPredicate(func(error) bool { return false }),
		remote.WithRetryStatusCodes(),
	}
	p, err := remote.NewPuller(append(common, remote.WithPageSize(o.pageSize))...)
	if err != nil {
		return nil, fmt.Errorf("registry client: %w", err)
	}
	r := &Remote{o: o, puller: p}
	r.noPage = sync.OnceValues(func() (*remote.Puller, error) { return remote.NewPuller(common...) })
	return r, nil
}

func (r *Remote) repo(repo name.Repository) name.Repository {
	if !r.o.insecure {
		return repo
	}
	if ins, err := name.NewRepository(repo.Name(), name.Insecure, name.WeakValidation); err == nil {
		return ins
	}
	return repo
}

// ListTags lists every tag, following Link pagination. A registry that rejects the
// page size is asked again without one.
func (r *Remote) ListTags(ctx context.Context, repo name.Repository) ([]string, error) {
	repo = r.repo(repo)
	tags, err := r.puller.List(ctx, repo)
	if err != nil && r.o.pageSize > 0 && rejectsPageSize(err) {
		var p *remote.Puller
		if p, err = r.noPage(); err == nil {
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
	repo = r.repo(repo)
	d, err := r.puller.Head(ctx, repo.Tag(tag))
	if err != nil {
		return v1.Descriptor{}, &RegistryError{Op: "head manifest", Image: repo.String() + ":" + tag, Err: err}
	}
	return *d, nil
}

// Manifest returns the manifest for a tag or digest, memoised by digest.
func (r *Remote) Manifest(ctx context.Context, repo name.Repository, ref string) (*Manifest, error) {
	repo = r.repo(repo)
	if m, ok := r.manMemo.Load(ref); ok {
		return m.(*Manifest), nil
	}
	var nref name.Reference
	if h, err := v1.NewHash(ref); err == nil {
		nref = repo.Digest(h.String())
	} else {
		nref = repo.Tag(ref)
	}
	d, err := r.puller.Get(ctx, nref)
	if err != nil {
		return nil, &RegistryError{Op: "get manifest", Image: nref.String(), Err: err}
	}
	m := &Manifest{Digest: d.Digest, MediaType: d.MediaType, Raw: d.Manifest}
	r.manMemo.Store(d.Digest.String(), m)
	return m, nil
}

// Blob returns a blob by digest, memoised.
func (r *Remote) Blob(ctx context.Context, repo name.Repository, digest v1.Hash) ([]byte, error) {
	repo = r.repo(repo)
	if b, ok := r.blobMem.Load(digest.String()); ok {
		return b.([]byte), nil
	}
	ref := repo.Digest(digest.String())
	b, err := r.readBlob(ctx, ref)
	if err != nil {
		return nil, &RegistryError{Op: "get blob", Image: ref.String(), Err: err}
	}
	r.blobMem.Store(digest.String(), b)
	return b, nil
}

func (r *Remote) readBlob(ctx context.Context, ref name.Digest) ([]byte, error) {
	l, err := r.puller.Layer(ctx, ref)
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
