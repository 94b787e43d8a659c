package cache

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Namespace prefixes every metric name; it is the registry transport's
// (resolve.MetricsNamespace).
const Namespace = resolve.MetricsNamespace

// Cache layers, the values of the layer label.
const (
	LayerTags     = "tags"     // repository -> tag list (TTL)
	LayerHead     = "head"     // repository:tag -> descriptor (TTL)
	LayerRecords  = "records"  // API and repository -> a metadata API's tag records (TTL, memory only)
	LayerManifest = "manifest" // digest -> manifest (LRU, no expiry)
	LayerBlob     = "blob"     // digest -> blob (LRU, no expiry)
	LayerFacts    = "facts"    // manifest digest -> what resolutions read of it (LRU, no expiry, memory only)
)

// Layers lists the cache layers.
var Layers = []string{LayerTags, LayerHead, LayerRecords, LayerManifest, LayerBlob, LayerFacts}

// Metrics are the registry view's Prometheus metrics, in a registry of their own
// that the daemon adds its metrics to: the caches' and, embedded, the registry
// transport's (resolve.TransportMetrics: requests, rate-limit waits, pauses and
// concurrency; give Transport to resolve.NewLimiter). Label values are bounded:
// layers, registry hosts, request kinds, HTTP statuses, strategies and result
// kinds; never tags, repositories or app names.
type Metrics struct {
	Registry *prometheus.Registry

	CacheHits    *prometheus.CounterVec // layer
	CacheMisses  *prometheus.CounterVec // layer
	CacheStale   *prometheus.CounterVec // layer
	Evictions    *prometheus.CounterVec // layer
	RefreshAhead *prometheus.CounterVec // layer, result
	// Revalidations counts entries read again before their TTL ended because a
	// push was announced (a registry webhook) or an app was hard-refreshed.
	Revalidations *prometheus.CounterVec // layer, result
	Shared        *prometheus.CounterVec // layer
	// MetadataFallbacks counts resolutions whose registry's metadata API could not
	// answer, resolved through the OCI protocol instead.
	MetadataFallbacks *prometheus.CounterVec // api

	*resolve.TransportMetrics
}

// NewMetrics creates the metrics and registers them, with the Go runtime and process
// collectors, in a new registry.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	f := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	m := &Metrics{
		Registry:          reg,
		CacheHits:         f("cache_hits_total", "Cache lookups answered by a fresh entry.", "layer"),
		CacheMisses:       f("cache_misses_total", "Cache lookups not answered from memory (absent or expired entry): read from Redis when the daemons share it (cache_redis_hits_total), else fetched from the registry.", "layer"),
		CacheStale:        f("cache_stale_serves_total", "Expired entries served because the registry failed (stale-if-error).", "layer"),
		Evictions:         f("cache_evictions_total", "Entries evicted from the size-bounded caches.", "layer"),
		RefreshAhead:      f("refresh_ahead_total", "Background refreshes of entries in use before they expire, by result (ok, error).", "layer", "result"),
		Revalidations:     f("cache_revalidations_total", "Entries read again from the registry before their TTL ended, because a registry webhook announced a push to the repository or an app was hard-refreshed (docs/freshness.md), by result (ok, error).", "layer", "result"),
		Shared:            f("singleflight_shared_total", "Lookups that joined a registry fetch already in flight instead of starting one.", "layer"),
		MetadataFallbacks: f("metadata_api_fallbacks_total", "Resolutions whose registry's metadata API (Docker Hub's tags API, Harbor's artifacts, ...) could not answer (not offered, 404, credentials refused, rate limited, malformed), resolved through the OCI protocol instead, by API.", "api"),
	}
	for _, api := range resolve.MetadataAPIs[:len(resolve.MetadataAPIs)-1] {
		m.MetadataFallbacks.WithLabelValues(api)
	}
	m.TransportMetrics = resolve.NewTransportMetrics(reg)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every layer's series exist from the start, at zero, so dashboards and alerts
	// see them before the first event.
	for _, l := range Layers {
		m.CacheHits.WithLabelValues(l)
		m.CacheMisses.WithLabelValues(l)
		m.Shared.WithLabelValues(l)
		if l == LayerTags || l == LayerHead || l == LayerRecords {
			m.CacheStale.WithLabelValues(l)
			m.RefreshAhead.WithLabelValues(l, "ok")
			m.RefreshAhead.WithLabelValues(l, "error")
			m.Revalidations.WithLabelValues(l, "ok")
			m.Revalidations.WithLabelValues(l, "error")
		} else {
			m.Evictions.WithLabelValues(l)
		}
	}
	return m
}

// Transport is the registry transport's metrics, for resolve.NewLimiter; nil when
// m is nil (the Limiter then records into metrics of its own).
func (m *Metrics) Transport() *resolve.TransportMetrics {
	if m == nil {
		return nil
	}
	return m.TransportMetrics
}

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// cacheCollector reports the entries and bytes of each layer at scrape time.
type cacheCollector struct {
	entries, bytes *prometheus.Desc
	r              *Registry
}

func newCacheCollector(r *Registry) *cacheCollector {
	return &cacheCollector{
		entries: prometheus.NewDesc(Namespace+"_cache_entries", "Entries held, by layer (expired entries kept for stale-if-error included).", []string{"layer"}, nil),
		bytes:   prometheus.NewDesc(Namespace+"_cache_bytes", "Bytes accounted to the size-bounded layers (manifest, blob, facts).", []string{"layer"}, nil),
		r:       r,
	}
}

func (c *cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.entries
	ch <- c.bytes
}

func (c *cacheCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.r.Stats() {
		ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(s.Entries), s.Layer)
		if s.Layer == LayerManifest || s.Layer == LayerBlob || s.Layer == LayerFacts {
			ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.Bytes), s.Layer)
		}
	}
}
