// Package cache is the registry view the daemon shares between renders: TTL caches
// of tag lists and tag->digest answers, size-bounded caches of manifests and configs
// by digest, singleflight, refresh-ahead, stale-if-error, per-registry rate limits,
// Prometheus metrics, and the daemon's unix socket API (Server, Client, Daemon).
//
// It wraps resolve's Registry interface and knows nothing of Argo CD.
package cache
