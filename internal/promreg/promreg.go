// Package promreg registers Prometheus collectors so that the parts made twice on
// one registry (a second Redis tier on the same cache metrics, a second pin
// writer) share one series instead of failing on the name.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg, or returns the collector of the same type
// already registered under its name, for the caller to record into. Any other
// registration error panics, as prometheus.MustRegister does.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
