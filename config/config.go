package config

import (
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/render"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Daemon defaults.
const (
	DefaultMetricsAddr = ":8090"
	// ConfigEnv names the daemon's configuration file.
	ConfigEnv = "IMAGE_RESOLVER_CONFIG"
	// DefaultPlatformsEnv names the default platforms.
	DefaultPlatformsEnv = "IMAGE_RESOLVER_DEFAULT_PLATFORMS"
	// ExtraImagePathsEnv names the extra image fields.
	ExtraImagePathsEnv = "IMAGE_RESOLVER_EXTRA_IMAGE_PATHS"
	// KustomizeRemoteHostsEnv names the hosts Kustomize renders may fetch from.
	KustomizeRemoteHostsEnv = "IMAGE_RESOLVER_KUSTOMIZE_REMOTE_HOSTS"
	// RegistriesConfigEnv names the registries configuration file (as for every
	// other command).
	RegistriesConfigEnv = "IMAGE_RESOLVER_REGISTRIES_CONFIG"
	// maxSocketPath is the longest unix socket path Linux accepts (sun_path is 108
	// bytes with the terminating NUL).
	maxSocketPath = 107
)

// DefaultRateLimits apply to the registries no configured limit names (neither
// rateLimits nor a registries entry's rateLimit): the registries that publish
// limits per client get a polite rate (Docker Hub counts manifest GETs against a
// pull allowance per 6 hours; Amazon ECR Public allows 1 anonymous pull a
// second); every other registry is bounded only by the adaptive governor of
// requests in flight (registryConcurrency), which backs off when it answers 429 or
// is overloaded. docs/registries.md explains each.
var DefaultRateLimits = []resolve.RateLimit{
	{Registry: "docker.io", RPS: 10, Burst: 20},
	{Registry: "public.ecr.aws", RPS: 1, Burst: 5},
}

// Config is the daemon's configuration. It is read, in increasing precedence, from
// its defaults, an optional YAML file, environment variables and flags (see
// Settings), and checked by Validate.
type Config struct {
	Socket      string // unix socket of the resolution API
	MetricsAddr string // HOST:PORT of /metrics, /healthz, /readyz; "" turns it off
	// WebhookAddr is HOST:PORT of the registry webhooks (/webhooks/<kind>); ""
	// (the default) turns them off. Webhooks are their secrets, by kind.
	WebhookAddr string
	Webhooks    Webhooks

	TagTTL       time.Duration // how long a tag list is fresh
	HeadTTL      time.Duration // how long a tag->digest answer is fresh
	StaleIfError time.Duration // how long past its TTL an entry may serve when the registry fails
	RefreshAhead float64       // last fraction of a TTL in which a read refreshes in the background

	ManifestCacheSize int64 // bytes of manifests kept by digest
	BlobCacheSize     int64 // bytes of image configs kept by digest

	RateLimits          []resolve.RateLimit // per registry host, "*" for the rest
	RegistryConcurrency int                 // requests in flight per registry (0: no bound)
	FetchTimeout        time.Duration
	// ClockSkew is how much later than its push time (as a registry's metadata
	// API reports it) an image's build time may be (resolve.WithClockSkew).
	ClockSkew time.Duration

	// Registries is the per-registry client configuration (endpoint, insecure, page
	// size, credentials, apps), the top-level registries: of the file or the
	// registries config file.
	Registries []resolve.RegistryConfig

	// DefaultPlatforms are required of an image whose policy and workload name none.
	DefaultPlatforms []resolve.Platform
	// ExtraImagePaths are image fields of custom resources, beside the built-in kinds.
	ExtraImagePaths []render.ExtraPath
	// KustomizeRemoteHosts are the hosts Kustomize remote resources and bases may
	// be fetched from; none (the default): every remote entry is refused.
	KustomizeRemoteHosts []render.RemoteHost

	// Refresh is what the refresh loop does when an app's resolution changes:
	// RefreshHard (ask Argo CD for a hard refresh) or RefreshOff.
	Refresh string
	// RefreshInterval is the least time between two refreshes of one app.
	RefreshInterval time.Duration
	// ControlPlaneNamespace is the namespace of Applications whose name Argo CD
	// passes without a namespace (argocd-server's own).
	ControlPlaneNamespace string
	// ForgetAfter is how long an app not rendered again stays tracked.
	ForgetAfter time.Duration
	// MaxTrackedApps bounds the apps tracked; the least recently rendered go first.
	MaxTrackedApps int

	// Git is how pins are committed (pin-mode write and use).
	Git GitConfig

	// Redis is the registry view shared by the daemons of several replicas
	// (config/redis.go); no address: none.
	Redis RedisConfig

	// Trust is how signatures are checked (config/trust.go): the operator's named
	// public keys, the Sigstore trusted root, and the bounds of verification.
	Trust TrustConfig

	// RenderTimeout bounds one render (policy, sources, resolution, rewrite), below
	// Argo CD's 90s exec timeout for a plugin, so that a render that cannot finish
	// says why instead of being killed.
	RenderTimeout time.Duration
	// RenderWorkers is how many child processes render for the daemon at once; a
	// render past its deadline, past RenderWorkerMemory or whose caller left is
	// stopped by killing its worker (a Helm template cannot be stopped otherwise).
	RenderWorkers      int
	RenderWorkerMemory int64
	// MemoryBudget is the memory of the daemon and its workers together (0: the
	// container's, found at start: GOMEMLIMIT, else the cgroup limit). DaemonMemory
	// is the daemon's share; renders are admitted against the rest, RenderQueue
	// of them waiting at most.
	MemoryBudget int64
	DaemonMemory int64
	RenderQueue  int

	// Bounds of registry answers: tag list pages, tags and bytes per page (after
	// decompression), and per request the time to the response header and overall.
	TagListMaxPages      int
	TagListMaxTags       int
	TagListMaxPageSize   int64
	RequestHeaderTimeout time.Duration
	RequestTimeout       time.Duration

	// TagFilterMaxCost bounds the estimated cost of matching a policy's
	// allow-tags/ignore-tags over a tag list (resolve.WithTagFilterMaxCost).
	TagFilterMaxCost int
}

// DefaultRenderTimeout leaves the in-process fallback and Argo CD's own work room
// within its 90s plugin exec timeout.
const DefaultRenderTimeout = 45 * time.Second

// DefaultRenderWorkers is how many renders the daemon runs at once, each in a
// worker process of its own.
const DefaultRenderWorkers = 3

// Values of Refresh.
const (
	RefreshHard = "hard"
	RefreshOff  = "off"
)

// Refresh loop defaults: Argo CD keeps rendered manifests 24h, so an app it has not
// rendered for 24h+1h has left the cache or is gone.
const (
	DefaultRefreshInterval       = 3 * time.Minute
	DefaultControlPlaneNamespace = "argocd"
	DefaultForgetAfter           = 25 * time.Hour
	DefaultMaxTrackedApps        = 10000
)

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Socket:              api.DefaultSocket,
		MetricsAddr:         DefaultMetricsAddr,
		ClockSkew:           resolve.DefaultClockSkew,
		TagTTL:              cache.DefaultTagTTL,
		HeadTTL:             cache.DefaultHeadTTL,
		StaleIfError:        cache.DefaultStaleIfError,
		RefreshAhead:        cache.DefaultRefreshAhead,
		ManifestCacheSize:   cache.DefaultManifestCacheSize,
		BlobCacheSize:       cache.DefaultBlobCacheSize,
		RateLimits:          nil, // DefaultRateLimits apply to the registries no limit names (EffectiveRateLimits)
		RegistryConcurrency: resolve.DefaultRegistryConcurrency,
		FetchTimeout:        cache.DefaultFetchTimeout,

		Refresh:               RefreshHard,
		RefreshInterval:       DefaultRefreshInterval,
		ControlPlaneNamespace: DefaultControlPlaneNamespace,
		ForgetAfter:           DefaultForgetAfter,
		MaxTrackedApps:        DefaultMaxTrackedApps,
		RenderTimeout:         DefaultRenderTimeout,
		Redis:                 DefaultRedisConfig(),
		Trust:                 DefaultTrustConfig(),
		Git:                   GitConfig{MaxRepositoryBytes: pin.DefaultMaxRepositoryBytes},
		RenderWorkers:         DefaultRenderWorkers,
		RenderWorkerMemory:    DefaultRenderWorkerMemory,
		DaemonMemory:          DefaultDaemonMemory,
		RenderQueue:           DefaultRenderQueue,
		TagListMaxPages:       resolve.DefaultMaxTagPages,
		TagListMaxTags:        resolve.DefaultMaxTags,
		TagListMaxPageSize:    resolve.DefaultMaxTagPageBytes,
		RequestHeaderTimeout:  resolve.DefaultResponseHeaderTimeout,
		RequestTimeout:        resolve.DefaultRequestTimeout,
		TagFilterMaxCost:      resolve.DefaultTagFilterMaxCost,
	}
}
