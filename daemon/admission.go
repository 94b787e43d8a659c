package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/render"
)

// ErrRenderQueueFull is wrapped by the error of a render refused because
// renderQueue renders were already waiting for memory.
var ErrRenderQueueFull = errors.New("render queue full")

// admission admits renders against the memory plan: at most plan.Workers at once
// (each may take a worker's memory), at most plan.Queue waiting; a render past
// the queue is refused at once rather than overcommit the container.
type admission struct {
	plan    MemoryPlan
	slots   chan struct{}
	waiting atomic.Int64
	m       *admissionMetrics
}

func newAdmission(plan MemoryPlan, reg prometheus.Registerer) *admission {
	a := &admission{plan: plan, slots: make(chan struct{}, max(plan.Workers, 1))}
	a.m = newAdmissionMetrics(reg, plan, &a.waiting)
	return a
}

// enter waits for room for one render, in the queue, until ctx ends. The render
// must call release when it no longer holds its worker's memory.
func (a *admission) enter(ctx context.Context) (release func(), err error) {
	release = func() { <-a.slots }
	select {
	case a.slots <- struct{}{}:
		a.m.outcomes.WithLabelValues("admitted").Inc()
		return release, nil
	default:
	}
	if n := a.waiting.Add(1); n > int64(a.plan.Queue) {
		a.waiting.Add(-1)
		a.m.outcomes.WithLabelValues("queue-full").Inc()
		return nil, fmt.Errorf("%w: %d renders are running, as many as the memory budget holds (%s), and %d more are waiting, the most renderQueue allows; Argo CD will render this app again",
			ErrRenderQueueFull, a.plan.Workers, config.FormatSize(a.plan.Total), a.plan.Queue)
	}
	defer a.waiting.Add(-1)
	start := time.Now()
	select {
	case a.slots <- struct{}{}:
		a.m.outcomes.WithLabelValues("queued").Inc()
		return release, nil
	case <-ctx.Done():
		a.m.outcomes.WithLabelValues("gave-up").Inc()
		return nil, fmt.Errorf("%w (%w): waited %s for memory while %d renders ran, as many as the memory budget holds (%s)",
			render.ErrDeadline, context.Cause(ctx), time.Since(start).Round(time.Millisecond), a.plan.Workers, config.FormatSize(a.plan.Total))
	}
}

// admittedRenderer renders once admitted.
type admittedRenderer struct {
	r render.Renderer
	a *admission
}

// Open waits for admission, then opens the render with r. The admission is held
// until the session is closed: its worker holds the render's memory until its
// manifests are written.
func (ar admittedRenderer) Open(ctx context.Context, dir string, opts render.Options) (render.Session, error) {
	release, err := ar.a.enter(ctx)
	if err != nil {
		return nil, err
	}
	s, err := ar.r.Open(ctx, dir, opts)
	if err != nil {
		release()
		return nil, err
	}
	return &admittedSession{Session: s, release: release}, nil
}

// admittedSession releases its admission when closed.
type admittedSession struct {
	render.Session
	release func()
	once    sync.Once
}

func (s *admittedSession) Close() {
	s.Session.Close()
	s.once.Do(s.release)
}

type admissionMetrics struct {
	outcomes *prometheus.CounterVec
}

func newAdmissionMetrics(reg prometheus.Registerer, plan MemoryPlan, waiting *atomic.Int64) *admissionMetrics {
	m := &admissionMetrics{outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: cache.Namespace, Name: "render_admissions_total",
		Help: "Renders by admission against the memory budget: admitted (at once), queued (after waiting for memory), queue-full (refused: renderQueue renders were waiting), gave-up (the render's deadline passed while waiting)."}, []string{"outcome"})}
	budget := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: cache.Namespace, Name: "memory_budget_bytes",
		Help: "The memory budget of the daemon and its render workers (part=total), the daemon's share (daemon) and one render worker's (worker)."}, []string{"part"})
	budget.WithLabelValues("total").Set(float64(plan.Total))
	budget.WithLabelValues("daemon").Set(float64(plan.Daemon))
	budget.WithLabelValues("worker").Set(float64(plan.Worker))
	slots := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: cache.Namespace, Name: "render_slots",
		Help: "Renders the memory budget admits at once (renderWorkers, lowered to fit the budget)."})
	slots.Set(float64(plan.Workers))
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: cache.Namespace, Name: "render_queue_waiting",
		Help: "Renders waiting for memory now (at most renderQueue)."}, func() float64 { return float64(waiting.Load()) })
	reg.MustRegister(m.outcomes, budget, slots, queued)
	return m
}
