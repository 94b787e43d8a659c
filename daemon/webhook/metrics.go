package webhook

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// namespace is the daemon's metric namespace.
const namespace = "argocd_image_resolver"

// The outcomes a delivery, or one event in it, is counted under.
const (
	outcomeAccepted     = "accepted"     // a push of a repository some app uses
	outcomeUnused       = "unused"       // a push of a repository no app uses
	outcomeIgnored      = "ignored"      // valid, but not a push
	outcomeReplay       = "replay"       // a delivery already handled
	outcomeInvalid      = "invalid"      // a body that is not the kind's payload
	outcomeUnauthorized = "unauthorized" // no valid secret
	outcomeTooLarge     = "too-large"    // a body over the bound
	outcomeRateLimited  = "rate-limited" // over the listener's rate
)

var outcomes = []string{
	outcomeAccepted, outcomeUnused, outcomeIgnored, outcomeReplay,
	outcomeInvalid, outcomeUnauthorized, outcomeTooLarge, outcomeRateLimited,
}

// newEventsCounter makes webhook_events_total and registers it on reg (when not
// nil); a counter of the same name already there is reused, so two handlers can
// share a registry.
func newEventsCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace,
		Name:      "webhook_events_total",
		Help: "Registry webhook deliveries, by kind and outcome: accepted (a push of a repository some app uses), " +
			"unused (a push no app uses), ignored (valid, not a push), replay (a delivery already handled), " +
			"invalid (malformed or of the wrong shape), unauthorized (no valid secret), too-large (body over the bound), " +
			"rate-limited. A body carrying several events counts each one.",
	}, []string{"kind", "outcome"})
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			if existing, ok := already.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing, nil
			}
		}
		return nil, fmt.Errorf("registering the webhook metrics: %w", err)
	}
	return c, nil
}
