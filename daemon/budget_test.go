package daemon

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/render"
)

func TestPlanMemory(t *testing.T) {
	const mi = 1 << 20
	cgroup := func(files map[string]string) string {
		dir := t.TempDir()
		for name, v := range files {
			os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, tc := range []struct {
		name      string
		budget    int64 // memoryBudget setting
		gomem     string
		cgroup    map[string]string
		total     int64
		source    string
		workers   int
		lowered   bool
		wantError string
	}{
		{name: "setting wins", budget: 2048 * mi, gomem: "512MiB", total: 2048 * mi, source: "memoryBudget", workers: 3},
		{name: "GOMEMLIMIT", gomem: "1GiB", total: 1024 * mi, source: "GOMEMLIMIT", workers: 3},
		{name: "GOMEMLIMIT bytes", gomem: "1073741824", total: 1024 * mi, source: "GOMEMLIMIT", workers: 3},
		{name: "cgroup v2", cgroup: map[string]string{"memory.max": "805306368"}, total: 768 * mi, source: "the cgroup's memory.max", workers: 2, lowered: true},
		{name: "cgroup v2 unlimited, v1 set", cgroup: map[string]string{"memory.max": "max", "memory/memory.limit_in_bytes": "1073741824"}, total: 1024 * mi, source: "the cgroup's memory/memory.limit_in_bytes", workers: 3},
		{name: "cgroup v1 unlimited", cgroup: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712"}, total: 1024 * mi, source: "daemonMemory + renderWorkers", workers: 3},
		{name: "GOMEMLIMIT off", gomem: "off", total: 1024 * mi, source: "daemonMemory + renderWorkers", workers: 3},
		{name: "too small for one render", gomem: "400MiB", wantError: "memory budget 400MiB (from GOMEMLIMIT) cannot hold the daemon's share, daemonMemory 256MiB, and one render, renderWorkerMemory 256MiB"},
		{name: "bad GOMEMLIMIT", gomem: "1G", wantError: `GOMEMLIMIT "1G"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.DefaultConfig()
			cfg.MemoryBudget = tc.budget
			src := memorySources{getenv: func(k string) string {
				if k == "GOMEMLIMIT" {
					return tc.gomem
				}
				return ""
			}, cgroupRoot: cgroup(tc.cgroup)}
			p, err := planMemory(cfg, src)
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("error %v, want %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Total != tc.total || !strings.HasPrefix(p.Source, tc.source) || p.Workers != tc.workers || p.Lowered != tc.lowered {
				t.Errorf("plan %+v, want total %d from %q, %d workers, lowered %v", p, tc.total, tc.source, tc.workers, tc.lowered)
			}
		})
	}
}

// TestAdmission: renders beyond the plan's workers wait in the queue, beyond the
// queue they are refused at once with a message naming renderQueue, and a
// waiting render whose deadline passes gives up with ErrDeadline.
func TestAdmission(t *testing.T) {
	a := newAdmission(MemoryPlan{Total: 768 << 20, Workers: 2, Queue: 1}, prometheus.NewRegistry())
	ctx := t.Context()
	r1, err1 := a.enter(ctx)
	r2, err2 := a.enter(ctx)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	queued := make(chan error, 1)
	go func() {
		r, err := a.enter(ctx)
		if err == nil {
			defer r()
		}
		queued <- err
	}()
	for a.waiting.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	if _, err := a.enter(ctx); !errors.Is(err, ErrRenderQueueFull) || !strings.Contains(err.Error(), "renderQueue") {
		t.Fatalf("a render past the queue: %v, want ErrRenderQueueFull naming renderQueue", err)
	}
	r1()
	if err := <-queued; err != nil {
		t.Fatalf("the queued render: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	// r2 and the queued one's slot (released) leave one free: take it, then wait.
	r3, err := a.enter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.enter(short); !errors.Is(err, render.ErrDeadline) {
		t.Fatalf("a render whose deadline passed while waiting: %v, want ErrDeadline", err)
	}
	r2()
	r3()
}

func TestWorkerWithMemoryLimit(t *testing.T) {
	start := workerWithMemoryLimit(func() *exec.Cmd {
		c := exec.Command("true")
		c.Env = []string{"PATH=/bin", "GOMEMLIMIT=1GiB"}
		return c
	}, 256<<20)
	env := start().Env
	if strings.Join(env, " ") != "PATH=/bin GOMEMLIMIT=241591905" {
		t.Errorf("worker environment %q, want GOMEMLIMIT at nine tenths of 256MiB and not the container's", env)
	}
}
