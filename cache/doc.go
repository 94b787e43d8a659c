// Package cache is the registry view the daemon shares between renders: TTL caches
// of tag lists and tag->digest answers, size-bounded caches of manifests and configs
// by digest, singleflight, refresh-ahead, stale-if-error, per-registry rate limits
// and concurrency (Limiter), and their Prometheus metrics.
//
// It wraps resolve's Registry interface and knows nothing of Argo CD, of the daemon
// that serves it (package daemon) or of where its settings come from (package config).
package cache
