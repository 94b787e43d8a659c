package daemon

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/webhook"
)

// newWebhookHandler builds the registry webhooks' handler from the webhooks:
// section and its secrets (nil when webhookAddr is off).
func (d *Daemon) newWebhookHandler(extra ...webhook.Option) (http.Handler, error) {
	if d.cfg.WebhookAddr == "" {
		return nil, nil
	}
	secrets, err := d.cfg.Webhooks.Secrets()
	if err != nil {
		return nil, err
	}
	h, err := webhook.NewHandler(webhook.Secrets(secrets), webhookSink{d},
		append([]webhook.Option{webhook.WithRegisterer(d.Metrics.Registry), webhook.WithLogger(d.log)}, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	return h, nil
}

// webhookKinds names the webhooks served, for the start-up line.
func (d *Daemon) webhookKinds() string {
	if d.webhooks == nil {
		return "off"
	}
	var kinds []string
	for k := range d.cfg.Webhooks {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return strings.Join(kinds, ",") + " on " + d.cfg.WebhookAddr
}

// maxWebhookConns bounds the webhook listener's connections at once: a
// registry sends on a few, and each held costs a goroutine and its buffers.
const maxWebhookConns = 256

// newWebhookServer serves the webhooks with bounds for callers from anywhere:
// headers within 5s, a whole request within 10s, idle connections closed.
func newWebhookServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 32 << 10}
}

// webhookSink hands the webhooks' events to the daemon.
type webhookSink struct{ d *Daemon }

// Push implements webhook.Sink.
func (s webhookSink) Push(ctx context.Context, ev webhook.Event) bool {
	return s.d.pushed(ctx, push{kind: ev.Kind, registry: ev.Registry, repository: ev.Repository, tag: ev.Tag, at: s.d.Registry.Now()}, true)
}
