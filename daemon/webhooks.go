package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/webhook"
)

// newWebhookHandler builds the registry webhooks' handler from the webhooks:
// section and its secrets (nil when webhookAddr is off). With a listener
// process, it only reads the secrets, kept for the process (d.hookSecrets).
func (d *Daemon) newWebhookHandler(o options) (http.Handler, error) {
	if d.cfg.WebhookAddr == "" {
		return nil, nil
	}
	secrets, err := d.cfg.Webhooks.Secrets()
	if err != nil {
		return nil, err
	}
	if o.hookListener != nil {
		if err := webhook.CheckSecrets(secrets); err != nil {
			return nil, fmt.Errorf("webhooks: %w", err)
		}
		d.hookSecrets = secrets
		return nil, nil
	}
	extra := o.hookOpts
	h, err := webhook.NewHandler(webhook.Secrets(secrets), webhookSink{d},
		append([]webhook.Option{webhook.WithRegisterer(d.Metrics.Registry), webhook.WithLogger(d.log)}, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	return h, nil
}

// webhookKinds names the webhooks served, for the start-up line.
func (d *Daemon) webhookKinds() string {
	if d.hookLn == nil {
		return "off"
	}
	var kinds []string
	for k := range d.cfg.Webhooks {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	where := "in process"
	if d.hookStart != nil {
		where = "in a listener process"
	}
	return strings.Join(kinds, ",") + " on " + d.WebhookAddr() + ", " + where
}

// startWebhookProcess starts the webhook listener process on the daemon's
// listener and registers its counts. It does not wait for the process to
// serve: deliveries wait in the kernel's backlog meanwhile, and the daemon's
// readiness is its renders', not the listener's.
func (d *Daemon) startWebhookProcess() error {
	opts := append([]webhook.ProcessOption{webhook.WithProcessLogger(d.log)}, d.hookProcOpts...)
	p, err := webhook.StartProcess(d.hookStart, d.hookLn.(*net.TCPListener), d.hookSecrets, webhookSink{d}, opts...)
	if err != nil {
		return fmt.Errorf("webhooks: %w", err)
	}
	d.hookSecrets = nil // the process keeps them for its restarts; the daemon needs them no more
	if err := d.Metrics.Registry.Register(p); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		p.Stop(ctx)
		return fmt.Errorf("webhooks: registering the listener's metrics: %w", err)
	}
	d.hookProc = p
	return nil
}

// webhookSink hands the webhooks' events to the daemon.
type webhookSink struct{ d *Daemon }

// Push implements webhook.Sink.
func (s webhookSink) Push(ctx context.Context, ev webhook.Event) (bool, error) {
	return s.d.pushed(ctx, push{kind: ev.Kind, registry: ev.Registry, repository: ev.Repository, tag: ev.Tag, at: s.d.Registry.Now()}, true), nil
}
