package cache

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"
	"unique"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/singleflight"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Defaults of the cache.
const (
	DefaultTagTTL            = 2 * time.Minute
	DefaultHeadTTL           = time.Hour
	DefaultStaleIfError      = 24 * time.Hour
	DefaultRefreshAhead      = 0.2
	DefaultManifestCacheSize = 32 << 20
	DefaultBlobCacheSize     = 32 << 20
	DefaultFetchTimeout      = 2 * time.Minute
	// maxBackgroundRefreshes bounds refresh-ahead fetches in flight at once.
	maxBackgroundRefreshes = 16
)

// Registry is a resolve.Registry that answers from a cache in front of another one
// (the network client), so every render in the pod shares one view of the
// registries:
//
//   - tag lists per repository and tag->descriptor answers expire after a TTL
//     (2m and 1h by default);
//   - manifests and blobs are kept by digest in size-bounded LRUs without time expiry
//     (content addressed, never stale); what resolutions read of a manifest (and of
//     an image's config) is kept instead of the documents, in the facts layer
//     (ManifestFacts, facts.go);
//   - a manifest asked for by tag costs, once its descriptor is cached and then
//     expired, one HEAD (the body comes from the LRU while the digest is unchanged);
//     cold, it costs one GET by tag, which fills both;
//   - concurrent lookups of one key share one registry fetch (singleflight);
//   - entries read in the last part of their TTL are refreshed in the background
//     (refresh-ahead), so renders rarely wait;
//   - when a fetch fails with a registry error (5xx, 429, 401/403, network), an
//     expired entry is served for up to the stale-if-error bound past its TTL, and
//     resolve.ReportStale flags the resolution; a 404 or other definitive answer, or
//     no entry, returns the registry's error;
//   - with WithRedis, what memory misses is asked of Redis before the registry, and
//     what is fetched is written there, so several daemons share one view (Redis).
//
// Fetches run detached from the caller's context (bounded by the fetch timeout), so
// a render that gives up does not abort a fetch other renders share; the caller
// still returns as soon as its own context ends. Returned values are shared: callers
// must not modify them.
type Registry struct {
	inner     resolve.Registry
	o         options
	m         *Metrics
	tags      *ttlLayer[[]string]
	heads     *ttlLayer[headVal]
	metadata  *metadataLayer // metadata APIs' listings (metadata.go)
	manifests *lru[*resolve.Manifest]
	blobs     *lru[[]byte]
	facts     factsStore // facts.go
	sfMan     singleflight.Group
	sfBlob    singleflight.Group
	sfFacts   singleflight.Group
	shared    *Redis // the installation's shared tier; nil for none

	ctx    context.Context // parent of every fetch; cancelled by Close
	cancel context.CancelFunc
	bg     sync.WaitGroup
	bgSem  chan struct{}
}

var (
	_ resolve.Registry        = (*Registry)(nil)
	_ resolve.ReferrersLister = (*Registry)(nil)
)

// NewRegistry returns a cache in front of inner. Give inner no memo of its own
// (resolve.WithoutMemo): this cache bounds memory, the Remote's memo does not.
func NewRegistry(inner resolve.Registry, opts ...Option) *Registry {
	o := options{
		tagTTL:            DefaultTagTTL,
		headTTL:           DefaultHeadTTL,
		staleFor:          DefaultStaleIfError,
		refreshAhead:      DefaultRefreshAhead,
		manifestBytes:     DefaultManifestCacheSize,
		blobBytes:         DefaultBlobCacheSize,
		fetchTimeout:      DefaultFetchTimeout,
		clock:             time.Now,
		cleanupInterval:   5 * time.Minute,
		backgroundRefresh: maxBackgroundRefreshes,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.metrics == nil {
		o.metrics = NewMetrics()
	}
	r := &Registry{inner: inner, o: o, m: o.metrics, shared: o.redis, bgSem: make(chan struct{}, max(o.backgroundRefresh, 1))}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.tags = newTTLLayer(r, LayerTags, o.tagTTL, tagsCodec, false)
	r.heads = newTTLLayer(r, LayerHead, o.headTTL, headCodec, true) // one entry per tag, keyed "<repository>:<tag>"
	r.metadata = &metadataLayer{layer: newTTLLayer(r, LayerRecords, o.tagTTL, valueCodec[[]resolve.TagRecord]{}, false), apis: map[string]metadataSource{}, byRepo: map[string][]string{},
		times: newLRU(metadataTimesBytes, func(k string, _ buildTime) int64 { return int64(len(k)) + 48 })}
	r.manifests = newLRU(o.manifestBytes, func(_ string, m *resolve.Manifest) int64 {
		return int64(cap(m.Raw)) + int64(len(m.MediaType)) + 64
	})
	r.blobs = newLRU(o.blobBytes, func(_ string, b []byte) int64 { return int64(cap(b)) + 24 })
	r.facts = factsStore{newLRU(o.blobBytes, factsSize)}
	_ = r.m.Registry.Register(newCacheCollector(r)) // a second Registry on the same Metrics keeps the first's gauges
	return r
}

// Close stops background refreshes and fetches in flight, waits for them, and
// closes the shared tier.
func (r *Registry) Close() {
	r.cancel()
	r.bg.Wait()
	if r.shared != nil {
		_ = r.shared.Close()
	}
}

// LayerStats is the size of one cache layer.
type LayerStats struct {
	Layer   string
	Entries int
	Bytes   int64 // for the LRU layers: bytes accounted, payload plus overhead
}

// Stats returns the size of every layer.
func (r *Registry) Stats() []LayerStats {
	me, mb := r.manifests.stats()
	be, bb := r.blobs.stats()
	fe, fb := r.facts.stats()
	return []LayerStats{
		{Layer: LayerTags, Entries: r.tags.c.ItemCount()},
		{Layer: LayerHead, Entries: r.heads.c.ItemCount()},
		{Layer: LayerManifest, Entries: me, Bytes: mb},
		{Layer: LayerBlob, Entries: be, Bytes: bb},
		{Layer: LayerFacts, Entries: fe, Bytes: fb},
	}
}

func (r *Registry) now() time.Time { return r.o.clock() }

// Now is the time of the registry view's clock (time.Now unless WithClock): the
// time RevalidateTags' since is compared with.
func (r *Registry) Now() time.Time { return r.now() }

// fetchContext is the context of one fetch for a repository (resolve.RepoKey):
// detached from callers, bounded by the fetch timeout, cancelled by Close, and
// naming the repository for rate limits and metrics.
func (r *Registry) fetchContext(repoKey string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(r.ctx, r.o.fetchTimeout)
	return resolve.ContextForRepository(ctx, repoKey), cancel
}

// ListTags returns the repository's tags from the cache, listing them when absent or
// expired.
func (r *Registry) ListTags(ctx context.Context, repo name.Repository) ([]string, error) {
	key := resolve.RepoKey(repo)
	tags, err := r.tags.get(ctx, key, resolve.RepoKey(repo), "tag list of "+key, r.listTags(repo))
	if err != nil {
		return nil, err
	}
	return slices.Clone(tags), nil
}

// RevalidateTags makes sure repo's tag list was read from the registry at or
// after since, reading it again now if not (a push was announced, or an app was
// hard-refreshed: docs/freshness.md). With the shared tier, a list another daemon
// read after since is taken from Redis instead. On failure the cached list stays
// as it was and the registry's error is returned.
func (r *Registry) RevalidateTags(ctx context.Context, repo name.Repository, since time.Time) error {
	key := resolve.RepoKey(repo)
	if err := r.revalidateRecords(ctx, key, since); err != nil {
		return err
	}
	if r.tags.lookup(key) == nil && r.metadataHeld(key) {
		return nil // listed through a metadata API only
	}
	return r.tags.revalidate(ctx, key, key, since, r.listTags(repo))
}

// metadataHeld reports whether a metadata API's listing of repoKey is held.
func (r *Registry) metadataHeld(repoKey string) bool { return r.metadata.held(repoKey) }

// RevalidateHead makes sure the descriptor of repo's tag was read at or after
// since, as RevalidateTags: a tag pushed again (latest) points at its new digest.
// A tag this daemon never asked about costs nothing.
func (r *Registry) RevalidateHead(ctx context.Context, repo name.Repository, tag string, since time.Time) error {
	key := resolve.RepoKey(repo) + ":" + tag
	if r.heads.lookup(key) == nil {
		return nil
	}
	return r.heads.revalidate(ctx, key, resolve.RepoKey(repo), since, r.headOf(repo, tag))
}

// listTags is the fetch of repo's tag list from the registry.
func (r *Registry) listTags(repo name.Repository) fetchFunc[[]string] {
	return func(ctx context.Context, _ *entry[[]string]) ([]string, error) {
		tags, err := r.inner.ListTags(ctx, repo)
		if err != nil {
			return nil, err
		}
		return slices.Clip(tags), nil
	}
}

// headOf is the fetch of the descriptor of repo's tag from the registry.
func (r *Registry) headOf(repo name.Repository, tag string) fetchFunc[headVal] {
	return func(ctx context.Context, _ *entry[headVal]) (headVal, error) {
		d, err := r.inner.Head(ctx, repo, tag)
		if err != nil {
			return headVal{}, err
		}
		return newHeadVal(d.Digest, d.MediaType, d.Size), nil
	}
}

// TagsCached reports whether this daemon holds a tag list of the repository
// (by resolve.RepoKey), fresh or not.
func (r *Registry) TagsCached(repoKey string) bool {
	return r.tags.lookup(repoKey) != nil || r.metadataHeld(repoKey)
}

// headVal is a compact descriptor: what the resolver needs of a tag's HEAD. There
// is one per tag (100,000 in a large view), so a sha256 digest is kept as its 32
// bytes rather than as 71 characters of text, and what repeats from tag to tag
// (the media type) or is rare (a digest of another algorithm, or in a
// non-canonical spelling) is one interned handle: 48 bytes in all.
type headVal struct {
	sha256 [32]byte
	ext    unique.Handle[headExt]
	size   int64
}

// headExt is the part of a headVal that is interned.
type headExt struct {
	mediaType types.MediaType
	other     bool   // the digest is alg:hex below, not sha256
	alg, hex  string // the digest as the registry gave it, when other
}

func newHeadVal(d v1.Hash, mt types.MediaType, size int64) headVal {
	hv := headVal{size: size}
	x := headExt{mediaType: mt}
	if d.Algorithm == "sha256" {
		if b, err := hex.DecodeString(d.Hex); err == nil && len(b) == 32 && hex.EncodeToString(b) == d.Hex {
			copy(hv.sha256[:], b)
			hv.ext = unique.Make(x)
			return hv
		}
	}
	x.other, x.alg, x.hex = true, d.Algorithm, d.Hex
	hv.ext = unique.Make(x)
	return hv
}

// extOf is h's interned part (none for the zero headVal).
func (h headVal) extOf() headExt {
	if h.ext == (unique.Handle[headExt]{}) {
		return headExt{}
	}
	return h.ext.Value()
}

// mediaType is the media type the registry gave.
func (h headVal) mediaType() types.MediaType { return h.extOf().mediaType }

// digest is the digest as the registry gave it.
func (h headVal) digest() v1.Hash {
	if x := h.extOf(); x.other {
		return v1.Hash{Algorithm: x.alg, Hex: x.hex}
	}
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.sha256[:])}
}

// Head returns the descriptor a tag points at from the cache, asking the registry
// with HEAD when absent or expired.
func (r *Registry) Head(ctx context.Context, repo name.Repository, tag string) (v1.Descriptor, error) {
	key := resolve.RepoKey(repo) + ":" + tag
	hv, err := r.heads.get(ctx, key, resolve.RepoKey(repo), "digest of "+key, r.headOf(repo, tag))
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{Digest: hv.digest(), MediaType: hv.mediaType(), Size: hv.size}, nil
}

// Manifest returns the manifest a tag or digest points at. For a tag: the cached
// descriptor (or, when it expired, a HEAD), then the manifest by digest from the
// LRU; with no descriptor cached at all, one GET by tag fills both.
func (r *Registry) Manifest(ctx context.Context, repo name.Repository, ref string) (*resolve.Manifest, error) {
	if h, err := v1.NewHash(ref); err == nil {
		return r.manifestByDigest(ctx, repo, h)
	}
	key := resolve.RepoKey(repo) + ":" + ref
	var got *resolve.Manifest // set when this caller's fetch read the whole manifest
	hv, err := r.heads.get(ctx, key, resolve.RepoKey(repo), "digest of "+key, func(ctx context.Context, old *entry[headVal]) (headVal, error) {
		m, hv, err := r.headOrGet(ctx, repo, ref, old)
		if err != nil || m == nil {
			return hv, err
		}
		r.storeManifest(ctx, m)
		if old == nil { // not a background refresh (those always have an entry)
			got = m
		}
		return hv, nil
	})
	if err != nil {
		return nil, err
	}
	if got != nil && got.Digest == hv.digest() {
		r.m.CacheMisses.WithLabelValues(LayerManifest).Inc()
		return got, nil
	}
	return r.manifestByDigest(ctx, repo, hv.digest())
}

// headOrGet reads a tag's descriptor from the registry: with a HEAD when the
// tag was read before (old, a refresh), else, or when the registry does not
// answer HEAD, with one GET, whose manifest it returns too.
func (r *Registry) headOrGet(ctx context.Context, repo name.Repository, ref string, old *entry[headVal]) (*resolve.Manifest, headVal, error) {
	if old != nil {
		d, err := r.inner.Head(ctx, repo, ref)
		if err == nil {
			return nil, newHeadVal(d.Digest, d.MediaType, d.Size), nil
		}
		if !headUnsupported(err) {
			return nil, headVal{}, err
		}
		// A registry that does not answer HEAD: one GET, as when cold.
	}
	m, err := r.inner.Manifest(ctx, repo, ref)
	if err != nil {
		return nil, headVal{}, err
	}
	return m, newHeadVal(m.Digest, m.MediaType, int64(len(m.Raw))), nil
}

// storeManifest keeps a manifest read by tag under its digest, here and in Redis.
func (r *Registry) storeManifest(ctx context.Context, m *resolve.Manifest) {
	key := keepManifest(m, m.Digest.String())
	keepIn(r, LayerManifest, r.manifests, key, m)
	r.shareManifest(ctx, m)
}

// shareManifest writes a manifest read by tag to Redis, when the daemons share it.
func (r *Registry) shareManifest(ctx context.Context, m *resolve.Manifest) {
	if r.shared != nil {
		putContent(ctx, r.shared, LayerManifest, m.Digest.String(), manifestCodec, m)
	}
}

func (r *Registry) manifestByDigest(ctx context.Context, repo name.Repository, h v1.Hash) (*resolve.Manifest, error) {
	return r.manifestByDigestKept(ctx, repo, h, true)
}

// manifestByDigestKept is manifestByDigest; a manifest fetched is kept in memory
// only when keep (passThrough reads without keeping).
func (r *Registry) manifestByDigestKept(ctx context.Context, repo name.Repository, h v1.Hash, keep bool) (*resolve.Manifest, error) {
	key := h.String()
	return lruGet(ctx, r, LayerManifest, r.manifests, keep, &r.sfMan, manifestCodec, key, resolve.RepoKey(repo), func(ctx context.Context) (*resolve.Manifest, error) {
		m, err := r.inner.Manifest(ctx, repo, key)
		if err != nil {
			return nil, err
		}
		if m.Digest != h {
			return nil, fmt.Errorf("manifest %s@%s: registry sent digest %s", repo, key, m.Digest)
		}
		if keep {
			keepManifest(m, key)
		}
		return m, nil
	})
}

// Blob returns a blob (an image config) by digest from the LRU, fetching it once on
// a miss.
func (r *Registry) Blob(ctx context.Context, repo name.Repository, digest v1.Hash) ([]byte, error) {
	return r.blob(ctx, repo, digest, true)
}

// blob is Blob; a blob fetched is kept in memory only when keep.
func (r *Registry) blob(ctx context.Context, repo name.Repository, digest v1.Hash, keep bool) ([]byte, error) {
	key := digest.String()
	return lruGet(ctx, r, LayerBlob, r.blobs, keep, &r.sfBlob, blobCodec, key, resolve.RepoKey(repo), func(ctx context.Context) ([]byte, error) {
		b, err := r.inner.Blob(ctx, repo, digest)
		if err != nil || !keep {
			return b, err
		}
		return compact(b), nil
	})
}

// Referrers lists the manifests referring to digest through the inner registry
// when it can (resolve.ReferrersLister), else fails with an error wrapping
// resolve.ErrReferrersUnsupported. Lists are not cached here: they change when a
// signature is added, and the signature verifier caches its verdicts instead.
func (r *Registry) Referrers(ctx context.Context, repo name.Repository, digest v1.Hash) (*resolve.Manifest, error) {
	rl, ok := r.inner.(resolve.ReferrersLister)
	if !ok {
		return nil, fmt.Errorf("%s: the cache's registry client cannot list referrers: %w", repo.Digest(digest.String()), resolve.ErrReferrersUnsupported)
	}
	return rl.Referrers(ctx, repo, digest)
}

// compact drops the spare capacity a read left behind, which the LRU would hold
// without accounting for it.
func compact(b []byte) []byte {
	if cap(b)-len(b) > 64 {
		return bytes.Clone(b)
	}
	return b
}

// lruGet answers from a content-addressed LRU, else from Redis (when shared and
// the layer's codec can store it), fetching a missing value once however many
// callers (and daemons) want it, and keeping what it fetched in c when keep.
func lruGet[V any](ctx context.Context, r *Registry, layer string, c memStore[V], keep bool, sf *singleflight.Group, codec valueCodec[V], key, repoKey string,
	fetch func(context.Context) (V, error)) (V, error) {
	var zero V
	if v, ok := c.get(key); ok {
		r.m.CacheHits.WithLabelValues(layer).Inc()
		return v, nil
	}
	leader := false
	ch := sf.DoChan(key, func() (any, error) {
		leader = true
		if v, ok := c.get(key); ok {
			return v, nil
		}
		fctx, cancel := r.fetchContext(repoKey)
		defer cancel()
		var v V
		var err error
		if r.shared != nil && codec.parse != nil {
			v, _, err = sharedFill(fctx, r.shared, layer, key, r.shared.ContentTTL(), codec,
				func(time.Duration) bool { return true }, fetch)
		} else {
			v, err = fetch(fctx)
		}
		if err != nil {
			return nil, err
		}
		if keep {
			keepIn(r, layer, c, key, v)
		}
		return v, nil
	})
	select {
	case res := <-ch:
		if leader {
			r.m.CacheMisses.WithLabelValues(layer).Inc()
		} else {
			r.m.Shared.WithLabelValues(layer).Inc()
		}
		if res.Err != nil {
			return zero, res.Err
		}
		v := res.Val.(V)
		if keep && !leader {
			// The fetch joined may be a passThrough's, which keeps nothing.
			if _, ok := c.get(key); !ok {
				keepIn(r, layer, c, key, v)
			}
		}
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// keepIn adds v to the layer's LRU c, counting the entries it evicted.
func keepIn[V any](r *Registry, layer string, c memStore[V], key string, v V) {
	if n := c.add(key, v); n > 0 {
		r.m.Evictions.WithLabelValues(layer).Add(float64(n))
	}
}
