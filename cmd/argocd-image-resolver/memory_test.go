package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/render"
)

// largeApp writes a plain-YAML app of about size bytes of manifests in a new
// directory: a Deployment whose image the policy names, then either ConfigMaps
// of big values (few YAML nodes: cheap to parse) or small Deployments (many
// nodes: a parsed node costs about 15 times its text).
func largeApp(t *testing.T, size int, dense bool) string {
	t.Helper()
	dir := t.TempDir()
	policy := "images:\n  web:\n    image: registry.demo.local/demo/web\n    strategy: semver\n    constraint: \"1.x\"\n"
	if err := os.WriteFile(filepath.Join(dir, ".argocd-image-resolver.yaml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "all.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		if dense {
			fmt.Fprintf(&b, "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-%d\nspec:\n  selector:\n    matchLabels:\n      app: app-%d\n  template:\n    metadata:\n      labels:\n        app: app-%d\n    spec:\n      containers:\n        - name: web\n          image: registry.demo.local/demo/web:1.0.0\n          env:\n            - name: A\n              value: %q\n", i, i, i, strings.Repeat("x", 100))
		} else {
			fmt.Fprintf(&b, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: data-%d\ndata:\n  blob: %s\n", i, strings.Repeat("y", 1<<20))
		}
		if b.Len() > 4<<20 || b.Len() >= size {
			f.WriteString(b.String())
			size -= b.Len()
			b.Reset()
		}
	}
	f.WriteString("---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n        - name: web\n          image: registry.demo.local/demo/web:1.0.0\n")
	return dir
}

// rssOfTree is the resident memory of pid and its render workers, in bytes.
func rssOfTree(t *testing.T, pid int) int64 {
	total := render.ResidentMemory(pid)
	for _, w := range renderWorkers(t, pid) {
		total += render.ResidentMemory(w)
	}
	return total
}

// Several large apps (50 MB of manifests each) and a smaller one rendered at once
// through a daemon under the shipped 1 GiB (GOMEMLIMIT as the container gives
// it): the daemon and its render workers together stay under it, every render
// succeeds or fails with a message that names the bound it met, and each ends
// within the render deadline. With the shipped renderWorkerMemory (256MiB) a
// 50 MB app fails, naming renderWorkerMemory (it needs about 1 GiB parsed); the
// 10 MB one renders.
func TestLargeAppsWithinMemoryBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("renders 250 MB of manifests")
	}
	_, cfg := demoRegistry(t)
	const limit = 1 << 30
	socket, _ := startDaemonEnv(t, map[string]string{"GOMEMLIMIT": "1GiB"}, "--registries-config", cfg)
	pid := pidOf(t, socket)
	apps := []struct {
		dir   string
		dense bool
	}{{largeApp(t, 10<<20, false), false}, {largeApp(t, 50<<20, false), false}, {largeApp(t, 50<<20, false), false},
		{largeApp(t, 50<<20, true), true}, {largeApp(t, 50<<20, true), true}}

	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if rss := rssOfTree(t, pid); rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	results := make([]run, len(apps))
	took := make([]time.Duration, len(apps))
	var wg sync.WaitGroup
	for i, app := range apps {
		wg.Go(func() {
			start := time.Now()
			results[i] = runIn(t, app.dir, map[string]string{"IMAGE_RESOLVER_SOCKET": socket, "ARGOCD_APP_NAME": fmt.Sprintf("large-%d", i)}, thinBinary)
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	t.Logf("peak resident memory of the daemon and its workers: %d MiB (limit %d MiB)", peak.Load()>>20, limit>>20)
	if peak.Load() > limit {
		t.Errorf("the daemon and its workers used %d MiB at once, over the container's %d MiB", peak.Load()>>20, limit>>20)
	}
	for i, r := range results {
		t.Logf("app %d (dense %v): exit %d in %s, %d bytes out, stderr %.300q", i, apps[i].dense, r.code, took[i].Round(time.Millisecond), len(r.stdout), r.stderr)
		switch {
		case strings.Contains(r.stderr, "unreachable"):
			t.Errorf("app %d: the thin client did not get the daemon's answer: %s", i, r.stderr)
		case r.code == 0 && (r.stdout == "" || strings.Contains(r.stdout, "registry.demo.local/demo/web:1.0.0")):
			t.Errorf("app %d: rendered without the resolved image", i)
		case r.code != 0 && !strings.Contains(r.stderr, "renderWorkerMemory") && !strings.Contains(r.stderr, "renderQueue"):
			t.Errorf("app %d: exit %d without naming the bound it met: %s", i, r.code, r.stderr)
		case r.code != 0 && r.stdout != "":
			t.Errorf("app %d failed but printed %d bytes of manifests", i, len(r.stdout))
		}
		if took[i] > 60*time.Second {
			t.Errorf("app %d took %s, past the render deadline Argo CD gives", i, took[i])
		}
	}
	// The small one fits a worker: it renders while the large ones fail.
	if results[0].code != 0 {
		t.Errorf("a 10 MB app of ConfigMaps failed beside the large ones: %s", results[0].stderr)
	}
}
