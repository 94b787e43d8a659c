package pipeline

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/render"
)

// workerEnv makes this test binary a render worker when a test starts it as one.
const workerEnv = "PIPELINE_TEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		if err := render.ServeWorker(os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testWorkers are render workers started from this test binary.
type testWorkers struct {
	*render.Workers
	mu    sync.Mutex
	procs []*exec.Cmd
}

func newTestWorkers(t *testing.T) *testWorkers {
	t.Helper()
	tw := &testWorkers{}
	tw.Workers = render.NewWorkers(func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"=1")
		tw.mu.Lock()
		tw.procs = append(tw.procs, cmd)
		tw.mu.Unlock()
		return cmd
	}, 1)
	t.Cleanup(tw.Close)
	return tw
}

func (tw *testWorkers) last() *exec.Cmd {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return tw.procs[len(tw.procs)-1]
}

// killOnFirstWrite kills a worker when the first bytes of its output arrive.
type killOnFirstWrite struct {
	bytes.Buffer
	kill func()
}

func (k *killOnFirstWrite) Write(p []byte) (int, error) {
	if k.kill != nil {
		k.kill()
		k.kill = nil
	}
	return k.Buffer.Write(p)
}

// Prepare decides everything before the manifests: an Output is given only once
// every image resolved. A worker that dies while writing them is an error of
// WriteTo, which the caller sees after the bytes it got (the daemon's trailer
// says it); the next render gets a new worker.
func TestOutputWorkerDiesWhileWriting(t *testing.T) {
	tw := newTestWorkers(t)
	var files = map[string]string{}
	for i := range 40 { // more than one chunk of output
		files[string(rune('a'+i%26))+strings.Repeat("x", i)+".yaml"] = strings.Replace(deployment, "{NODESELECTOR}", "{}", 1) +
			"---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c" + strings.Repeat("x", i) + "\ndata:\n  big: " + strings.Repeat("y", 4096) + "\n"
	}
	dir := appDir(t, files)
	p := New(&fakeBatch{answer: resolved("1.4.2", false)}, Settings{Renderer: tw})

	failed := New(&fakeBatch{err: errors.New("registry down")}, Settings{Renderer: tw})
	if out, _, err := failed.Prepare(context.Background(), dir, envWith(t, "image-list", "web=ghcr.io/org/web:~1")); err == nil || out != nil {
		t.Fatalf("Prepare with a failed resolution: %v, %v; want an error and no output", out, err)
	}

	out, _, err := p.Prepare(context.Background(), dir, envWith(t, "image-list", "web=ghcr.io/org/web:~1"))
	if err != nil {
		t.Fatal(err)
	}
	worker := tw.last()
	w := &killOnFirstWrite{kill: func() { syscall.Kill(worker.Process.Pid, syscall.SIGKILL) }} //nolint:errcheck
	n, err := out.WriteTo(w)
	out.Close()
	if err == nil || !strings.Contains(err.Error(), "render worker failed") {
		t.Fatalf("WriteTo after %d bytes from a killed worker: %v; want the worker's failure", n, err)
	}
	if tw.Busy() != 0 {
		t.Errorf("%d workers still busy after Close", tw.Busy())
	}
	if _, _, err := p.Render(context.Background(), dir, envWith(t, "image-list", "web=ghcr.io/org/web:~1")); err != nil {
		t.Fatalf("render after the worker died: %v", err)
	}
	if tw.last() == worker {
		t.Error("the dead worker was reused")
	}
}
