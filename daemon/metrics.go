package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
)

// Metrics are the daemon's own metrics, registered beside the registry view's
// (cache.Metrics) in its registry, so /metrics serves both.
type Metrics struct {
	*cache.Metrics

	Resolutions *prometheus.HistogramVec // strategy, result
	Batches     *prometheus.HistogramVec // result

	// The refresh loop's.
	Refreshes   *prometheus.CounterVec // outcome
	TrackedApps prometheus.Gauge
	// HeldImages counts the images held over the tracked apps (pin.Hold).
	HeldImages prometheus.Gauge
	Forgotten  *prometheus.CounterVec // reason
	// PushToRefresh is the time from a push's announcement (a registry webhook,
	// here or on another replica) to the refresh or pin commit it led to.
	PushToRefresh prometheus.Histogram
	// InvalidTags counts listed tags skipped because they break the OCI tag grammar.
	InvalidTags *prometheus.CounterVec // registry
	// SignatureSkips counts candidates skipped for want of a satisfying signature.
	SignatureSkips *prometheus.CounterVec // registry
}

// NewMetrics adds the daemon's metrics to m's registry (a new cache.Metrics when
// m is nil).
func NewMetrics(m *cache.Metrics) *Metrics {
	if m == nil {
		m = cache.NewMetrics()
	}
	latency := []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	h := func(name, help string, labels ...string) *prometheus.HistogramVec {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: cache.Namespace, Name: name, Help: help, Buckets: latency}, labels)
		m.Registry.MustRegister(v)
		return v
	}
	refreshes := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: cache.Namespace, Name: "refreshes_total",
		Help: "Refreshes of Applications by the refresh loop, by outcome: requested, already-pending (the annotation was set already), skipped-interval (a change held back because the app was refreshed less than an interval ago), failed (retried with backoff), app-gone."}, []string{"outcome"})
	tracked := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: cache.Namespace, Name: "tracked_apps",
		Help: "Apps the refresh loop watches (rendered through this daemon, not opted out)."})
	held := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: cache.Namespace, Name: "held_images",
		Help: "Images held over the tracked apps: references a person rolled back in git, named by held: in an app's pins file at its last render, that the refresh loop does not pin again."})
	forgotten := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: cache.Namespace, Name: "tracked_apps_forgotten_total",
		Help: "Apps the refresh loop stopped watching, by reason: idle (not rendered for forgetAfter), limit (maxTrackedApps reached; least recently rendered first), app-gone, opted-out, no-images (the app's render resolved no image any more)."}, []string{"reason"})
	invalid := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: cache.Namespace, Name: "invalid_tags_skipped_total",
		Help: "Tags a registry listed that break the OCI tag grammar, skipped (never chosen, never printed raw), by registry; counted once per resolution that met them."}, []string{"registry"})
	sigSkips := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: cache.Namespace, Name: "signature_skips_total",
		Help: "Candidates skipped because no signature satisfied the requirement (unsigned, signed by another identity or key, a signature that does not verify), by registry; counted once per resolution that skipped them. A rising rate means images are pushed unsigned or signed by someone else."}, []string{"registry"})
	pushToRefresh := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: cache.Namespace, Name: "webhook_refresh_seconds",
		Help: "Time from a push announced by a registry webhook to the hard refresh (or pin commit) of an app it changed: the repository's tag list read again, the app re-resolved, Argo CD asked.", Buckets: latency})
	m.Registry.MustRegister(refreshes, tracked, held, forgotten, invalid, sigSkips, pushToRefresh)
	return &Metrics{
		Metrics:        m,
		Resolutions:    h("resolution_duration_seconds", "Time to resolve one image, by strategy and result (ok, no-tag, input, registry, internal).", "strategy", "result"),
		Batches:        h("batch_duration_seconds", "Time to answer one batch on the socket API, by result (ok, error).", "result"),
		Refreshes:      refreshes,
		PushToRefresh:  pushToRefresh,
		TrackedApps:    tracked,
		HeldImages:     held,
		Forgotten:      forgotten,
		InvalidTags:    invalid,
		SignatureSkips: sigSkips,
	}
}
