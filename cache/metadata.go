package cache

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// A metadata API's listings (resolve.MetadataAPI) are cached as tag lists are:
// fresh for the tag TTL, shared by concurrent renders, refreshed ahead, served
// stale when the API fails (within staleIfError), read again for a push or a
// hard refresh (RevalidateTags). They are kept in this daemon's memory only:
// the shared tier does not hold them (each replica lists through the API once
// per TTL; the tag lists of the OCI protocol are still shared).

// metadataLayer holds the listings and, per key, how to list it again.
type metadataLayer struct {
	layer  *ttlLayer[[]resolve.TagRecord]
	times  *lru[buildTime] // BuildTimer answers by API, repository, digest and platforms
	mu     sync.Mutex
	apis   map[string]metadataSource // by key: for RevalidateTags
	byRepo map[string][]string       // resolve.RepoKey -> keys
}

type metadataSource struct {
	api  resolve.MetadataAPI
	repo name.Repository
}

// CachedMetadata returns api with its listings cached in this registry view;
// an api that gives build times (resolve.BuildTimer) keeps doing so, its
// answers kept by digest (content addressed: they never change).
func (r *Registry) CachedMetadata(api resolve.MetadataAPI) resolve.MetadataAPI {
	c := cachedMetadata{r: r, api: api}
	if bt, ok := api.(resolve.BuildTimer); ok {
		return cachedBuildTimes{cachedMetadata: c, bt: bt}
	}
	return c
}

// cachedBuildTimes is a cached metadata API that gives build times.
type cachedBuildTimes struct {
	cachedMetadata
	bt resolve.BuildTimer
}

// buildTime is a BuildTimer's answer, kept by digest.
type buildTime struct {
	created time.Time
	ok      bool
}

func (c cachedBuildTimes) BuildTime(ctx context.Context, repo name.Repository, rec resolve.TagRecord, prefer []resolve.Platform) (time.Time, bool, error) {
	key := c.api.Name() + "|" + resolve.RepoKey(repo) + "|" + rec.Digest.String() + "|" + strings.Join(resolve.PlatformStrings(prefer), ",")
	if v, hit := c.r.metadata.times.get(key); hit {
		return v.created, v.ok, nil
	}
	created, ok, err := c.bt.BuildTime(ctx, repo, rec, prefer)
	if err != nil {
		return time.Time{}, false, err
	}
	if rec.Digest.Hex != "" {
		c.r.metadata.times.add(key, buildTime{created: created, ok: ok})
	}
	return created, ok, nil
}

type cachedMetadata struct {
	r   *Registry
	api resolve.MetadataAPI
}

func (c cachedMetadata) Name() string { return c.api.Name() }

// metadataKey is the cache key of api's listing of repoKey.
func metadataKey(api, repoKey string) string { return api + "|" + repoKey }

func (c cachedMetadata) ListTagRecords(ctx context.Context, repo name.Repository) ([]resolve.TagRecord, error) {
	repoKey := resolve.RepoKey(repo)
	key := metadataKey(c.api.Name(), repoKey)
	ml := c.r.metadata
	ml.mu.Lock()
	if _, ok := ml.apis[key]; !ok && len(ml.apis) < maxMetadataSources {
		ml.apis[key] = metadataSource{api: c.api, repo: repo}
		ml.byRepo[repoKey] = append(ml.byRepo[repoKey], key)
	}
	ml.mu.Unlock()
	recs, err := ml.layer.get(ctx, key, repoKey, c.api.Name()+" tag records of "+repoKey, listRecords(c.api, repo))
	if err != nil {
		return nil, err
	}
	return slices.Clone(recs), nil
}

// metadataTimesBytes bounds the build times kept (about 60,000 of them).
const metadataTimesBytes = 8 << 20

// maxMetadataSources bounds the listings remembered for revalidation.
const maxMetadataSources = 100_000

func listRecords(api resolve.MetadataAPI, repo name.Repository) fetchFunc[[]resolve.TagRecord] {
	return func(ctx context.Context, _ *entry[[]resolve.TagRecord]) ([]resolve.TagRecord, error) {
		recs, err := api.ListTagRecords(ctx, repo)
		if err != nil {
			return nil, err
		}
		return slices.Clip(recs), nil
	}
}

// revalidateRecords reads again every metadata listing held of repoKey that was
// read before since.
func (r *Registry) revalidateRecords(ctx context.Context, repoKey string, since time.Time) error {
	ml := r.metadata
	ml.mu.Lock()
	keys := slices.Clone(ml.byRepo[repoKey])
	srcs := make([]metadataSource, len(keys))
	for i, k := range keys {
		srcs[i] = ml.apis[k]
	}
	ml.mu.Unlock()
	for i, s := range srcs {
		if ml.layer.lookup(keys[i]) == nil {
			continue
		}
		if err := ml.layer.revalidate(ctx, keys[i], repoKey, since, listRecords(s.api, s.repo)); err != nil {
			return err
		}
	}
	return nil
}

// held reports whether a listing of repoKey is held.
func (ml *metadataLayer) held(repoKey string) bool {
	ml.mu.Lock()
	keys := ml.byRepo[repoKey]
	ml.mu.Unlock()
	for _, k := range keys {
		if ml.layer.lookup(k) != nil {
			return true
		}
	}
	return false
}
