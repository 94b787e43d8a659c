package deploy

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon"
)

// checkMemoryFits checks that the daemon container c, as shipped, runs its
// renders within its memory limit.
func checkMemoryFits(t *testing.T, c *corev1.Container) {
	t.Helper()
	plan, err := memoryPlanOf(c)
	if err != nil {
		t.Error(err)
		return
	}
	t.Logf("%s: %s", c.Name, plan)
}

// memoryPlanOf is the memory plan of the daemon in container c: the settings its
// environment gives (the defaults otherwise) under its memory limit, as
// GOMEMLIMIT from limits.memory gives it. It is an error when the daemon's share
// and renderWorkers workers of renderWorkerMemory do not fit the limit (the
// daemon would lower renderWorkers), or the container sets its own memoryBudget.
func memoryPlanOf(c *corev1.Container) (daemon.MemoryPlan, error) {
	limit := c.Resources.Limits.Memory().Value()
	if limit <= 0 {
		return daemon.MemoryPlan{}, fmt.Errorf("%s has no memory limit", c.Name)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	cfg := config.DefaultConfig()
	if err := cfg.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		return daemon.MemoryPlan{}, fmt.Errorf("%s environment: %w", c.Name, err)
	}
	if cfg.MemoryBudget != 0 {
		return daemon.MemoryPlan{}, fmt.Errorf("%s sets memoryBudget %s: the shipped budget follows the container's limit", c.Name, config.FormatSize(cfg.MemoryBudget))
	}
	cfg.MemoryBudget = limit
	plan, err := daemon.PlanMemory(cfg)
	if err != nil {
		return plan, fmt.Errorf("%s: %w", c.Name, err)
	}
	if want := plan.Daemon + int64(cfg.RenderWorkers)*plan.Worker; plan.Lowered || want > limit {
		return plan, fmt.Errorf("%s: daemonMemory %s + renderWorkers %d × renderWorkerMemory %s = %s, over its memory limit %s",
			c.Name, config.FormatSize(plan.Daemon), cfg.RenderWorkers, config.FormatSize(plan.Worker), config.FormatSize(want), config.FormatSize(limit))
	}
	return plan, nil
}

// TestMemoryPlanRefusesOvercommit: the check fails a container whose settings
// do not fit its limit (what it guards against: workers of 1 GiB each in a
// 1 GiB container), and passes one whose limit holds them.
func TestMemoryPlanRefusesOvercommit(t *testing.T) {
	c := corev1.Container{Name: "image-resolver", Env: []corev1.EnvVar{
		{Name: "IMAGE_RESOLVER_RENDER_WORKERS", Value: "4"}, {Name: "IMAGE_RESOLVER_RENDER_WORKER_MEMORY", Value: "1GiB"}}}
	for _, tc := range []struct {
		limit string
		fits  bool
	}{{"1Gi", false}, {"4Gi", false}, {"5Gi", true}} {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(tc.limit)}
		plan, err := memoryPlanOf(&c)
		if (err == nil) != tc.fits {
			t.Errorf("limit %s: plan %s, error %v; want fits=%v", tc.limit, plan, err, tc.fits)
		}
	}
}
