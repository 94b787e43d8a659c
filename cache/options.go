package cache

import "time"

// options are what the Option functions set (see NewRegistry for the defaults).
type options struct {
	tagTTL, headTTL   time.Duration
	staleFor          time.Duration
	refreshAhead      float64
	manifestBytes     int64
	blobBytes         int64
	fetchTimeout      time.Duration
	clock             func() time.Time
	metrics           *Metrics
	cleanupInterval   time.Duration
	backgroundRefresh int
	redis             *Redis
}

// Option configures a Registry.
type Option func(*options)

// WithTagTTL sets how long a tag list is fresh (default 2m).
func WithTagTTL(d time.Duration) Option { return func(o *options) { o.tagTTL = d } }

// WithHeadTTL sets how long a tag->descriptor answer is fresh (default 1h).
func WithHeadTTL(d time.Duration) Option { return func(o *options) { o.headTTL = d } }

// WithStaleIfError sets how long past its TTL an entry may be served when the
// registry fails (default 24h; 0 turns stale-if-error off).
func WithStaleIfError(d time.Duration) Option { return func(o *options) { o.staleFor = d } }

// WithRefreshAhead sets the last fraction of an entry's TTL in which reading it
// starts a background refresh (default 0.2; 0 turns refresh-ahead off).
func WithRefreshAhead(fraction float64) Option {
	return func(o *options) { o.refreshAhead = fraction }
}

// WithCacheSizes bounds the bytes held for manifests and for blobs.
func WithCacheSizes(manifestBytes, blobBytes int64) Option {
	return func(o *options) { o.manifestBytes, o.blobBytes = manifestBytes, blobBytes }
}

// WithFetchTimeout bounds one fetch from the registry, retries included (default 2m).
func WithFetchTimeout(d time.Duration) Option { return func(o *options) { o.fetchTimeout = d } }

// WithClock replaces time.Now for TTL decisions (tests).
func WithClock(now func() time.Time) Option { return func(o *options) { o.clock = now } }

// WithMetrics records into m (default: a Registry of its own).
func WithMetrics(m *Metrics) Option { return func(o *options) { o.metrics = m } }

// WithRedis shares the registry view with the other daemons of the installation
// through Redis (see Redis): lookups go memory -> Redis -> registry. nil: no
// shared tier. The Registry closes it on Close.
func WithRedis(rd *Redis) Option { return func(o *options) { o.redis = rd } }
