package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

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

// webhookStartWait bounds how long a daemon's start waits for its webhook
// listener process to serve.
const webhookStartWait = 10 * time.Second

// startWebhookProcess starts the webhook listener process on the daemon's
// listener, registers its counts, and waits for it to serve (for at most
// webhookStartWait: a listener slow to start is logged, and deliveries wait in
// the kernel's backlog meanwhile).
func (d *Daemon) startWebhookProcess(ctx context.Context) error {
	opts := append([]webhook.ProcessOption{webhook.WithProcessLogger(d.log)}, d.hookProcOpts...)
	p, err := webhook.StartProcess(d.hookStart, d.hookLn.(*net.TCPListener), d.hookSecrets, webhookSink{d}, opts...)
	if err != nil {
		return fmt.Errorf("webhooks: %w", err)
	}
	d.hookSecrets = nil // the process has them; the daemon needs them no more
	if err := d.Metrics.Registry.Register(p); err != nil {
		p.Stop(ctx)
		return fmt.Errorf("webhooks: registering the listener's metrics: %w", err)
	}
	d.hookProc = p
	select {
	case <-p.Ready():
	case <-time.After(webhookStartWait):
		d.log.Warn("the webhook listener process is not serving yet", "after", webhookStartWait)
	case <-ctx.Done():
	}
	return nil
}

// webhookSink hands the webhooks' events to the daemon.
type webhookSink struct{ d *Daemon }

// Push implements webhook.Sink.
func (s webhookSink) Push(ctx context.Context, ev webhook.Event) (bool, error) {
	return s.d.pushed(ctx, push{kind: ev.Kind, registry: ev.Registry, repository: ev.Repository, tag: ev.Tag, at: s.d.Registry.Now()}, true), nil
}
