package resolve

import (
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
)

// remoteOptions are what RemoteOptions set before NewRemote builds the client.
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

	maxPages     int
	maxTags      int
	maxPageBytes int64
	// maxReferrersBytes caps a referrers list (WithSignatureLimits, referrers.go).
	maxReferrersBytes int64
	headerTimeout     time.Duration
	requestTimeout    time.Duration
}

// RemoteOption configures a Remote.
type RemoteOption func(*remoteOptions)

// WithKeychain sets where credentials come from (default: the docker config
// keychain, which reads $DOCKER_CONFIG/config.json). A keychain that also
// implements CredentialKeychain (resolve/credentials) is asked for the repository
// as written, not for its API endpoint, and a credential the registry rejects
// (401/403) is fetched once more and the request retried once.
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

// WithJobs sets how many requests go-containerregistry runs at once where it
// parallelises itself (default 8): give it the registry's concurrency bound, so one
// number governs requests in flight.
func WithJobs(n int) RemoteOption { return func(o *remoteOptions) { o.jobs = max(n, 1) } }

// WithoutMemo turns off memoising manifests and blobs by digest, for a caller that
// keeps its own bounded cache (the daemon).
func WithoutMemo() RemoteOption { return func(o *remoteOptions) { o.noMemo = true } }
