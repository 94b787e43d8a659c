package compose

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/metadata"
)

// MetadataAPIs is the resolver option that lists a repository's tags through
// its registry's metadata API (the registries entry's metadataAPI, else its
// host's default: docs/registries.md), with remote's transport (the limiter,
// bounds, retries) and keychain, each client built once per registries entry.
// wrap, when set, wraps each client (the daemon's cache of listings). A client
// that cannot be built is logged once and its registry resolved by the OCI
// protocol. Fallbacks are counted in m.
func MetadataAPIs(c config.Config, remote *resolve.Remote, wrap func(resolve.MetadataAPI) resolve.MetadataAPI, m *cache.Metrics, log *slog.Logger) resolve.ResolverOption {
	if log == nil {
		log = slog.Default()
	}
	b := &metadataAPIs{c: c, remote: remote, wrap: wrap, log: log, table: resolve.NewRegistryTable(c.Registries)}
	var fallback func(api string, err error)
	if m != nil {
		fallback = func(api string, err error) {
			m.MetadataFallbacks.WithLabelValues(api).Inc()
			log.Info("metadata API failed; the OCI protocol answers", "api", api, "err", err)
		}
	}
	return resolve.WithMetadataAPIs(b.For, fallback)
}

type metadataAPIs struct {
	c      config.Config
	remote *resolve.Remote
	wrap   func(resolve.MetadataAPI) resolve.MetadataAPI
	log    *slog.Logger
	table  resolve.RegistryTable

	mu      sync.Mutex
	clients map[string]resolve.MetadataAPI // by kind and entry prefix (or host); nil: none
}

// For returns the metadata API of repo's registry, nil for none.
func (b *metadataAPIs) For(repo name.Repository) resolve.MetadataAPI {
	host, _, _ := strings.Cut(resolve.RepoKey(repo), "/")
	entry, ok := b.table.Lookup(repo)
	kind, key := resolve.DefaultMetadataAPI(host), host
	if ok {
		kind, key = entry.EffectiveMetadataAPI(), entry.Prefix
	}
	if kind == resolve.MetadataNone {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if api, done := b.clients[kind+"|"+key]; done {
		return api
	}
	if b.clients == nil {
		b.clients = map[string]resolve.MetadataAPI{}
	}
	api, err := metadata.New(kind, metadata.Options{BaseURL: entry.MetadataURL, Registry: host,
		Transport: b.remote.Transport(), Keychain: b.remote.Keychain(), PageSize: 0,
		MaxPages: b.c.TagListMaxPages, MaxTags: b.c.TagListMaxTags, MaxPageBytes: b.c.TagListMaxPageSize, Log: b.log})
	if err != nil {
		b.log.Warn("metadata API not used: the OCI protocol answers for this registry", "api", kind, "registry", key, "err", err)
		api = nil
	} else {
		api = newPausing(api, metadataPause)
		if b.wrap != nil {
			api = b.wrap(api)
		}
	}
	b.clients[kind+"|"+key] = api
	return api
}

// metadataPause is how long a registry's metadata API is left alone after it
// failed: its resolutions use the OCI protocol meanwhile, without a request to
// the API and a fallback counted for each.
const metadataPause = 5 * time.Minute

// newPausing wraps api in a pausing one, keeping its build times (BuildTimer).
func newPausing(api resolve.MetadataAPI, pause time.Duration) resolve.MetadataAPI {
	p := &pausing{MetadataAPI: api, pause: pause}
	if bt, ok := api.(resolve.BuildTimer); ok {
		return pausingBuildTimes{pausing: p, bt: bt}
	}
	return p
}

// pausingBuildTimes is a pausing API that gives build times.
type pausingBuildTimes struct {
	*pausing
	bt resolve.BuildTimer
}

func (p pausingBuildTimes) BuildTime(ctx context.Context, repo name.Repository, rec resolve.TagRecord, prefer []resolve.Platform) (time.Time, bool, error) {
	return p.bt.BuildTime(ctx, repo, rec, prefer)
}

// pausing is a metadata API that is not asked for pause after a failure.
type pausing struct {
	resolve.MetadataAPI
	pause time.Duration
	mu    sync.Mutex
	until time.Time
}

func (p *pausing) ListTagRecords(ctx context.Context, repo name.Repository) ([]resolve.TagRecord, error) {
	p.mu.Lock()
	until := p.until
	p.mu.Unlock()
	if time.Now().Before(until) {
		return nil, fmt.Errorf("%w until %s", resolve.ErrMetadataPaused, until.UTC().Format(time.RFC3339))
	}
	recs, err := p.MetadataAPI.ListTagRecords(ctx, repo)
	if err != nil && ctx.Err() == nil {
		p.mu.Lock()
		p.until = time.Now().Add(p.pause)
		p.mu.Unlock()
	}
	return recs, err
}
