package cache

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/promreg"
)

// redisMetrics are the shared tier's metrics, registered into the Metrics'
// registry when a Redis tier is made (a daemon without one has none of them).
type redisMetrics struct {
	up         prometheus.Gauge
	hits       *prometheus.CounterVec // layer
	misses     *prometheus.CounterVec // layer
	malformed  *prometheus.CounterVec // layer
	leaseWaits *prometheus.CounterVec // layer
	errors     *prometheus.CounterVec // op
}

func newRedisMetrics(m *Metrics) *redisMetrics {
	counter := func(name, help string, label string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, []string{label})
		return promreg.Register(m.Registry, c)
	}
	rm := &redisMetrics{
		up: promreg.Register(m.Registry, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "cache_redis_up",
			Help: "1 while the Redis shared tier is in use, 0 while it is unavailable (the daemon resolves from memory and registries, probing Redis every second)."})),
		hits:   counter("cache_redis_hits_total", "Lookups that missed memory and were answered by Redis (a value another daemon, or this one before a restart, fetched).", "layer"),
		misses: counter("cache_redis_misses_total", "Lookups that missed memory and Redis and were fetched from the registry (then written to Redis).", "layer"),
		malformed: counter("cache_redis_malformed_total", "Values read from Redis that were ignored and fetched again: wrong format version or layer, "+
			"bad shape, or content whose sha256 is not its digest.", "layer"),
		leaseWaits: counter("cache_redis_lease_waits_total", "Fetches that waited for another daemon holding the key's fetch lease instead of asking the registry.", "layer"),
		errors: counter("cache_redis_errors_total", "Failed Redis commands by operation (read, write, lease, ping); a failure that says Redis is unreachable "+
			"or too slow makes the daemon stop using it until a probe succeeds.", "op"),
	}
	for _, l := range Layers {
		rm.hits.WithLabelValues(l)
		rm.misses.WithLabelValues(l)
		rm.malformed.WithLabelValues(l)
		rm.leaseWaits.WithLabelValues(l)
	}
	for _, op := range []string{redisOpRead, redisOpWrite, redisOpLease, redisOpPing} {
		rm.errors.WithLabelValues(op)
	}
	return rm
}
