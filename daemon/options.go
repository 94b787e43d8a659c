package daemon

import (
	"log/slog"
	"os/exec"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/webhook"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Option configures a Daemon beyond its Config.
type Option func(*options)

type options struct {
	log          *slog.Logger
	remoteOpts   []resolve.RemoteOption
	notifier     Notifier
	refreshEvery time.Duration
	worker       func() *exec.Cmd
	hookListener func() *exec.Cmd

	// Test hooks, set by this package's tests only (withCacheOptions,
	// withPinWriterOptions, withResolvedHook).
	cacheOpts []cache.Option
	pinOpts   []pin.WriterOption
	resolved  func(app string, req resolve.Request)
	hookOpts  []webhook.Option
	hookProc  []webhook.ProcessOption
}

// withWebhookOptions adds options of the webhook handler served in the daemon's
// process (benchmarks: the rate limit lifted, to measure every event of a flood
// handled).
func withWebhookOptions(opts ...webhook.Option) Option {
	return func(o *options) { o.hookOpts = append(o.hookOpts, opts...) }
}

// withWebhookProcessOptions adds options of the webhook listener process
// (tests: its limits).
func withWebhookProcessOptions(opts ...webhook.ProcessOption) Option {
	return func(o *options) { o.hookProc = append(o.hookProc, opts...) }
}

// withCacheOptions adds options of the registry cache after the configuration's
// (tests: a clock the test advances past a TTL).
func withCacheOptions(opts ...cache.Option) Option {
	return func(o *options) { o.cacheOpts = append(o.cacheOpts, opts...) }
}

// withPinWriterOptions adds options of the pin writer the daemon builds (tests: a
// hook told when a batch has been written).
func withPinWriterOptions(opts ...pin.WriterOption) Option {
	return func(o *options) { o.pinOpts = append(o.pinOpts, opts...) }
}

// withResolvedHook is told when a resolution run in the daemon's time has ended
// (tests: a cold resolution that goes on after its render gave up).
func withResolvedHook(f func(app string, req resolve.Request)) Option {
	return func(o *options) { o.resolved = f }
}

// WithRenderWorkers makes the daemon render in worker processes started by start
// (a command running render.ServeWorker: `argocd-image-resolver render-worker`), at
// most cfg.RenderWorkers at once, so that a render past its deadline or memory bound,
// or whose caller left, is stopped for real. Without it, renders run in the
// daemon's process.
func WithRenderWorkers(start func() *exec.Cmd) Option { return func(o *options) { o.worker = start } }

// WithWebhookListener makes the daemon serve the registry webhooks in a process
// of its own, started by start (a command running webhook.ServeProcess:
// `argocd-image-resolver webhook-listener`), at a lower priority than the
// daemon and its render workers, so that a flood of deliveries cannot slow the
// renders: Go's scheduler has no priorities among goroutines, the kernel's has
// among processes. The daemon holds the listener; the process is started again
// if it exits. Without it, the webhooks are served in the daemon's process.
func WithWebhookListener(start func() *exec.Cmd) Option {
	return func(o *options) { o.hookListener = start }
}

// WithNotifier gives the refresh loop the way to ask Argo CD for a render
// (notify.Kubernetes). Without one, or with refresh: off, the loop does not run.
func WithNotifier(n Notifier) Option { return func(o *options) { o.notifier = n } }

// WithRefreshEvery sets the time between two passes of the refresh loop (default:
// a quarter of the tag TTL, between 1s and 30s).
func WithRefreshEvery(d time.Duration) Option { return func(o *options) { o.refreshEvery = d } }

// refreshEvery is the default time between two passes of the refresh loop: often
// enough that a tag list is re-read soon after it expires (a pass over fresh
// entries costs no request).
func refreshEvery(tagTTL time.Duration) time.Duration {
	return min(max(tagTTL/4, time.Second), 30*time.Second)
}

// WithLogger sets the daemon's logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithRemoteOptions adds options of the registry client, after the configuration's
// (tests: a keychain, a faster retry policy).
func WithRemoteOptions(opts ...resolve.RemoteOption) Option {
	return func(o *options) { o.remoteOpts = append(o.remoteOpts, opts...) }
}
