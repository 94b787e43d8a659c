package daemon

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// The environment of a test render worker (TestMain): how long it takes to start,
// and the file it creates once started.
const (
	workerStartDelayEnv = "DAEMON_TEST_WORKER_START_DELAY"
	workerStartedEnv    = "DAEMON_TEST_WORKER_STARTED"
)

// startSlowly is a test render worker's start: it waits workerStartDelayEnv, as
// the init of a program linking Helm and Kustomize does, then creates the file
// workerStartedEnv names.
func startSlowly() {
	if d, err := time.ParseDuration(os.Getenv(workerStartDelayEnv)); err == nil {
		time.Sleep(d)
	}
	if f := os.Getenv(workerStartedEnv); f != "" {
		os.WriteFile(f, nil, 0o644) //nolint:errcheck // the test sees it missing
	}
}

// A daemon listens, and is ready, only once its first render worker has started,
// and its first render runs on that worker: a render sent as soon as the socket
// answers never waits for a worker's process to start (issue 27).
func TestFirstRenderFindsWorkerStarted(t *testing.T) {
	reg := rt.New(t)
	pushTags(t, reg, "web", "linux/amd64", "1.0.0", "1.1.0")
	dir := t.TempDir()
	writeBigApp(t, dir, reg.Ref("web"), 1, 0)
	started := filepath.Join(t.TempDir(), "started")
	var workers workerProcs
	start := func() *exec.Cmd {
		cmd := workers.start()
		cmd.Env = append(cmd.Env, workerStartDelayEnv+"=300ms", workerStartedEnv+"="+started)
		return cmd
	}
	cfg := testConfig()
	cfg.RenderWorkers = 1
	d, _ := startDaemon(t, cfg, WithRenderWorkers(start))

	if _, err := os.Stat(started); err != nil {
		t.Fatalf("the daemon is ready before its render worker has started: %v", err)
	}
	resp, err := api.Call(context.Background(), d.cfg.Socket, api.GenerateRequest{Dir: dir, Environ: bigAppEnviron("first", reg.Ref("web"))})
	if err != nil || resp.ExitCode != 0 || !strings.Contains(string(resp.Stdout), reg.Ref("web")+":1.1.0") {
		t.Fatalf("first render: %v %+v", err, resp)
	}
	if n := len(workers.all()); n != 1 {
		t.Errorf("%d render workers started by the daemon's start and its first render, want 1: the first render started its own", n)
	}
}
