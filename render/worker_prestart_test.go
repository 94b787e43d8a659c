package render

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Prestart returns once its worker has answered, and keeps it idle: the render
// after it runs on that worker, started no other.
func TestWorkersPrestartAnswersAndServesTheFirstRender(t *testing.T) {
	tw := newTestWorkers(t, 1)
	if err := tw.Prestart(context.Background()); err != nil {
		t.Fatal(err)
	}
	procs := tw.started()
	if len(procs) != 1 || tw.idleExited(procs[0]) == nil {
		t.Fatalf("after Prestart: %d workers started, the first idle: %v; want 1, idle", len(procs), len(procs) == 1 && tw.idleExited(procs[0]) != nil)
	}
	if _, err := tw.Render(context.Background(), "../testdata/apps/plain-cron", Options{RepoRoot: moduleRoot}); err != nil {
		t.Fatal(err)
	}
	if n := len(tw.started()); n != 1 {
		t.Errorf("%d workers started by Prestart and one render, want 1", n)
	}
}

// A worker that does not answer by ctx's end is stopped, not kept: Prestart
// says so, and the next render starts a worker of its own.
func TestWorkersPrestartStopsAWorkerThatDoesNotAnswer(t *testing.T) {
	var silent *exec.Cmd
	p := NewWorkers(func() *exec.Cmd {
		silent = exec.Command("sleep", "60") // reads no request, answers none
		return silent
	}, 1)
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := p.Prestart(ctx)
	if err == nil || !strings.Contains(err.Error(), "did not answer in the time given") {
		t.Fatalf("Prestart: %v, want the worker's silence", err)
	}
	if !gone(silent) {
		t.Error("the silent worker still runs")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) != 0 {
		t.Errorf("%d idle workers after a failed Prestart, want 0", len(p.idle))
	}
}
