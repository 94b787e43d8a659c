package daemon

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
)

// MemoryPlan is how the daemon splits its memory budget: its own share, and
// renders admitted against the rest, one worker's memory each.
type MemoryPlan struct {
	// Total is the budget, from Source: the memoryBudget setting, GOMEMLIMIT,
	// the cgroup's limit, or (no limit found) the configured parts summed.
	Total  int64
	Source string
	// Daemon is the daemon's own share (daemonMemory).
	Daemon int64
	// Worker is one render's worker memory (renderWorkerMemory).
	Worker int64
	// Workers is how many renders run at once: renderWorkers, lowered when the
	// budget holds fewer (Lowered says so).
	Workers int
	Lowered bool
	// Queue is how many renders may wait for memory (renderQueue).
	Queue int
}

// Where PlanMemory looks for the container's limit.
type memorySources struct {
	getenv     func(string) string
	cgroupRoot string // /sys/fs/cgroup
}

var hostMemorySources = memorySources{getenv: os.Getenv, cgroupRoot: "/sys/fs/cgroup"}

// PlanMemory splits the budget of cfg (memoryBudget, else GOMEMLIMIT, else the
// cgroup's memory limit) between the daemon and its render workers. A budget
// that cannot hold the daemon's share and one render is an error naming the
// settings; one that holds fewer renders than renderWorkers lowers their number
// (Lowered), which the daemon logs.
func PlanMemory(cfg config.Config) (MemoryPlan, error) {
	return planMemory(cfg, hostMemorySources)
}

func planMemory(cfg config.Config, src memorySources) (MemoryPlan, error) {
	p := MemoryPlan{Daemon: cfg.DaemonMemory, Worker: cfg.RenderWorkerMemory, Workers: cfg.RenderWorkers, Queue: cfg.RenderQueue}
	switch total, source, err := containerLimit(cfg, src); {
	case err != nil:
		return p, err
	case total == 0:
		p.Total = p.Daemon + int64(p.Workers)*p.Worker
		p.Source = "daemonMemory + renderWorkers × renderWorkerMemory (no memoryBudget, GOMEMLIMIT or cgroup limit found)"
		return p, nil
	default:
		p.Total, p.Source = total, source
	}
	fit := (p.Total - p.Daemon) / max(p.Worker, 1)
	if fit < 1 {
		return p, fmt.Errorf("memory budget %s (from %s) cannot hold the daemon's share, daemonMemory %s, and one render, renderWorkerMemory %s: raise the container's memory limit or memoryBudget, or lower daemonMemory or renderWorkerMemory",
			config.FormatSize(p.Total), p.Source, config.FormatSize(p.Daemon), config.FormatSize(p.Worker))
	}
	if fit < int64(p.Workers) {
		p.Workers, p.Lowered = int(fit), true
	}
	return p, nil
}

// containerLimit is the memory budget and where it came from: the setting,
// GOMEMLIMIT, the cgroup v2 or v1 limit; 0 when none is set.
func containerLimit(cfg config.Config, src memorySources) (int64, string, error) {
	if cfg.MemoryBudget > 0 {
		return cfg.MemoryBudget, "memoryBudget", nil
	}
	if v := strings.TrimSpace(src.getenv("GOMEMLIMIT")); v != "" && v != "off" {
		n, err := parseGoMemLimit(v)
		if err != nil {
			return 0, "", fmt.Errorf("GOMEMLIMIT %q: %w; accepted: bytes with an optional unit B, KiB, MiB, GiB or TiB (as the Go runtime reads it), or off", v, err)
		}
		return n, "GOMEMLIMIT", nil
	}
	for _, f := range []string{"memory.max", "memory/memory.limit_in_bytes"} {
		raw, err := os.ReadFile(filepath.Join(src.cgroupRoot, f))
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(raw))
		n, err := strconv.ParseInt(s, 10, 64)
		// v2 says "max"; v1 says a number near MaxInt64 when unlimited.
		if s == "max" || err != nil || n <= 0 || n > math.MaxInt64/2 {
			continue
		}
		return n, "the cgroup's " + f, nil
	}
	return 0, "", nil
}

// parseGoMemLimit reads GOMEMLIMIT as the Go runtime does: a number of bytes with
// an optional unit suffix B, KiB, MiB, GiB or TiB.
func parseGoMemLimit(v string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if s, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = s, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("not a positive number of bytes")
	}
	if n > math.MaxInt64/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}

// String is the plan as the start-up log says it.
func (p MemoryPlan) String() string {
	s := fmt.Sprintf("%s from %s: daemon %s, %d render(s) of %s at once, %d waiting at most",
		config.FormatSize(p.Total), p.Source, config.FormatSize(p.Daemon), p.Workers, config.FormatSize(p.Worker), p.Queue)
	if p.Lowered {
		s += " (renderWorkers lowered to fit)"
	}
	return s
}

// workerWithMemoryLimit starts workers with GOMEMLIMIT at nine tenths of their
// bound, so that their garbage collector works to stay below it rather than
// under the container-wide GOMEMLIMIT they would inherit (each would believe it
// had the whole container).
func workerWithMemoryLimit(start func() *exec.Cmd, bound int64) func() *exec.Cmd {
	return func() *exec.Cmd {
		cmd := start()
		env := cmd.Env
		if env == nil {
			env = os.Environ()
		}
		env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "GOMEMLIMIT=") })
		cmd.Env = append(env, "GOMEMLIMIT="+strconv.FormatInt(bound/10*9, 10))
		return cmd
	}
}
