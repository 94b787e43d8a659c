package config

import (
	"fmt"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/render"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Defaults of the memory budget. The shipped container is limited to 1 GiB:
// the daemon's share and DefaultRenderWorkers workers of
// DefaultRenderWorkerMemory fill it exactly (deploy's TestShippedMemoryFits).
const (
	// DefaultDaemonMemory is the daemon's own share of the budget: its caches
	// (manifestCacheSize, blobCacheSize), tag lists being read, Redis values
	// being decoded (redis.decodeMemory), the answers it relays.
	DefaultDaemonMemory = 256 << 20
	// DefaultRenderWorkerMemory is what one render's worker may use: enough for
	// an app of about 15 MB of manifests of small objects (a parsed YAML node
	// costs about 15 times its text), far more for big ConfigMaps.
	DefaultRenderWorkerMemory = render.DefaultWorkerMemory
	// DefaultRenderQueue is how many renders may wait for memory; past it a
	// render is refused at once, and Argo CD renders the app again later.
	DefaultRenderQueue = 16
	// minMemoryBudget is the least memoryBudget accepted.
	minMemoryBudget = 64 << 20
)

// MemoryBudgetAuto is the memoryBudget that follows the container: GOMEMLIMIT,
// else the cgroup's memory limit (the daemon reads them at start).
const MemoryBudgetAuto = "auto"

// memorySettings are the settings of the memory budget (see docs/configuration.md,
// "Memory").
func memorySettings() []Setting {
	return []Setting{
		{Key: "memoryBudget", Env: "IMAGE_RESOLVER_MEMORY_BUDGET", Flag: "memory-budget", Type: "bytes",
			Usage: `memory of the daemon and its render workers together; "auto": GOMEMLIMIT, else the container's cgroup limit`,
			set: func(c *Config, v string) error {
				if s := strings.TrimSpace(v); s == MemoryBudgetAuto || s == "" {
					c.MemoryBudget = 0
					return nil
				}
				n, err := ParseSize(v)
				if err != nil || n < minMemoryBudget {
					return &resolve.InputError{Value: v, Accepted: fmt.Sprintf("%q, or %s, at least %s", MemoryBudgetAuto, sizeAccepted, FormatSize(minMemoryBudget))}
				}
				c.MemoryBudget = n
				return nil
			},
			get: func(c *Config) string {
				if c.MemoryBudget == 0 {
					return MemoryBudgetAuto
				}
				return FormatSize(c.MemoryBudget)
			}},
		sizeSetting("daemonMemory", "IMAGE_RESOLVER_DAEMON_MEMORY", "daemon-memory", "the daemon's own share of memoryBudget (caches, Redis values, answers); the rest is for render workers",
			func(c *Config) *int64 { return &c.DaemonMemory }),
		intSetting("renderQueue", "IMAGE_RESOLVER_RENDER_QUEUE", "render-queue", "renders that may wait for a worker's memory; past it a render is refused at once (Argo CD renders again)",
			func(c *Config) *int { return &c.RenderQueue }),
	}
}
