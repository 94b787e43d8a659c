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
	rejected   *prometheus.CounterVec // layer, reason
	refused    prometheus.Counter     // replies over redis.maxReply
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
		rejected: promreg.Register(m.Registry, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "cache_redis_rejected_total",
			Help: "Values read from Redis and not served, fetched again (and overwritten), by layer and reason: unauthenticated (no MAC while the daemon has a key), " +
				"forged (a MAC not right for the key and value), too-large (over a value's bound or the decode budget, or a frame holding more than it announces), " +
				"corrupt (format, layer, shape, or content whose sha256 is not its digest), busy (no decode budget free within the lookup's wait), " +
				"replayed (written longer ago than its TTL: an old value written again)."}, []string{"layer", "reason"})),
		refused: promreg.Register(m.Registry, prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "cache_redis_replies_refused_total",
			Help: "Replies from Redis refused before they were read: a bulk length, an element count or a reply over its bound (redis.maxReply); " +
				"the connection is closed and the daemon goes on without Redis until a probe succeeds."})),
		leaseWaits: counter("cache_redis_lease_waits_total", "Fetches that waited for another daemon holding the key's fetch lease instead of asking the registry.", "layer"),
		errors: counter("cache_redis_errors_total", "Failed Redis commands by operation (read, write, lease, ping); a failure that says Redis is unreachable "+
			"or too slow makes the daemon stop using it until a probe succeeds.", "op"),
	}
	for _, l := range sharedLayers {
		rm.hits.WithLabelValues(l)
		rm.misses.WithLabelValues(l)
		for _, reason := range rejectReasons {
			rm.rejected.WithLabelValues(l, reason)
		}
		rm.leaseWaits.WithLabelValues(l)
	}
	for _, reason := range rejectReasons[:2] { // state fields are only signed or not
		rm.rejected.WithLabelValues(LayerState, reason)
	}
	for _, op := range []string{redisOpRead, redisOpWrite, redisOpLease, redisOpPing} {
		rm.errors.WithLabelValues(op)
	}
	return rm
}

// sharedLayers are the layers the shared tier holds (not the metadata APIs'
// listings, kept in each daemon's memory).
var sharedLayers = []string{LayerTags, LayerHead, LayerManifest, LayerBlob}
