package promreg_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/promreg"
)

func TestRegisterSharesTheFirst(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "things_total", Help: "Things."}
	first := promreg.Register(reg, prometheus.NewCounter(opts))
	second := promreg.Register(reg, prometheus.NewCounter(opts))
	if second != first {
		t.Fatalf("the second registration did not return the first collector")
	}
	defer func() {
		if recover() == nil {
			t.Errorf("a conflicting collector did not panic")
		}
	}()
	// the same name with other help is a conflict, not a second registration
	promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "things_total", Help: "Other things."}))
}
