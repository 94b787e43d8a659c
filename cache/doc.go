// Package cache is the registry view the daemon shares between renders, and only
// caches: TTL caches of tag lists and tag->digest answers, size-bounded caches of
// manifests and configs by digest, singleflight, refresh-ahead, stale-if-error, the
// Redis tier shared between daemons, the signature verdict cache (Verdicts), and
// their Prometheus metrics (Metrics, which
// also holds the registry transport's: resolve.TransportMetrics).
//
// It wraps resolve's Registry interface and knows nothing of Argo CD, of the daemon
// that serves it (package daemon) or of where its settings come from (package config).
// The registry transport under it (rate limits, per-registry concurrency,
// Retry-After pauses and retries) is resolve's (resolve.Limiter); each fetch names
// its repository for it (resolve.ContextForRepository).
package cache
