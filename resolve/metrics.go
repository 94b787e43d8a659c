package resolve

import (
	"slices"
	"sync"
	"weak"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricsNamespace prefixes every metric name (cache.Namespace is the same).
const MetricsNamespace = "argocd_image_resolver"

// TransportMetrics are the Prometheus metrics of the registry transport (Limiter):
// every request sent, the waits for rate limits and the Retry-After pauses, and,
// at scrape time, the pauses, concurrency limits and requests in flight of every
// Limiter recording into them. Label values are bounded: registry hosts, request
// kinds, methods and HTTP statuses; never tags or repositories.
type TransportMetrics struct {
	Requests      *prometheus.CounterVec   // registry, kind, method, status
	RateLimitWait *prometheus.HistogramVec // registry
	Pauses        *prometheus.CounterVec   // registry

	paused *pauseCollector // registry: ratelimit_paused_seconds
}

// NewTransportMetrics creates the transport's metrics and registers them in reg.
func NewTransportMetrics(reg prometheus.Registerer) *TransportMetrics {
	f := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: MetricsNamespace, Name: name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	h := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: MetricsNamespace, Name: name, Help: help, Buckets: buckets}, labels)
		reg.MustRegister(v)
		return v
	}
	m := &TransportMetrics{
		Requests: f("registry_requests_total", "HTTP requests sent to registries, every attempt, by kind (ping, token, tags, manifest, blob, other), method and status: "+
			"the HTTP code; error (no answer: connection, TLS, timeout); https-fallback (an https ping that failed and was followed by a plain-HTTP ping "+
			"of the same registry, counted with its own status, as go-containerregistry does for insecure, loopback and private registries; "+
			"a failed https ping with no such follower counts as error, up to 5s later); canceled (the caller stopped waiting, e.g. the ping that lost the https/http race).",
			"registry", "kind", "method", "status"),
		RateLimitWait: h("ratelimit_wait_seconds", "Time a registry request waited for its registry's rate limit (token bucket and Retry-After pauses).",
			[]float64{0, .001, .01, .05, .1, .25, .5, 1, 2, 5, 10, 30}, "registry"),
		Pauses: f("ratelimit_pauses_total", "Registry answers (429) with Retry-After that paused requests: to the repository the request named, "+
			"else to the whole registry; each pause capped (5m by default).", "registry"),
		paused: &pauseCollector{desc: prometheus.NewDesc(MetricsNamespace+"_ratelimit_paused_seconds",
			"Seconds left of the longest Retry-After pause of a registry (of the whole host or of one of its repositories), 0 when none; "+
				"a series for every registry paused since start.", []string{"registry"}, nil),
			limit: prometheus.NewDesc(MetricsNamespace+"_registry_concurrency_limit",
				"Requests the adaptive governor lets be in flight to a registry now: registryConcurrency at most, halved when the registry "+
					"answers 429 or is overloaded (frequent 502/503/504, no answer), one more per window of good answers.", []string{"registry"}, nil),
			inFlight: prometheus.NewDesc(MetricsNamespace+"_registry_requests_in_flight",
				"Requests in flight to a registry (sent, no answer yet).", []string{"registry"}, nil)},
	}
	reg.MustRegister(m.paused)
	return m
}

// pauseCollector reports, at scrape time, the pauses of every Limiter recording
// into the TransportMetrics (the longest per registry host), and the concurrency
// limits and requests in flight of their governors.
type pauseCollector struct {
	desc     *prometheus.Desc
	limit    *prometheus.Desc // registry_concurrency_limit
	inFlight *prometheus.Desc // registry_requests_in_flight
	mu       sync.Mutex
	sources  []weak.Pointer[Limiter] // a Limiter no longer used is dropped
}

// addPauseSource adds a Limiter's pauses (seconds left by registry host) to the
// ratelimit_paused_seconds gauge.
func (m *TransportMetrics) addPauseSource(l *Limiter) {
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
