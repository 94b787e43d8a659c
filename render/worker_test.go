package render

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// workerEnv makes this test binary a render worker when a test starts it as one.
const workerEnv = "RENDER_TEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		if err := ServeWorker(os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testWorkers starts workers from this test binary and records their processes.
type testWorkers struct {
	*Workers
	mu    sync.Mutex
	procs []*exec.Cmd
	// starting is told each time a worker is started (a render holds a slot).
	starting chan struct{}
}

func newTestWorkers(t testing.TB, size int, opts ...WorkerOption) *testWorkers {
	t.Helper()
	tw := &testWorkers{starting: make(chan struct{}, 1)}
	tw.Workers = NewWorkers(func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"=1")
		tw.mu.Lock()
		tw.procs = append(tw.procs, cmd)
		tw.mu.Unlock()
		select {
		case tw.starting <- struct{}{}:
		default:
		}
		return cmd
	}, size, opts...)
	t.Cleanup(tw.Close)
	return tw
}

// idleExited returns the channel closed once the idle worker running cmd has
// exited and been reaped (nil: no such idle worker).
func (tw *testWorkers) idleExited(cmd *exec.Cmd) <-chan struct{} {
	tw.Workers.mu.Lock()
	defer tw.Workers.mu.Unlock()
	for _, w := range tw.Workers.idle {
		if w.cmd == cmd {
			return w.exited
		}
	}
	return nil
}

// awaitSignal waits for a value on ch or its close, with a hang guard of a minute.
func awaitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("%s: not within a minute", what)
	}
}

func (tw *testWorkers) started() []*exec.Cmd {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return append([]*exec.Cmd(nil), tw.procs...)
}

// gone reports whether the process has ended (and been reaped).
func gone(cmd *exec.Cmd) bool {
	if cmd.Process == nil {
		return true
	}
	_, err := os.Stat("/proc/" + strconv.Itoa(cmd.Process.Pid))
	return errors.Is(err, os.ErrNotExist) || cmd.ProcessState != nil
}

func writeString(t *testing.T, objs []*Rendered) string {
	t.Helper()
	var b bytes.Buffer
	for _, r := range objs {
		if err := Write(&b, r.Objects); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// A render in a worker finds the same image fields, applies the same edits and
// prints the same bytes as in process, for every kind of source, and one worker
// serves render after render.
func TestWorkersSameOutput(t *testing.T) {
	tw := newTestWorkers(t, 1)
	if err := tw.Prestart(context.Background()); err != nil { // the renders below use it: one worker in all
		t.Fatal(err)
	}
	apps := []string{"../testdata/apps/helm-web", "../testdata/apps/kustomize-overlay/overlay", "../testdata/apps/plain-cron",
		"../testdata/apps/arm64-pinned", "testdata/charts/caps", "testdata/kustomize/canonical", "testdata/dir"}
	for _, app := range apps {
		// The directory options reach the worker: testdata/dir differs without them.
		opts := Options{RepoRoot: moduleRoot, AppName: "web", Namespace: "shop", KubeVersion: "1.31.0",
			HelmParameters: map[string]string{"replicaCount": "2"},
			Directory:      DirectoryOptions{Recurse: true, Exclude: "nested/deeper/*"}}
		want, werr := InProcess{}.Open(context.Background(), app, opts)
		got, gerr := tw.Open(context.Background(), app, opts)
		if werr != nil || gerr != nil {
			t.Fatalf("%s: worker error %v, in-process error %v", app, gerr, werr)
		}
		if got.Kind() != want.Kind() {
			t.Errorf("%s: kind %s, want %s", app, got.Kind(), want.Kind())
		}
		if g, w := fmt.Sprintf("%+v", got.Uses()), fmt.Sprintf("%+v", stripNodes(want.Uses())); g != w {
			t.Errorf("%s: image fields from the worker\n%s\nin process\n%s", app, g, w)
		}
		if len(want.Uses()) == 0 && app != "testdata/charts/caps" && app != "testdata/dir" {
			t.Errorf("%s: no image field to edit", app)
		}
		edits := testEdits(want.Uses())
		for _, s := range []Session{want, got} {
			if err := s.Apply(edits); err != nil {
				t.Fatalf("%s: %v", app, err)
			}
		}
		var g, w bytes.Buffer
		if _, err := got.WriteTo(&g); err != nil {
			t.Fatalf("%s: %v", app, err)
		}
		if _, err := want.WriteTo(&w); err != nil {
			t.Fatal(err)
		}
		got.Close()
		want.Close()
		if g.String() != w.String() || !strings.Contains(g.String(), ":9.9.9") && len(edits.Images) > 0 {
			t.Errorf("%s: worker output differs from in-process, or lacks the edits:\n--- worker\n%s\n--- in process\n%s", app, g.String(), w.String())
		}
	}
	if n := len(tw.started()); n != 1 {
		t.Errorf("%d workers started for %d sequential renders, want 1 (reused)", n, len(apps))
	}
}

// testEdits sets every image field to tag 9.9.9 and annotates its object.
func testEdits(uses []ImageUse) Edits {
	var e Edits
	for _, u := range uses {
		e.Images = append(e.Images, ImageEdit{Use: u.Index, Ref: u.Image.Written + ":9.9.9"})
		e.Annotations = append(e.Annotations, AnnotationEdit{Object: u.ObjectIndex, Key: "test/edited", Value: u.Path})
	}
	return e
}

// stripNodes drops what a use holds of this process's nodes, which a worker's
// uses cannot.
func stripNodes(uses []ImageUse) []ImageUse {
	out := make([]ImageUse, len(uses))
	for i, u := range uses {
		u.node, u.obj = nil, nil
		out[i] = u
	}
	return out
}

// Every hostile case fails in a worker with the in-process message and the same
// error identity (errors.Is), so callers and users see no difference.
func TestWorkersHostileSameErrors(t *testing.T) {
	tw := newTestWorkers(t, 2)
	for _, tt := range hostileCases() {
		if tt.kind == "deadline" {
			continue // TestWorkersStopLoopingTemplate
		}
		t.Run(tt.name, func(t *testing.T) {
			env := newHostileEnv(t)
			dir, opts := tt.setup(t, env)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, gerr := tw.Render(ctx, dir, opts)
			_, werr := Render(ctx, dir, opts)
			if gerr == nil || werr == nil || gerr.Error() != werr.Error() {
				t.Fatalf("worker error %v, in-process error %v", gerr, werr)
			}
			for name, s := range sentinels {
				if errors.Is(gerr, s) != errors.Is(werr, s) {
					t.Errorf("errors.Is(%s): worker %v, in process %v", name, errors.Is(gerr, s), errors.Is(werr, s))
				}
			}
		})
	}
}

// A Helm template that loops for minutes is stopped at the deadline for real: the
// render returns ErrDeadline, its worker process is gone, and the next render gets
// a new worker.
func TestWorkersStopLoopingTemplate(t *testing.T) {
	tw := newTestWorkers(t, 1, WithWorkerMemory(1<<30)) // the loop meets its deadline before this
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := tw.Render(ctx, "../testdata/hostile/helm-loop", Options{RepoRoot: moduleRoot})
	if !errors.Is(err, ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrDeadline wrapping context.DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "worker was stopped") {
		t.Errorf("err = %q, want it to say the worker was stopped", err)
	}
	procs := tw.started()
	if len(procs) != 1 || !gone(procs[0]) {
		t.Fatalf("the looping worker is still running after the deadline")
	}
	if _, err := tw.Render(context.Background(), "../testdata/apps/plain-cron", Options{RepoRoot: moduleRoot}); err != nil {
		t.Fatalf("render after the stopped one: %v", err)
	}
	if n := len(tw.started()); n != 2 {
		t.Errorf("%d workers started, want 2 (the stopped one replaced)", n)
	}
}

// A caller that goes away (its context cancelled) stops the work done for it.
func TestWorkersStopWhenCallerLeaves(t *testing.T) {
	tw := newTestWorkers(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	_, err := tw.Render(ctx, "../testdata/hostile/helm-loop", Options{RepoRoot: moduleRoot})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if procs := tw.started(); len(procs) != 1 || !gone(procs[0]) {
		t.Fatal("the worker goes on after its caller left")
	}
}

// A template that eats memory is stopped at the worker's memory bound with a
// message that says so; the daemon's own memory is not touched.
func TestWorkersStopMemoryHog(t *testing.T) {
	tw := newTestWorkers(t, 1, WithWorkerMemory(256<<20))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := tw.Render(ctx, "../testdata/hostile/helm-memory", Options{RepoRoot: moduleRoot})
	if err == nil || !strings.Contains(err.Error(), "the render used more than 256 MiB of memory (renderWorkerMemory) and was stopped") {
		t.Fatalf("err = %v, want the memory bound named", err)
	}
	if procs := tw.started(); len(procs) != 1 || !gone(procs[0]) {
		t.Fatal("the worker goes on past its memory bound")
	}
}

// Renders wait for a free worker within their deadline; no more workers run than
// the bound.
func TestWorkersBound(t *testing.T) {
	tw := newTestWorkers(t, 1)
	busy, cancel := context.WithTimeout(context.Background(), time.Minute) // busy until the test ends
	defer cancel()
	go tw.Render(busy, "../testdata/hostile/helm-loop", Options{RepoRoot: moduleRoot}) //nolint:errcheck
	awaitSignal(t, tw.starting, "the busy render's worker started")
	ctx, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	_, err := tw.Render(ctx, "../testdata/apps/plain-cron", Options{RepoRoot: moduleRoot})
	if !errors.Is(err, ErrDeadline) || !strings.Contains(err.Error(), "every render worker was busy") {
		t.Fatalf("err = %v, want ErrDeadline saying every worker was busy", err)
	}
	if n := len(tw.started()); n != 1 {
		t.Errorf("%d workers started with a bound of 1", n)
	}
}

// An idle worker exits after the idle time; a dead worker is not reused.
func TestWorkersIdleAndDead(t *testing.T) {
	tw := newTestWorkers(t, 1, WithWorkerIdle(100*time.Millisecond))
	app := "../testdata/apps/plain-cron"
	if _, err := tw.Render(context.Background(), app, Options{RepoRoot: moduleRoot}); err != nil {
		t.Fatal(err)
	}
	first := tw.started()[0]
	// polling a process's end: the worker is a process of its own
	for deadline := time.Now().Add(10 * time.Second); !gone(first); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("an idle worker did not exit")
		}
	}
	if _, err := tw.Render(context.Background(), app, Options{RepoRoot: moduleRoot}); err != nil {
		t.Fatal(err)
	}
	second := tw.started()[1]
	// nil when its idle time ran out already: then it is no longer kept to be reused
	exited := tw.idleExited(second)
	syscall.Kill(second.Process.Pid, syscall.SIGKILL) //nolint:errcheck
	if exited != nil {
		awaitSignal(t, exited, "the killed worker reaped") // the reaping goroutine has marked it exited
	}
	if _, err := tw.Render(context.Background(), app, Options{RepoRoot: moduleRoot}); err != nil {
		t.Fatalf("render after a worker died: %v", err)
	}
	if n := len(tw.started()); n != 3 {
		t.Errorf("%d workers started, want 3 (the dead one not reused)", n)
	}
}

// BenchmarkRenderInWorker is the cost of rendering in a worker process (the bound on
// hostile charts: a render past its deadline or memory is stopped for real) against rendering in the daemon's own process, for
// each sample source, with the worker warm: the request and the objects cross a
// pipe as JSON and YAML. It reports both times per render and the ratio.
func BenchmarkRenderInWorker(b *testing.B) {
	tw := newTestWorkers(b, 1)
	if err := tw.Prestart(context.Background()); err != nil {
		b.Fatal(err)
	}
	for _, app := range []string{"../testdata/apps/helm-web", "../testdata/apps/kustomize-overlay/overlay", "../testdata/apps/plain-cron"} {
		b.Run(filepath.Base(strings.TrimSuffix(app, "/overlay")), func(b *testing.B) {
			opts := Options{RepoRoot: moduleRoot, AppName: "web", Namespace: "shop"}
			var inProcess, inWorker time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := Render(context.Background(), app, opts); err != nil {
					b.Fatal(err)
				}
				inProcess += time.Since(start)
				start = time.Now()
				if _, err := tw.Render(context.Background(), app, opts); err != nil {
					b.Fatal(err)
				}
				inWorker += time.Since(start)
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
			b.ReportMetric(ms(inProcess), "in-process-ms/op")
			b.ReportMetric(ms(inWorker), "in-worker-ms/op")
			b.ReportMetric(float64(inWorker)/float64(inProcess), "worker/in-process")
		})
	}
}

// A session whose output is not written gives its worker back (told to drop its
// objects); one whose caller stops taking the output has its worker stopped, and
// the slot freed: the next render starts another.
func TestWorkerSessionEnds(t *testing.T) {
	tw := newTestWorkers(t, 1)
	app := "../testdata/apps/plain-cron"
	opts := Options{RepoRoot: moduleRoot}
	for range 2 {
		s, err := tw.Open(context.Background(), app, opts)
		if err != nil {
			t.Fatal(err)
		}
		s.Close() // e.g. a resolution failed
	}
	if n := len(tw.started()); n != 1 {
		t.Fatalf("%d workers started for two sessions closed unwritten, want 1 (reused)", n)
	}

	s, err := tw.Open(context.Background(), app, opts)
	if err != nil {
		t.Fatal(err)
	}
	cut := errors.New("caller cut")
	if _, err := s.WriteTo(failingWriter{cut}); !errors.Is(err, cut) {
		t.Fatalf("WriteTo to a failing writer: %v, want its error", err)
	}
	s.Close()
	if !gone(tw.started()[0]) || tw.Busy() != 0 {
		t.Fatalf("after a cut write: worker gone %v, %d busy; want it stopped and none busy", gone(tw.started()[0]), tw.Busy())
	}

	// The caller leaves while the output is being written (1 MiB: more than the
	// pipe holds): the worker is stopped and the error says so.
	big := t.TempDir()
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  a: " + strings.Repeat("x", 1<<20) + "\n"
	if err := os.WriteFile(filepath.Join(big, "cm.yaml"), []byte(cm), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err = tw.Open(ctx, big, Options{RepoRoot: big})
	if err != nil {
		t.Fatal(err)
	}
	worker := tw.started()[1]
	_, err = s.WriteTo(writerFunc(func(p []byte) (int, error) {
		cancel()
		for !gone(worker) { // the watch kills it at once
			time.Sleep(5 * time.Millisecond)
		}
		return len(p), nil
	}))
	s.Close()
	if !errors.Is(err, ErrDeadline) || !errors.Is(err, context.Canceled) {
		t.Fatalf("WriteTo when the caller left: %v, want ErrDeadline and context.Canceled", err)
	}
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

var _ io.Writer = writerFunc(nil)

// TestWorkersIdleKilledUnseen: a worker killed while idle (as the kernel's OOM
// killer does) and handed out before the pool saw it exit does not fail the next
// render: it runs once more on a new worker. Rendering at once after the kill
// races the pool's reaping; each round either finds the worker reaped or meets
// it dead, and both must render.
func TestWorkersIdleKilledUnseen(t *testing.T) {
	tw := newTestWorkers(t, 1)
	app := "../testdata/apps/plain-cron"
	for round := range 10 {
		if _, err := tw.Render(context.Background(), app, Options{RepoRoot: moduleRoot}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		procs := tw.started()
		syscall.Kill(procs[len(procs)-1].Process.Pid, syscall.SIGKILL) //nolint:errcheck
	}
	if _, err := tw.Render(context.Background(), app, Options{RepoRoot: moduleRoot}); err != nil {
		t.Fatalf("render after the last kill: %v", err)
	}
	if n := len(tw.started()); n != 11 {
		t.Errorf("%d workers started for 11 renders after 10 kills, want 11", n)
	}
}
