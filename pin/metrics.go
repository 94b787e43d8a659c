package pin

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/promreg"
)

// metricsNamespace prefixes the writer's metric names; it is the daemon's
// (cache.Namespace), spelled here so that pin needs nothing of the registry view.
const metricsNamespace = "argocd_image_resolver"

// Push outcomes, the values of pin_pushes_total's outcome label.
const (
	PushOK       = "ok"       // the branch took the commit
	PushRejected = "rejected" // the branch moved since it was fetched (someone pushed): fetched again and retried
	PushFailed   = "failed"   // any other failure: network, server, credentials, a refused update
)

// writerMetrics are the writer's Prometheus metrics. Labels are bounded: the
// push outcome only; never repositories, branches or apps.
type writerMetrics struct {
	commits   prometheus.Counter
	pushes    *prometheus.CounterVec
	retries   prometheus.Counter
	conflicts prometheus.Counter
	holds     prometheus.Counter
	pending   prometheus.Gauge
	// unconfirmed counts pins the registry did not confirm at commit time, by
	// reason (UnconfirmedNotFound, ...).
	unconfirmed *prometheus.CounterVec
	// pullRequests counts pull requests by action (PRCreated, ...).
	pullRequests *prometheus.CounterVec
}

// newWriterMetrics creates the metrics and registers them with reg (nil: kept
// unregistered). Writers sharing a registry share the metrics: a collector
// already registered is taken over, and pins_pending is only ever moved by
// deltas.
func newWriterMetrics(reg prometheus.Registerer) *writerMetrics {
	m := &writerMetrics{
		commits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "pin_commits_total",
			Help: "Commits of pins pushed to git."}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "pin_pushes_total",
			Help: "Pushes of pin commits, by outcome: ok; rejected (the branch moved since it was fetched: fetched again, re-applied and retried); " +
				"failed (network, server, credentials or a refused update)."}, []string{"outcome"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "pin_push_retries_total",
			Help: "Attempts to commit pins after the first, for a rejected or failed push."}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "pin_conflicts_total",
			Help: "Pins not written because the file held another reference than the one they replace (a person's edit): theirs was kept."}),
		holds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "pin_holds_total",
			Help: "Pins not written because their reference is held: a person replaced it in git (a held: entry of the pins file, written when the branch's history shows the revert)."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "pins_pending",
			Help: "Pins submitted and not yet committed (waiting for their batch window, being pushed, or waiting to retry)."}),
		unconfirmed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "pin_unconfirmed_total",
			Help: "Pins not committed because the registry did not confirm them right before the commit, by reason: not_found (no such tag: the app's change is dropped); " +
				"digest_changed (the tag points at another digest: dropped); registry_error (the registry could not say: tried again in the next round)."}, []string{"reason"}),
		pullRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "pin_pull_requests_total",
			Help: "Pull requests of pins (pin-push pull-request), by action: created; updated (a newer image); unchanged; " +
				"closed-not-reopened (a person closed or merged one with these very references)."}, []string{"action"}),
	}
	if reg == nil {
		return m
	}
	m.commits = promreg.Register(reg, m.commits)
	m.pushes = promreg.Register(reg, m.pushes)
	m.retries = promreg.Register(reg, m.retries)
	m.conflicts = promreg.Register(reg, m.conflicts)
	m.holds = promreg.Register(reg, m.holds)
	m.pending = promreg.Register(reg, m.pending)
	m.pullRequests = promreg.Register(reg, m.pullRequests)
	m.unconfirmed = promreg.Register(reg, m.unconfirmed)
	for _, r := range []string{UnconfirmedNotFound, UnconfirmedMoved, UnconfirmedRegistryError} {
		m.unconfirmed.WithLabelValues(r)
	}
	for _, a := range []string{PRCreated, PRUpdated, PRUnchanged, PRNotReopened} {
		m.pullRequests.WithLabelValues(a)
	}
	// every outcome's series exists from the start, at zero
	for _, o := range []string{PushOK, PushRejected, PushFailed} {
		m.pushes.WithLabelValues(o)
	}
	return m
}

// ForgeObserver returns the forge.Config.Observe of forges of kind: it counts
// their requests in pin_forge_requests_total{forge, operation, code} (code: the
// HTTP status, or "error" when no answer came), registered with reg (nil: kept
// unregistered). Labels are bounded: no repository, branch or app.
func ForgeObserver(reg prometheus.Registerer, kind string) func(op string, status int) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "pin_forge_requests_total",
		Help: "Requests to forges for pull requests of pins, by forge kind, operation and HTTP status (error: no answer)."},
		[]string{"forge", "operation", "code"})
	if reg != nil {
		c = promreg.Register(reg, c)
	}
	return func(op string, status int) {
		code := "error"
		if status > 0 {
			code = strconv.Itoa(status)
		}
		c.WithLabelValues(kind, op, code).Inc()
	}
}
