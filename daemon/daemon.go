// Package daemon is the long-lived half of the sidecar (`argocd-image-resolver
// serve`, started by `sidecar`):
//
//   - the cached registry view (cache) behind a resolver, shared by every render in
//     the pod, with the Redis tier when replicas share one;
//   - the unix socket API (package api): POST /v1/generate renders an app for the
//     thin generate client (in render workers when configured), POST /v1/resolve
//     answers resolution batches (preview --socket), GET /v1/health; identical
//     requests of one app in flight share one resolution (detachedBatch), and each
//     batch groups its identical requests (resolve.Resolver.ResolveBatch);
//   - the refresh loop: a Tracker of the apps it rendered and their answers, kept
//     across restarts in a watch list (a file, or Redis), and a Refresher that
//     re-resolves them as tag lists expire and asks Argo CD for a hard refresh
//     (Notifier) or commits new pins (PinWriter) when an answer changes;
//   - /metrics, /healthz and /readyz on TCP;
//   - the client and fallback preview uses to reach it.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/webhook"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/compose"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pipeline"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/render"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"golang.org/x/net/netutil"
)

// shutdownTimeout bounds the wait for requests in flight when the daemon stops.
const shutdownTimeout = 10 * time.Second

// Daemon serves the cached registry view to every render in the pod.
type Daemon struct {
	cfg      config.Config
	log      *slog.Logger
	Metrics  *Metrics
	Limiter  *resolve.Limiter
	Registry *cache.Registry
	Resolver *resolve.Resolver
	Server   *Server
	// Tracker and Refresher are the refresh loop; nil when it is off (refresh: off,
	// or no notifier given).
	Tracker   *Tracker
	Refresher *Refresher
	watch     *watchSaver // keeps the Tracker's watch list across restarts
	// revisions are the apps' revisions rendered: a render again is a hard
	// refresh, which reads the tag lists again (rerender.go).
	revisions *renderedRevisions
	// pushes are the repositories announced pushed (webhooks, other replicas),
	// waiting to be read again (pushes.go); shared is the Redis tier (nil: none).
	pushes *pushQueue
	shared *cache.Redis
	// webhooks serves the registry webhooks on webhookAddr in this process (nil:
	// off, or served by the listener process hookProc).
	webhooks http.Handler
	// hookStart starts the webhook listener process (nil: in this process);
	// hookSecrets are its secrets until it starts.
	hookStart    func() *exec.Cmd
	hookSecrets  webhook.Secrets
	hookProcOpts []webhook.ProcessOption
	hookProc     *webhook.Process
	pins         PinWriter
	workers      *render.Workers // nil: renders in this process
	// memory is the budget's split; admit admits renders against it.
	memory MemoryPlan
	admit  *admission
	// batch resolves for renders and the socket API: each resolution in the
	// daemon's time, so a cold one goes on after its caller's deadline.
	batch    *detachedBatch
	life     context.Context
	stopLife context.CancelFunc

	pinErrMu sync.Mutex
	pinErrs  map[string]string // app -> why its last pin write failed

	mu        sync.Mutex
	socketLn  net.Listener
	metricsLn net.Listener
	hookLn    net.Listener
	ready     atomic.Bool
	readyCh   chan struct{}
}

// New validates cfg and builds the daemon; it does not listen yet. The registry
// client, its credentials, rate limits and app scoping are built from cfg by the
// same builders a render without the daemon uses (compose.NewRemote,
// compose.NewResolver).
func New(cfg config.Config, opts ...Option) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := options{log: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	d := &Daemon{cfg: cfg, log: o.log, Metrics: NewMetrics(nil), readyCh: make(chan struct{})}
	// The cache below keeps what the Remote's own memo would.
	remote, limiter, err := compose.NewRemote(cfg, d.Metrics.Metrics, o.log, append([]resolve.RemoteOption{resolve.WithoutMemo()}, o.remoteOpts...)...)
	if err != nil {
		return nil, err
	}
	d.Limiter = limiter
	shared, err := compose.NewRedis(cfg, d.Metrics.Metrics, o.log) // nil without redis.address
	if err != nil {
		return nil, err
	}
	d.shared, d.pushes = shared, newPushQueue()
	d.revisions = newRenderedRevisions(cfg.MaxTrackedApps, cfg.ForgetAfter)
	d.Registry = cache.NewRegistry(remote, append([]cache.Option{
		cache.WithTagTTL(cfg.TagTTL),
		cache.WithHeadTTL(cfg.HeadTTL),
		cache.WithStaleIfError(cfg.StaleIfError),
		cache.WithRefreshAhead(cfg.RefreshAhead),
		cache.WithCacheSizes(cfg.ManifestCacheSize, cfg.BlobCacheSize),
		cache.WithFetchTimeout(cfg.FetchTimeout),
		cache.WithMetrics(d.Metrics.Metrics),
		cache.WithRedis(shared)}, o.cacheOpts...)...)
	verdicts := cache.NewVerdicts(cache.VerdictOptions{Redis: shared, Metrics: d.Metrics.Metrics})
	reads := newReadingRegistry(d.Registry) // tells a render that gave up whether the registry is still being read
	apis := compose.MetadataAPIs(cfg, remote, d.Registry.CachedMetadata, d.Metrics.Metrics, o.log)
	if d.Resolver, err = compose.NewResolver(cfg, reads, verdicts, o.log, resolve.WithObserver(d.Metrics.observeResolution), apis); err != nil {
		d.Registry.Close()
		return nil, err
	}
	d.life, d.stopLife = context.WithCancel(context.Background())
	d.batch = newDetachedBatch(d.life, d.Resolver, reads, cfg.FetchTimeout)
	d.batch.resolved = o.resolved
	d.Server = NewServer(d.batch, d.Metrics, d.log)
	if d.memory, err = PlanMemory(cfg); err != nil {
		d.Registry.Close()
		return nil, err
	}
	d.admit = newAdmission(d.memory, d.Metrics.Registry)
	if shared != nil {
		shared.OnPush(d.heardPush)
	}
	d.hookStart, d.hookProcOpts = o.hookListener, o.hookProc
	if d.webhooks, err = d.newWebhookHandler(o); err != nil {
		d.Registry.Close()
		return nil, err
	}
	if o.worker != nil {
		d.workers = render.NewWorkers(workerWithMemoryLimit(o.worker, d.memory.Worker), d.memory.Workers, render.WithWorkerMemory(d.memory.Worker))
	}
	written := pin.WithOnWritten(func(repo, branch string, res pin.Result) {
		if d.Refresher != nil && d.Refresher.landings != nil {
			d.Refresher.landings.written(repo, branch, res)
		}
	})
	d.pins = compose.NewPinWriter(cfg, o.log, d.Metrics.Registry, append([]pin.WriterOption{pin.WithOnResult(d.pinResult), written, pin.WithConfirmer(compose.PinConfirmer(remote))}, o.pinOpts...)...)
	if cfg.Refresh == config.RefreshHard {
		every := o.refreshEvery
		if every <= 0 {
			every = refreshEvery(cfg.TagTTL)
		}
		d.Tracker = NewTracker(cfg.MaxTrackedApps, cfg.ForgetAfter, cfg.ControlPlaneNamespace, d.Metrics)
		d.Refresher = NewRefresher(d.Tracker, d.Resolver, o.notifier, cfg.RefreshInterval, every, cfg.FetchTimeout, o.log)
		d.Refresher.pins = d.pins
		nr, canNormal := o.notifier.(NormalRefresher)
		tips, canTip := d.pins.(BranchTipper)
		if canNormal && canTip {
			d.Refresher.landings = &landings{notifier: nr, tips: tips, tracker: d.Tracker, m: d.Metrics, now: time.Now,
				watchFor: cfg.ForgetAfter, bases: map[[2]string]*watchedBase{}}
		}
		var store watchStore = newFileStore(filepath.Join(filepath.Dir(cfg.Socket), watchFileName))
		if shared != nil {
			store = &redisStore{r: shared, ttl: cfg.ForgetAfter}
			d.Refresher.claims = shared
		}
		d.watch = &watchSaver{t: d.Tracker, store: store, period: watchSavePeriod, log: o.log, now: make(chan struct{}, 1)}
	}
	return d, nil
}

// socketHandler is the socket API (package api): delegated renders, resolution
// batches (preview --socket), health.
func (d *Daemon) socketHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", d.Server.Handler())
	settings := compose.PipelineSettings(d.cfg)
	settings.Renderer = admittedRenderer{r: render.InProcess{}, a: d.admit}
	if d.workers != nil {
		settings.Renderer = admittedRenderer{r: d.workers, a: d.admit}
	}
	mux.Handle("POST "+api.PathGenerate, GenerateHandler(pipeline.New(d.batch, settings), d.beforeRender, d.afterRender, d.log))
	return mux
}

// Ready is closed once the daemon serves.
func (d *Daemon) Ready() <-chan struct{} { return d.readyCh }

// SaveWatchList asks for the refresh loop's watch list to be saved at once, not at
// the next period: the sidecar calls it when a shutdown begins, so that a restart
// keeps what changed even if the pod is killed before the daemon stops. It does
// not wait for the save; without the refresh loop it does nothing.
func (d *Daemon) SaveWatchList() {
	if d.watch != nil {
		d.watch.saveNow()
	}
}

// MetricsHandler serves /metrics, /healthz and /readyz.
func (d *Daemon) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", d.Metrics.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !d.ready.Load() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	return mux
}

// Run serves until ctx ends, then stops gracefully: not ready, requests in flight
// finished (for up to 10s), the socket removed, background refreshes stopped. It
// returns nil after a stop by ctx, or the error that stopped a server.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.stopLife()
	if d.workers != nil {
		d.prestartWorker(ctx) // before the socket: the first render finds it ready
	}
	if err := d.Listen(); err != nil {
		d.Registry.Close()
		return err
	}
	servers, errc, err := d.serve()
	if err != nil {
		d.Registry.Close()
		return err
	}
	loopCtx, stopLoop := context.WithCancel(context.WithoutCancel(ctx))
	loopsDone := d.startLoops(ctx, loopCtx)
	d.ready.Store(true)
	close(d.readyCh)
	d.logServing()

	select {
	case <-ctx.Done():
		d.log.Info("daemon stopping", "reason", context.Cause(ctx))
	case err = <-errc:
		err = fmt.Errorf("daemon: server stopped: %w", err)
		d.log.Error("daemon failed", "err", err)
	}
	d.ready.Store(false)
	stopLoop()
	loopsDone() // the pin writer flushes what is queued, the watch list saves its last changes: bounded
	return d.shutdown(ctx, servers, err)
}

// serve starts the servers on the daemon's listeners (the webhooks' in their
// listener process, when there is one); a server that stops sends its error on
// errc.
func (d *Daemon) serve() (servers []*http.Server, errc chan error, err error) {
	servers = []*http.Server{newSocketServer(d.socketHandler())}
	listeners := []net.Listener{d.socketLn}
	if d.metricsLn != nil {
		servers = append(servers, &http.Server{Handler: d.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second})
		listeners = append(listeners, d.metricsLn)
	}
	switch {
	case d.hookLn != nil && d.hookStart != nil:
		if err := d.startWebhookProcess(); err != nil {
			for _, ln := range []net.Listener{d.socketLn, d.metricsLn, d.hookLn} {
				if ln != nil {
					ln.Close()
				}
			}
			return nil, nil, err
		}
	case d.hookLn != nil:
		servers = append(servers, webhook.NewServer(d.webhooks))
		listeners = append(listeners, netutil.LimitListener(d.hookLn, webhook.MaxConns))
	}
	errc = make(chan error, len(servers))
	for i, srv := range servers {
		go func() { errc <- srv.Serve(listeners[i]) }()
	}
	return servers, errc, nil
}

// startLoops starts the background loops (refreshes, pushes, the watch list,
// pins) until loopCtx ends; wait returns once they all have.
func (d *Daemon) startLoops(ctx, loopCtx context.Context) (wait func()) {
	var wg sync.WaitGroup
	if d.Refresher != nil {
		wg.Go(func() { d.Refresher.Run(loopCtx) })
	}
	wg.Go(func() { d.runPushes(loopCtx) })
	if d.watch != nil {
		d.watch.load(ctx)
		wg.Go(func() { d.watch.run(loopCtx) })
	}
	if d.pins != nil {
		wg.Go(func() { d.pins.Run(loopCtx) })
	}
	return wg.Wait
}

// logServing logs the start-up line: what the daemon serves, with which settings.
func (d *Daemon) logServing() {
	refresh := "off"
	if d.Refresher != nil {
		refresh = fmt.Sprintf("hard, at most once per %s per app, a pass every %s", d.cfg.RefreshInterval, d.Refresher.every)
		if d.Refresher.notifier == nil {
			refresh = fmt.Sprintf("pins only (no Kubernetes API): pin-mode use apps get new pins, at most once per %s per app, a pass every %s", d.cfg.RefreshInterval, d.Refresher.every)
		}
	}
	d.log.Info("daemon serving", "socket", d.cfg.Socket, "metrics", d.MetricsAddr(),
		"tagTTL", d.cfg.TagTTL, "headTTL", d.cfg.HeadTTL, "staleIfError", d.cfg.StaleIfError,
		"refreshAhead", d.cfg.RefreshAhead, "manifestCacheSize", config.FormatSize(d.cfg.ManifestCacheSize),
		"blobCacheSize", config.FormatSize(d.cfg.BlobCacheSize), "rateLimits", rateLimitsString(d.cfg.EffectiveRateLimits()),
		"registryConcurrency", d.cfg.RegistryConcurrency, "registries", len(d.cfg.Registries), "refresh", refresh,
		"renderWorkers", d.renderWorkers(), "memory", d.memory.String(), "webhooks", d.webhookKinds())
	if d.memory.Lowered {
		d.log.Warn("the memory budget holds fewer renders than renderWorkers", "renderWorkers", d.cfg.RenderWorkers,
			"rendersAtOnce", d.memory.Workers, "memory", d.memory.String())
	}
}

// shutdown stops the servers (requests in flight finished, for up to
// shutdownTimeout), the webhook listener process, the cache and the render
// workers. It returns err, or else the first server's that failed to stop.
func (d *Daemon) shutdown(ctx context.Context, servers []*http.Server, err error) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	for _, srv := range servers {
		if serr := srv.Shutdown(sctx); serr != nil && err == nil && !errors.Is(serr, context.DeadlineExceeded) {
			err = serr
		}
	}
	if d.hookProc != nil {
		d.hookProc.Stop(sctx)
		d.hookLn.Close()
	}
	d.Registry.Close()
	if d.workers != nil {
		d.workers.Close()
	}
	d.log.Info("daemon stopped")
	return err
}

// workerStartWait bounds how long a daemon's start waits for its first render
// worker to answer.
const workerStartWait = 10 * time.Second

// prestartWorker starts a render worker and waits until it answers (for at most
// workerStartWait), before the daemon listens and says it is ready: a render
// sent as soon as the socket answers (the sidecar starts the CMP server only
// then) finds the worker ready rather than waiting for its process to start,
// which made a daemon's first render slower than a render without one (issue
// 27). A worker that does not start is logged; the first render starts another.
func (d *Daemon) prestartWorker(ctx context.Context) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, workerStartWait)
	defer cancel()
	if err := d.workers.Prestart(ctx); err != nil {
		d.log.Warn("no render worker ready at the start; the first render starts one", "err", err,
			"after", time.Since(start).Round(time.Millisecond))
		return
	}
	d.log.Info("render worker ready", "after", time.Since(start).Round(time.Millisecond))
}

// renderWorkers says how renders run, for the start-up log line.
func (d *Daemon) renderWorkers() string {
	if d.workers == nil {
		return "in process"
	}
	return fmt.Sprintf("%d, %s each", d.memory.Workers, config.FormatSize(d.memory.Worker))
}

func rateLimitsString(ls []resolve.RateLimit) string {
	var s []string
	for _, l := range ls {
		s = append(s, l.String())
	}
	return strings.Join(s, ",")
}

// afterRender is what the daemon does with a render it served: remember it for the
// refresh loop, and, when it succeeded, queue the pins it asks for (pin-mode write
// and use): pins of a render Argo CD reports as failed are not committed.
func (d *Daemon) afterRender(env *plugin.Env, report *pipeline.Report, renderErr error) {
	d.revisions.remember(env, report, d.Registry.Now())
	rd, ok := renderOf(env, report)
	if !ok {
		return
	}
	// Without a Kubernetes API only pin-mode use apps can be acted on.
	if d.Tracker != nil && (d.Refresher.notifier != nil || rd.pins != nil) {
		if err := d.Tracker.Remember(rd); err != nil {
			d.log.Warn("render not tracked for refreshes", "app", env.AppName, "err", err)
		}
	}
	if d.pins == nil {
		return
	}
	d.pinErrMu.Lock()
	if msg, ok := d.pinErrs[env.AppName]; ok {
		report.Notes = append(report.Notes, "pins not committed: "+msg+" (the app renders as before; the daemon retries)")
	}
	d.pinErrMu.Unlock()
	if e, ok := report.PinEdit(env.AppName, env.SourcePath); ok && renderErr == nil {
		c := pin.Change{RepoURL: env.SourceRepoURL, Branch: PinBranch(report.Pins.Branch, env.SourceTargetRevision), Edit: e,
			Push: report.Pins.Push, PRGroup: report.Pins.PRGroup}
		if err := pin.CheckChange(c); err != nil {
			// e.g. a target revision that is a tag or a commit: no branch to commit to.
			report.Notes = append(report.Notes, "pins not committed: "+OneLine(err)+" (set the parameter pin-branch to a branch)")
			d.log.Warn("pins not committed", "app", env.AppName, "err", err)
			return
		}
		d.pins.Submit(c)
	}
}

// pinResult records how the last pin write of app ended, for its next render.
func (d *Daemon) pinResult(app string, err error) {
	d.pinErrMu.Lock()
	defer d.pinErrMu.Unlock()
	if err == nil {
		delete(d.pinErrs, app)
		return
	}
	if d.Tracker != nil {
		// Not in git: the loop offers the pins again at its next pass.
		d.Tracker.pinFailed(app)
	}
	if d.pinErrs == nil {
		d.pinErrs = map[string]string{}
	}
	d.pinErrs[app] = OneLine(err)
}
