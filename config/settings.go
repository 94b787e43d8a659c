package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/render"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Setting is one configuration value and its three spellings.
type Setting struct {
	Key   string // YAML key
	Env   string // environment variable
	Flag  string // command-line flag, without dashes
	Usage string
	// Type names the flag's value in help: duration, bytes, int, fraction, string,
	// platforms, paths.
	Type string
	// Sep joins the items of a list-valued setting given as a YAML array
	// (defaultPlatforms, extraImagePaths, kustomizeRemoteHosts); empty for scalar settings.
	Sep string
	// List settings (rateLimits) take comma-separated items in the environment and a
	// repeatable flag.
	List bool

	set func(c *Config, v string) error
	get func(c *Config) string
}

const (
	durationAccepted   = "a Go duration such as 90s, 2m or 1h30m"
	sizeAccepted       = "bytes, as an integer or with a unit: 512KiB, 64MiB, 1GiB (also KB, MB, GB; Ki, Mi, Gi)"
	platformsAccepted  = "os/arch[/variant], comma-separated, e.g. linux/amd64,linux/arm64"
	extraPathsAccepted = `Kind[.group]:path entries separated by ";", e.g. Workflow.argoproj.io:spec.templates[].container.image`
	rateAccepted       = `PREFIX=RPS[:BURST], PREFIX a registry host[:port] with an optional /path, e.g. docker.io=2:10, ghcr.io/org=5 or *=100:200 ("*": each registry no entry names)`
)

func durationSetting(key, env, flag, usage string, field func(*Config) *time.Duration, min time.Duration) Setting {
	return Setting{Key: key, Env: env, Flag: flag, Usage: usage, Type: "duration",
		set: func(c *Config, v string) error {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return &resolve.InputError{Value: v, Accepted: durationAccepted}
			}
			if d < min {
				acc := durationAccepted + ", at least " + min.String()
				if min == 0 {
					acc = durationAccepted + ", not negative"
				}
				return &resolve.InputError{Value: v, Accepted: acc}
			}
			*field(c) = d
			return nil
		},
		get: func(c *Config) string { return formatDuration(*field(c)) },
	}
}

func intSetting(key, env, flag, usage string, field func(*Config) *int) Setting {
	return Setting{Key: key, Env: env, Flag: flag, Usage: usage, Type: "int",
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 1 {
				return &resolve.InputError{Value: v, Accepted: "a whole number, at least 1"}
			}
			*field(c) = n
			return nil
		},
		get: func(c *Config) string { return strconv.Itoa(*field(c)) },
	}
}

func boolSetting(key, env, flag, usage string, field func(*Config) *bool) Setting {
	return Setting{Key: key, Env: env, Flag: flag, Usage: usage, Type: "bool",
		set: func(c *Config, v string) error {
			b, err := strconv.ParseBool(strings.TrimSpace(v))
			if err != nil {
				return &resolve.InputError{Value: v, Accepted: "true or false"}
			}
			*field(c) = b
			return nil
		},
		get: func(c *Config) string { return strconv.FormatBool(*field(c)) },
	}
}

func sizeSetting(key, env, flag, usage string, field func(*Config) *int64) Setting {
	return Setting{Key: key, Env: env, Flag: flag, Usage: usage, Type: "bytes",
		set: func(c *Config, v string) error {
			n, err := ParseSize(v)
			if err != nil {
				return err
			}
			if n < 1<<20 {
				return &resolve.InputError{Value: v, Accepted: sizeAccepted + ", at least 1MiB"}
			}
			*field(c) = n
			return nil
		},
		get: func(c *Config) string { return FormatSize(*field(c)) },
	}
}

// formatDuration writes 2m rather than 2m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ExampleFile is a configuration file with every key at its default, and examples
// of rate limits and registries.
const ExampleFile = `socket: /tmp/image-resolver/daemon.sock
metricsAddr: ":8090"
tagTTL: 2m
headTTL: 1h
staleIfError: 24h
refreshAhead: 20%
manifestCacheSize: 32MiB
blobCacheSize: 32MiB
registryConcurrency: 64                # requests in flight per registry at most; adaptive below it (halved on 429 or overload)
fetchTimeout: 2m
rateLimits:            # each entry sets its registry's limit; "*" the others' (default: docker.io 10:20, public.ecr.aws 1:5, no other)
  - {registry: docker.io, rps: 2, burst: 10}
  - {registry: "*", rps: 100, burst: 200}
registries:            # as in the registries config file
  - {prefix: ghcr.io/org, api: mirror.internal:5000}
defaultPlatforms: [linux/amd64]        # when neither policy nor workload names platforms (default: none)
extraImagePaths:                       # image fields of custom resources (default: none)
  - Workflow.argoproj.io:spec.templates[].container.image
kustomizeRemoteHosts: [github.com]     # hosts Kustomize remote resources and bases may come from (default: none, all refused)
renderTimeout: 45s                     # bound on one render (Argo CD kills a plugin after 90s)
renderWorkers: 3                       # daemon renders at once, each in a worker process stopped at the deadline
renderWorkerMemory: 256MiB             # a render's worker above this memory is stopped
memoryBudget: auto                     # daemon and workers together; auto: GOMEMLIMIT, else the cgroup limit
daemonMemory: 256MiB                   # the daemon's own share; renders are admitted against the rest
renderQueue: 16                        # renders waiting for memory at most; past it refused at once
tagListMaxPages: 1000                  # bounds of registry answers: a cap fails the resolution, naming it
tagListMaxTags: 500000
tagListMaxPageSize: 4MiB
tagFilterMaxCost: 250000000            # allow-tags/ignore-tags size x bytes of the tags, at most (about 3s of a core)
requestHeaderTimeout: 30s
requestTimeout: 1m
refresh: hard                          # when an app's resolution changes: hard (ask Argo CD to render it again) or off
refreshInterval: 3m                    # at most one refresh per app in this time
controlPlaneNamespace: argocd          # namespace of Applications named without one
forgetAfter: 25h                       # apps not rendered for this long are no longer watched
maxTrackedApps: 10000                  # apps watched at most (least recently rendered forgotten first)
git:                                   # how pins are committed (apps with pin-mode write or use)
  author: "argocd-image-resolver <argocd-image-resolver@localhost>"
  batchWindow: 2s                      # changes for one repository and branch within this time: one commit
  maxRepositoryBytes: 256MiB           # fetched and held of one repository at most; past it its pins are refused, naming it
  credentials:                         # HTTPS, longest prefix wins; other repositories are tried without
    - {prefix: "https://git.example.com/org/", username: bot, passwordFile: /etc/argocd-image-resolver/git-token}
redis:                                 # the registry view shared by several replicas (docs/redis.md)
  address: ""                          # e.g. argocd-redis:6379; "" (default): no shared tier
  keyPrefix: "argocd-image-resolver:"
  dialTimeout: 200ms                   # past these the daemon goes on without Redis until it answers
  timeout: 200ms
  contentTTL: 24h                      # manifests and configs by digest
  macKeyFile: ""                       # key (32+ bytes, a mounted Secret) authenticating values; "" (default): not authenticated
  decodeMemory: 64MiB                  # bytes of values being decompressed at once
  maxReply: 64MiB                      # bytes of one reply; a larger one is refused before it is read
trust:                                 # signatures: policies' verify, registries entries' requireSignature
  keys: {}                             # public keys by name, e.g. {release: /etc/argocd-image-resolver/keys/release.pub}
  trustedRoot: ""                      # Sigstore trusted_root.json, needed by keyless requirements (or tufURL)
  tufURL: ""                           # TUF repository trusted_root.json is fetched from and refreshed, e.g. https://tuf-repo-cdn.sigstore.dev; "" (default): offline
  tufRoot: ""                          # its TUF root.json (built in for https://tuf-repo-cdn.sigstore.dev)
  tufRefresh: 24h                      # how old the fetched root may get before it is refreshed
  requireTlog: true                    # a keyless signature needs its transparency-log entry
  requireSCT: true                     # and its certificate a signed certificate timestamp
  verifyCandidates: 20                 # candidates checked for a signature in one resolution at most
  maxReferrers: 128                    # referrers of one image read at most
  maxSignatureBytes: 1MiB              # bytes of one signature manifest, bundle or layer at most
`

// Settings lists every configuration value with its YAML key, environment variable
// and flag. The YAML file also takes registries: (see resolve.ParseRegistries).
func Settings() []Setting {
	return append([]Setting{
		{Key: "socket", Env: api.SocketEnv, Flag: "socket", Usage: "unix socket of the resolution API", Type: "path",
			set: func(c *Config, v string) error {
				switch {
				case strings.TrimSpace(v) == "":
					return &resolve.InputError{Value: v, Accepted: "a socket path"}
				case len(v) > maxSocketPath:
					return &resolve.InputError{Value: v, Accepted: fmt.Sprintf("a socket path of at most %d bytes", maxSocketPath)}
				}
				c.Socket = v
				return nil
			},
			get: func(c *Config) string { return c.Socket }},
		{Key: "metricsAddr", Env: "IMAGE_RESOLVER_METRICS_ADDR", Flag: "metrics-addr", Usage: `HOST:PORT of /metrics, /healthz and /readyz ("" turns it off)`, Type: "address",
			set: func(c *Config, v string) error {
				if v != "" {
					_, port, err := net.SplitHostPort(v)
					if p, perr := strconv.Atoi(port); err != nil || perr != nil || p < 0 || p > 65535 {
						return &resolve.InputError{Value: v, Accepted: `HOST:PORT or :PORT, e.g. :8090, or "" for none`}
					}
				}
				c.MetricsAddr = v
				return nil
			},
			get: func(c *Config) string { return c.MetricsAddr }},
		{Key: "webhookAddr", Env: "IMAGE_RESOLVER_WEBHOOK_ADDR", Flag: "webhook-addr", Usage: `HOST:PORT of the registry webhooks, /webhooks/<kind> ("" turns them off; each kind needs its secret in webhooks:)`, Type: "address",
			set: func(c *Config, v string) error {
				if v != "" {
					_, port, err := net.SplitHostPort(v)
					if p, perr := strconv.Atoi(port); err != nil || perr != nil || p < 0 || p > 65535 {
						return &resolve.InputError{Value: v, Accepted: `HOST:PORT or :PORT, e.g. :8091, or "" for none`}
					}
				}
				c.WebhookAddr = v
				return nil
			},
			get: func(c *Config) string { return c.WebhookAddr }},
		durationSetting("tagTTL", "IMAGE_RESOLVER_TAG_TTL", "tag-ttl", "how long a repository's tag list is fresh",
			func(c *Config) *time.Duration { return &c.TagTTL }, time.Second),
		durationSetting("headTTL", "IMAGE_RESOLVER_HEAD_TTL", "head-ttl", "how long a tag's digest is fresh (then one HEAD checks it)",
			func(c *Config) *time.Duration { return &c.HeadTTL }, time.Second),
		durationSetting("clockSkew", "IMAGE_RESOLVER_CLOCK_SKEW", "clock-skew", "how much later than its push time, as a registry's metadata API says it, an image's build time may be (newest-build reads candidates newest-pushed first and stops at one pushed this much before the best build time found)",
			func(c *Config) *time.Duration { return &c.ClockSkew }, 0),
		durationSetting("staleIfError", "IMAGE_RESOLVER_STALE_IF_ERROR", "stale-if-error", "how long past its TTL an answer is served when the registry fails (0: never)",
			func(c *Config) *time.Duration { return &c.StaleIfError }, 0),
		{Key: "refreshAhead", Env: "IMAGE_RESOLVER_REFRESH_AHEAD", Flag: "refresh-ahead", Usage: "last part of a TTL in which a read refreshes the entry in the background (0: off)", Type: "fraction",
			set: func(c *Config, v string) error {
				s := strings.TrimSpace(v)
				pct := strings.HasSuffix(s, "%")
				f, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
				if pct {
					f /= 100
				}
				if err != nil || math.IsNaN(f) || f < 0 || f >= 1 {
					return &resolve.InputError{Value: v, Accepted: "a fraction of the TTL from 0 (off) to below 1, e.g. 0.2 or 20%"}
				}
				c.RefreshAhead = f
				return nil
			},
			get: func(c *Config) string { return strconv.FormatFloat(c.RefreshAhead, 'f', -1, 64) }},
		sizeSetting("manifestCacheSize", "IMAGE_RESOLVER_MANIFEST_CACHE_SIZE", "manifest-cache-size", "bytes of manifests kept by digest",
			func(c *Config) *int64 { return &c.ManifestCacheSize }),
		sizeSetting("blobCacheSize", "IMAGE_RESOLVER_BLOB_CACHE_SIZE", "blob-cache-size", "bytes of blobs kept by digest; also the bound of the facts kept by manifest digest in place of manifests and configs (what resolutions read of them: an index's children, an image's platform and build time; 150-300 bytes each)",
			func(c *Config) *int64 { return &c.BlobCacheSize }),
		{Key: "rateLimits", Env: "IMAGE_RESOLVER_RATE_LIMITS", Flag: "rate-limit", List: true, Type: "prefix=rps[:burst]",
			Usage: "per-registry token bucket, " + rateAccepted + "; repeatable; each sets its registry's limit over the file's and env's " +
				"(built in, unless named here: docker.io=10:20, public.ecr.aws=1:5; other registries are bounded by registryConcurrency's governor alone)",
			set: func(c *Config, v string) error {
				rl, err := ParseRateLimit(v)
				if err != nil {
					return err
				}
				c.RateLimits = mergeRateLimits(c.RateLimits, rl)
				return nil
			},
			get: func(c *Config) string {
				var s []string
				for _, rl := range c.RateLimits {
					s = append(s, rl.String())
				}
				return strings.Join(s, ",")
			}},
		{Key: "registryConcurrency", Env: "IMAGE_RESOLVER_REGISTRY_CONCURRENCY", Flag: "registry-concurrency", Usage: "requests in flight per registry at most; an adaptive governor starts there, halves on 429 or overload (frequent 502/503/504, no answer) and recovers slowly (0: no bound)", Type: "int",
			set: func(c *Config, v string) error {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil || n < 0 {
					return &resolve.InputError{Value: v, Accepted: "a whole number, 0 for no bound"}
				}
				c.RegistryConcurrency = n
				return nil
			},
			get: func(c *Config) string { return strconv.Itoa(c.RegistryConcurrency) }},
		durationSetting("fetchTimeout", "IMAGE_RESOLVER_FETCH_TIMEOUT", "fetch-timeout", "bound on one registry fetch, retries included, and on a resolution the daemon goes on with after the render that started it gave up",
			func(c *Config) *time.Duration { return &c.FetchTimeout }, time.Second),
		{Key: "defaultPlatforms", Env: DefaultPlatformsEnv, Flag: "default-platforms", Type: "platforms", Sep: ",",
			Usage: "platforms required of an image whose policy and workload name none: " + platformsAccepted,
			set: func(c *Config, v string) error {
				var items []string
				for _, it := range strings.Split(v, ",") {
					if strings.TrimSpace(it) != "" {
						items = append(items, it)
					}
				}
				ps, err := resolve.ParsePlatforms(items...)
				if err != nil {
					return err
				}
				c.DefaultPlatforms = ps
				return nil
			},
			get: func(c *Config) string { return strings.Join(resolve.PlatformStrings(c.DefaultPlatforms), ",") }},
		{Key: "extraImagePaths", Env: ExtraImagePathsEnv, Flag: "extra-image-paths", Type: "paths", Sep: ";",
			Usage: "image fields of custom resources: " + extraPathsAccepted,
			set: func(c *Config, v string) error {
				var paths []render.ExtraPath
				for _, it := range strings.Split(v, ";") {
					if strings.TrimSpace(it) == "" {
						continue
					}
					p, err := render.ParseExtraPath(it)
					if err != nil {
						var ie *resolve.InputError
						if errors.As(err, &ie) {
							return &resolve.InputError{Value: it, Accepted: extraPathsAccepted, Err: ie.Err}
						}
						return err
					}
					paths = append(paths, p)
				}
				c.ExtraImagePaths = paths
				return nil
			},
			get: func(c *Config) string {
				var s []string
				for _, p := range c.ExtraImagePaths {
					s = append(s, p.String())
				}
				return strings.Join(s, ";")
			}},
		{Key: "kustomizeRemoteHosts", Env: KustomizeRemoteHostsEnv, Flag: "kustomize-remote-hosts", Type: "hosts", Sep: ",",
			Usage: "hosts Kustomize remote resources and bases (HTTPS files, git repositories over HTTPS) may be fetched from, without credentials; none: every remote entry is refused. Accepted: " + render.RemoteHostsAccepted,
			set: func(c *Config, v string) error {
				var hosts []render.RemoteHost
				for _, it := range strings.Split(v, ",") {
					if strings.TrimSpace(it) == "" {
						continue
					}
					h, err := render.ParseRemoteHost(it)
					if err != nil {
						return err
					}
					hosts = append(hosts, h)
				}
				c.KustomizeRemoteHosts = hosts
				return nil
			},
			get: func(c *Config) string {
				var s []string
				for _, h := range c.KustomizeRemoteHosts {
					s = append(s, h.String())
				}
				return strings.Join(s, ",")
			}},
		{Key: "refresh", Env: "IMAGE_RESOLVER_REFRESH", Flag: "refresh", Type: "mode",
			Usage: "when an app's resolution changes: hard (ask Argo CD to render it again, through the Kubernetes API) or off",
			set: func(c *Config, v string) error {
				switch s := strings.TrimSpace(v); s {
				case RefreshHard, RefreshOff:
					c.Refresh = s
					return nil
				}
				return &resolve.InputError{Value: v, Accepted: RefreshHard + " or " + RefreshOff}
			},
			get: func(c *Config) string { return c.Refresh }},
		durationSetting("refreshInterval", "IMAGE_RESOLVER_REFRESH_INTERVAL", "refresh-interval", "least time between two refreshes of one app",
			func(c *Config) *time.Duration { return &c.RefreshInterval }, time.Second),
		{Key: "controlPlaneNamespace", Env: "IMAGE_RESOLVER_CONTROL_PLANE_NAMESPACE", Flag: "control-plane-namespace", Type: "namespace",
			Usage: "namespace of the Applications Argo CD names without one (where argocd-server runs)",
			set: func(c *Config, v string) error {
				s := strings.TrimSpace(v)
				if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
					return &resolve.InputError{Value: v, Accepted: "a Kubernetes namespace name (lower-case letters, digits and -)"}
				}
				c.ControlPlaneNamespace = s
				return nil
			},
			get: func(c *Config) string { return c.ControlPlaneNamespace }},
		durationSetting("renderTimeout", api.RenderTimeoutEnv, "render-timeout", "bound on one render, resolution included (below Argo CD's 90s plugin timeout)",
			func(c *Config) *time.Duration { return &c.RenderTimeout }, time.Second),
		intSetting("renderWorkers", "IMAGE_RESOLVER_RENDER_WORKERS", "render-workers", "renders the daemon runs at once, each in a worker process that is killed at the render deadline, above renderWorkerMemory or when its caller leaves; the daemon starts one before it listens (and is ready), so its first render does not wait for a process to start",
			func(c *Config) *int { return &c.RenderWorkers }),
		sizeSetting("renderWorkerMemory", "IMAGE_RESOLVER_RENDER_WORKER_MEMORY", "render-worker-memory", "resident memory a render's worker may use; above it the render is stopped",
			func(c *Config) *int64 { return &c.RenderWorkerMemory }),
		intSetting("tagListMaxPages", "IMAGE_RESOLVER_TAG_LIST_MAX_PAGES", "tag-list-max-pages", "tag list pages read at most per repository (then the resolution fails, naming the cap)",
			func(c *Config) *int { return &c.TagListMaxPages }),
		intSetting("tagListMaxTags", "IMAGE_RESOLVER_TAG_LIST_MAX_TAGS", "tag-list-max-tags", "tags read at most per repository",
			func(c *Config) *int { return &c.TagListMaxTags }),
		sizeSetting("tagListMaxPageSize", "IMAGE_RESOLVER_TAG_LIST_MAX_PAGE_SIZE", "tag-list-max-page-size", "bytes of one tag list page at most, after decompression",
			func(c *Config) *int64 { return &c.TagListMaxPageSize }),
		intSetting("tagFilterMaxCost", "IMAGE_RESOLVER_TAG_FILTER_MAX_COST", "tag-filter-max-cost", "estimated cost of matching a policy's allow-tags/ignore-tags over a tag list at most: each filter's size (a regular expression's compiled instructions, a glob's characters) times the bytes of the tags; past it the resolution is refused, naming the filter",
			func(c *Config) *int { return &c.TagFilterMaxCost }),
		durationSetting("requestHeaderTimeout", "IMAGE_RESOLVER_REQUEST_HEADER_TIMEOUT", "request-header-timeout", "time a registry has to start answering one request",
			func(c *Config) *time.Duration { return &c.RequestHeaderTimeout }, time.Second),
		durationSetting("requestTimeout", "IMAGE_RESOLVER_REQUEST_TIMEOUT", "request-timeout", "time one registry request may take, body included",
			func(c *Config) *time.Duration { return &c.RequestTimeout }, time.Second),
		durationSetting("forgetAfter", "IMAGE_RESOLVER_FORGET_AFTER", "forget-after", "time after its last render when an app is no longer watched for changes",
			func(c *Config) *time.Duration { return &c.ForgetAfter }, time.Second),
		{Key: "maxTrackedApps", Env: "IMAGE_RESOLVER_MAX_TRACKED_APPS", Flag: "max-tracked-apps", Type: "int",
			Usage: "apps watched for changes at most; the least recently rendered are forgotten first",
			set: func(c *Config, v string) error {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil || n < 1 {
					return &resolve.InputError{Value: v, Accepted: "a whole number, at least 1"}
				}
				c.MaxTrackedApps = n
				return nil
			},
			get: func(c *Config) string { return strconv.Itoa(c.MaxTrackedApps) }},
	}, slices.Concat(memorySettings(), redisSettings(), trustSettings(), gitSettings())...)
}

func settingByKey(key string) (Setting, bool) {
	for _, s := range Settings() {
		if s.Key == key {
			return s, true
		}
	}
	return Setting{}, false
}

// Set sets the value of a setting by its YAML key; field names the source in errors
// (a flag, an environment variable, file: key).
func (c *Config) Set(key, value, field string) error {
	s, ok := settingByKey(key)
	if !ok {
		return fmt.Errorf("unknown setting %q", key)
	}
	if err := s.set(c, value); err != nil {
		return resolve.WithField(err, field)
	}
	return nil
}

// Get returns the value of a setting by its YAML key, as it would be written.
func (c *Config) Get(key string) string {
	if s, ok := settingByKey(key); ok {
		return s.get(c)
	}
	return ""
}
