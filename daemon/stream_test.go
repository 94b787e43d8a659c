package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// Several renders at once of an app of 50 MB of manifests (5,000 Deployments of
// an image the policy names, and ConfigMaps) through a daemon's socket: the
// daemon's own memory stays under 100 MiB above its idle start (it never holds
// the manifests: they stream from its render workers to the callers), and every
// render's manifests are the bytes an in-process render prints.
func TestGenerate50MBAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("renders 200 MB of manifests")
	}
	const renders = 3
	m, s, dir := renderBigAtOnce(t, renders)
	t.Logf("daemon anonymous RSS: %.1f MiB idle, peak %.1f MiB (+%.1f MiB), %.1f MiB after %d renders of %.1f MB at once in %v; workers' peak RSS %.0f MiB",
		m.idle, m.peak, m.peak-m.idle, m.warm, renders, float64(m.size)/1e6, m.took.Round(time.Millisecond), m.workers)
	want := inProcessHash(t, dir, bigAppEnviron("app-0", s.Ref("web")))
	for i := range renders {
		if m.errs[i] != nil {
			t.Errorf("render %d: %v", i, m.errs[i])
			continue
		}
		// The app's name is in no manifest: every render is the same bytes.
		if m.hashes[i] != want {
			t.Errorf("render %d through the daemon differs from the in-process render", i)
		}
	}
	if above := m.peak - m.idle; above >= 100 {
		t.Errorf("the daemon's memory peaked %.1f MiB above its idle %.1f MiB, want under 100 MiB", above, m.idle)
	}
}

// withWriteLimit sets the socket's write bound for one (serial) test.
func withWriteLimit(t *testing.T, d time.Duration) {
	t.Helper()
	old := socketLimits.Write
	socketLimits.Write = d
	t.Cleanup(func() { socketLimits.Write = old })
}

// workerProcs starts render workers (workerCommand) and records them.
type workerProcs struct {
	mu    sync.Mutex
	procs []*exec.Cmd
}

func (w *workerProcs) start() *exec.Cmd {
	cmd := workerCommand()
	w.mu.Lock()
	w.procs = append(w.procs, cmd)
	w.mu.Unlock()
	return cmd
}

func (w *workerProcs) all() []*exec.Cmd {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*exec.Cmd(nil), w.procs...)
}

// exited reports whether the process has ended.
func exited(cmd *exec.Cmd) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(cmd.Process.Pid))
	return errors.Is(err, os.ErrNotExist) || cmd.ProcessState != nil
}

// logBuffer is a daemon's log, read by a test.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A caller that stops reading the manifests is cut at the write bound: its
// render's worker is stopped, its slot freed, the render logged as failed
// saying so, and the daemon renders the next caller's. The caller here is a
// real connection on the socket that reads the answer's header and no more.
func TestCallerThatDoesNotReadIsCut(t *testing.T) {
	withWriteLimit(t, 300*time.Millisecond)
	reg := rt.New(t)
	pushTags(t, reg, "web", "linux/amd64", "1.0.0", "1.1.0")
	dir := t.TempDir()
	writeBigApp(t, dir, reg.Ref("web"), 10, 8<<20) // more than the pipe and socket buffers hold
	var workers workerProcs
	var log logBuffer
	cfg := testConfig()
	cfg.RenderWorkers = 1
	d, _ := startDaemon(t, cfg, WithRenderWorkers(workers.start), WithLogger(slog.New(slog.NewTextHandler(&log, nil))))

	c := dialSocket(t, d.cfg.Socket)
	body, _ := json.Marshal(api.GenerateRequest{Dir: dir, Environ: bigAppEnviron("cut", reg.Ref("web"))})
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", api.PathGenerate, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4096), nil) // the header, a few KiB, then nothing
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("answer: %v %v", resp, err)
	}
	// The header came with the first chunk: the render holds its worker.
	if d.workers.Busy() != 1 {
		t.Fatalf("%d renders busy while writing, want 1", d.workers.Busy())
	}
	guard := time.After(time.Minute) // a hang guard: which bound cut is said by the log
	for d.workers.Busy() > 0 || stopped(workers.all()) != 1 || !strings.Contains(log.String(), "was cut") {
		select {
		case <-guard:
			t.Fatalf("a minute after the caller stopped reading: %d busy, %d workers stopped; log:\n%s", d.workers.Busy(), stopped(workers.all()), log.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if !strings.Contains(log.String(), "the caller read nothing of the manifests for 300ms") {
		t.Errorf("log does not name the bound:\n%s", log.String())
	}

	h, n, err := generateHash(d.cfg.Socket, dir, bigAppEnviron("next", reg.Ref("web")))
	if err != nil || n < 8<<20 {
		t.Fatalf("the next render: %d bytes, %v", n, err)
	}
	if h != inProcessHash(t, dir, bigAppEnviron("next", reg.Ref("web"))) {
		t.Error("the next render differs from an in-process render")
	}
}

// stopped counts the processes that have ended.
func stopped(cmds []*exec.Cmd) int {
	n := 0
	for _, c := range cmds {
		if exited(c) {
			n++
		}
	}
	return n
}

// A render whose worker dies once some manifests are out fails in the trailer:
// the caller gets exit status 1 and the reason, and Call no manifests.
func TestWorkerDeathMidStreamInTrailer(t *testing.T) {
	reg := rt.New(t)
	pushTags(t, reg, "web", "linux/amd64", "1.0.0", "1.1.0")
	dir := t.TempDir()
	writeBigApp(t, dir, reg.Ref("web"), 10, 4<<20)
	var workers workerProcs
	cfg := testConfig()
	cfg.RenderWorkers = 1
	d, _ := startDaemon(t, cfg, WithRenderWorkers(workers.start))
	req := api.GenerateRequest{Dir: dir, Environ: bigAppEnviron("dies", reg.Ref("web"))}

	var got int
	resp, err := api.CallTo(context.Background(), d.cfg.Socket, req, writerFunc(func(p []byte) (int, error) {
		if got == 0 { // the busy one, and the one started ahead if there is one
			for _, w := range workers.all() {
				syscall.Kill(w.Process.Pid, syscall.SIGKILL) //nolint:errcheck
			}
		}
		got += len(p)
		return len(p), nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got == 0 || resp.ExitCode != 1 || !strings.Contains(resp.Stderr, "render worker failed") {
		t.Fatalf("after %d bytes: exit %d, stderr %q; want 1 and the worker's failure", got, resp.ExitCode, resp.Stderr)
	}
	if full, err := api.Call(context.Background(), d.cfg.Socket, req); err != nil || full.ExitCode != 0 || len(full.Stdout) < 4<<20 {
		t.Fatalf("the next render: %v", err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
