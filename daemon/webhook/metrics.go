package webhook

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
	outcomeUnavailable  = "unavailable"  // the daemon did not take the push: the sender retries
)

var outcomes = []string{
	outcomeAccepted, outcomeUnused, outcomeIgnored, outcomeReplay,
	outcomeInvalid, outcomeUnauthorized, outcomeTooLarge, outcomeRateLimited, outcomeUnavailable,
}

// eventsHelp describes webhook_events_total.
const eventsHelp = "Registry webhook deliveries, by kind and outcome: accepted (a push of a repository some app uses), " +
	"unused (a push no app uses), ignored (valid, not a push), replay (a delivery already handled), " +
	"invalid (malformed or of the wrong shape), unauthorized (no valid secret), too-large (body over the bound), " +
	"rate-limited, unavailable (the daemon did not take the push; answered 503 for the sender to retry). A body carrying several events counts each one."

// newEventsCounter makes webhook_events_total and registers it on reg (when not
// nil); a counter of the same name already there is reused, so two handlers can
// share a registry.
func newEventsCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace,
		Name:      "webhook_events_total",
		Help:      eventsHelp,
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

// counts are the handler's webhook_events_total series, for the parent of a
// listener process.
func (h *Handler) counts() []count {
	ch := make(chan prometheus.Metric, 64)
	go func() { h.events.Collect(ch); close(ch) }()
	var out []count
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil || pb.Counter == nil {
			continue
		}
		c := count{Value: pb.Counter.GetValue()}
		for _, l := range pb.Label {
			switch l.GetName() {
			case "kind":
				c.Kind = l.GetValue()
			case "outcome":
				c.Outcome = l.GetValue()
			}
		}
		out = append(out, c)
	}
	return out
}
