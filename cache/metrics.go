package cache

import (
	"net/http"
	"slices"
	"sync"
	"weak"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric name.
const Namespace = "argocd_image_resolver"

// Cache layers, the values of the layer label.
const (
	LayerTags     = "tags"     // repository -> tag list (TTL)
	LayerHead     = "head"     // repository:tag -> descriptor (TTL)
	LayerManifest = "manifest" // digest -> manifest (LRU, no expiry)
	LayerBlob     = "blob"     // digest -> config blob (LRU, no expiry)
)

// Layers lists the cache layers.
var Layers = []string{LayerTags, LayerHead, LayerManifest, LayerBlob}

// Metrics are the registry view's Prometheus metrics, in a registry of their own
// that the daemon adds its metrics to. Label
// values are bounded: layers, registry hosts, request kinds, HTTP statuses,
// strategies and result kinds; never tags, repositories or app names.
type Metrics struct {
	Registry *prometheus.Registry

	CacheHits     *prometheus.CounterVec   // layer
	CacheMisses   *prometheus.CounterVec   // layer
	CacheStale    *prometheus.CounterVec   // layer
	Evictions     *prometheus.CounterVec   // layer
	RefreshAhead  *prometheus.CounterVec   // layer, result
	Shared        *prometheus.CounterVec   // layer
	Requests      *prometheus.CounterVec   // registry, kind, method, status
	RateLimitWait *prometheus.HistogramVec // registry
	Pauses        *prometheus.CounterVec   // registry

	paused *pauseCollector // registry: ratelimit_paused_seconds
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
	h := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels)
		reg.MustRegister(v)
		return v
	}
	m := &Metrics{
		Registry:     reg,
		CacheHits:    f("cache_hits_total", "Cache lookups answered by a fresh entry.", "layer"),
		CacheMisses:  f("cache_misses_total", "Cache lookups not answered from memory (absent or expired entry): read from Redis when the daemons share it (cache_redis_hits_total), else fetched from the registry.", "layer"),
		CacheStale:   f("cache_stale_serves_total", "Expired entries served because the registry failed (stale-if-error).", "layer"),
		Evictions:    f("cache_evictions_total", "Entries evicted from the size-bounded caches.", "layer"),
		RefreshAhead: f("refresh_ahead_total", "Background refreshes of entries in use before they expire, by result (ok, error).", "layer", "result"),
		Shared:       f("singleflight_shared_total", "Lookups that joined a registry fetch already in flight instead of starting one.", "layer"),
		Requests: f("registry_requests_total", "HTTP requests sent to registries, every attempt, by kind (ping, token, tags, manifest, blob, other), method and status: "+
			"the HTTP code; error (no answer: connection, TLS, timeout); https-fallback (an https ping that failed and was followed by a plain-HTTP ping "+
			"of the same registry, counted with its own status, as go-containerregistry does for insecure, loopback and private registries; "+
			"a failed https ping with no such follower counts as error, up to 5s later); canceled (the caller stopped waiting, e.g. the ping that lost the https/http race).",
			"registry", "kind", "method", "status"),
		RateLimitWait: h("ratelimit_wait_seconds", "Time a registry request waited for its registry's rate limit (token bucket and Retry-After pauses).",
			[]float64{0, .001, .01, .05, .1, .25, .5, 1, 2, 5, 10, 30}, "registry"),
		Pauses: f("ratelimit_pauses_total", "Registry answers (429) with Retry-After that paused requests: to the repository the request named, "+
			"else to the whole registry; each pause capped (5m by default).", "registry"),
		paused: &pauseCollector{desc: prometheus.NewDesc(Namespace+"_ratelimit_paused_seconds",
			"Seconds left of the longest Retry-After pause of a registry (of the whole host or of one of its repositories), 0 when none; "+
				"a series for every registry paused since start.", []string{"registry"}, nil),
			limit: prometheus.NewDesc(Namespace+"_registry_concurrency_limit",
				"Requests the adaptive governor lets be in flight to a registry now: registryConcurrency at most, halved when the registry "+
					"answers 429 or is overloaded (frequent 502/503/504, no answer), one more per window of good answers.", []string{"registry"}, nil),
			inFlight: prometheus.NewDesc(Namespace+"_registry_requests_in_flight",
				"Requests in flight to a registry (sent, no answer yet).", []string{"registry"}, nil)},
	}
	reg.MustRegister(m.paused)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every layer's series exist from the start, at zero, so dashboards and alerts
	// see them before the first event.
	for _, l := range Layers {
		m.CacheHits.WithLabelValues(l)
		m.CacheMisses.WithLabelValues(l)
		m.Shared.WithLabelValues(l)
		if l == LayerTags || l == LayerHead {
			m.CacheStale.WithLabelValues(l)
			m.RefreshAhead.WithLabelValues(l, "ok")
			m.RefreshAhead.WithLabelValues(l, "error")
		} else {
			m.Evictions.WithLabelValues(l)
		}
	}
	return m
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
		bytes:   prometheus.NewDesc(Namespace+"_cache_bytes", "Bytes accounted to the size-bounded layers (manifest, blob).", []string{"layer"}, nil),
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
		if s.Layer == LayerManifest || s.Layer == LayerBlob {
			ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.Bytes), s.Layer)
		}
	}
}

// pauseCollector reports, at scrape time, the pauses of every Limiter recording
// into the Metrics (the longest per registry host), and the concurrency limits
// and requests in flight of their governors.
type pauseCollector struct {
	desc     *prometheus.Desc
	limit    *prometheus.Desc // registry_concurrency_limit
	inFlight *prometheus.Desc // registry_requests_in_flight
	mu       sync.Mutex
	sources  []weak.Pointer[Limiter] // a Limiter no longer used is dropped
}

// addPauseSource adds a Limiter's pauses (seconds left by registry host) to the
// ratelimit_paused_seconds gauge.
func (m *Metrics) addPauseSource(l *Limiter) {
	m.paused.mu.Lock()
	m.paused.sources = append(m.paused.sources, weak.Make(l))
	m.paused.mu.Unlock()
}

func (c *pauseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	ch <- c.limit
	ch <- c.inFlight
}

func (c *pauseCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	c.sources = slices.DeleteFunc(c.sources, func(p weak.Pointer[Limiter]) bool { return p.Value() == nil })
	var limiters []*Limiter
	for _, p := range c.sources {
		if l := p.Value(); l != nil {
			limiters = append(limiters, l)
		}
	}
	c.mu.Unlock()
	all := map[string]float64{}
	for _, l := range limiters {
		for h, d := range l.pausedSeconds() {
			if cur, ok := all[h]; !ok || d > cur {
				all[h] = d
			}
		}
	}
	for h, d := range all {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, d, h)
	}
	limits := map[string][2]int{}
	for _, l := range limiters {
		for h, st := range l.concurrencyState() {
			cur := limits[h]
			limits[h] = [2]int{cur[0] + st[0], cur[1] + st[1]}
		}
	}
	for h, st := range limits {
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(st[0]), h)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(st[1]), h)
	}
}
