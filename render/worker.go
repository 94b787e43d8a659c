package render

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of Workers.
const (
	// DefaultWorkerMemory bounds a worker's resident memory while it renders
	// (config's renderWorkerMemory default: the daemon's memory budget admits
	// renders of this size).
	DefaultWorkerMemory = 256 << 20
	// DefaultWorkerIdle is how long an idle worker is kept before it exits.
	DefaultWorkerIdle = 2 * time.Minute
)

// Workers renders in child processes, one render at a time per process, so that a
// render stopped at its deadline (a Helm template that loops, a chart that eats
// memory), or whose caller went away, is stopped for real: its process is killed
// and the next render starts another. Workers are started on demand up to a
// number, reused while they answer, and exit when idle.
//
// A worker is this program's render-worker command (ServeWorker). It keeps the
// objects of its render: the daemon gets their image fields, sends back its edits,
// and copies the output the worker prints (Write) as it comes, in bounded chunks
// (worker_session.go, worker_serve.go), so a render's output is the same byte for
// byte as in process and the daemon never holds it whole.
type Workers struct {
	start     func() *exec.Cmd
	slots     chan struct{}
	maxMemory int64
	idleAfter time.Duration
	rssEvery  time.Duration

	mu     sync.Mutex
	idle   []*worker
	closed bool
}

// WorkerOption configures Workers.
type WorkerOption func(*Workers)

// WithWorkerMemory bounds a worker's resident memory while it renders (default 1 GiB;
// 0: no bound); a render above it is stopped with an error saying so.
func WithWorkerMemory(bytes int64) WorkerOption { return func(w *Workers) { w.maxMemory = bytes } }

// WithWorkerIdle sets how long an idle worker is kept (default 2m).
func WithWorkerIdle(d time.Duration) WorkerOption { return func(w *Workers) { w.idleAfter = d } }

// NewWorkers returns Workers that start processes with start (a command that runs
// ServeWorker on its standard input and output), at most size at once (minimum 1).
func NewWorkers(start func() *exec.Cmd, size int, opts ...WorkerOption) *Workers {
	if size < 1 {
		size = 1
	}
	w := &Workers{start: start, slots: make(chan struct{}, size), maxMemory: DefaultWorkerMemory,
		idleAfter: DefaultWorkerIdle, rssEvery: 50 * time.Millisecond}
	for _, o := range opts {
		o(w)
	}
	return w
}

// Prestart starts one worker ahead of the first render and waits until it
// answers, then keeps it idle: the first render finds it ready rather than
// waiting for a process to start (a Go program linking Helm and Kustomize: 100
// to 400 ms; issue 27). At ctx's end the worker is stopped and the error says
// so; a failed start is the first render's to retry.
func (p *Workers) Prestart(ctx context.Context) error {
	w, err := startWorker(p.start())
	if err != nil {
		return err
	}
	if err := w.ping(ctx); err != nil {
		w.stop()
		return err
	}
	p.put(w)
	return nil
}

// Close stops every idle worker; busy ones are stopped when their render ends.
func (p *Workers) Close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, w := range idle {
		w.stop()
	}
}

// Render renders dir in a worker (as Open: image fields found there too) and
// returns its objects, parsed back here from the worker's output, so that they
// print the same byte for byte as in process: for callers that want the objects
// whole. A daemon streams them instead (Open, Session.WriteTo).
func (p *Workers) Render(ctx context.Context, dir string, opts Options) (*Rendered, error) {
	s, err := p.Open(ctx, dir, opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var b bytes.Buffer
	if _, err := s.WriteTo(&b); err != nil {
		return nil, err
	}
	objs, err := parseYAML("render worker output", b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errWorkerBroken, err)
	}
	return &Rendered{Kind: s.Kind(), Objects: objs, Remote: s.Remote()}, nil
}

// get returns an idle worker or starts one.
// reused says whether it was idle (it may have died since, unseen).
func (p *Workers) get() (w *worker, reused bool, err error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, false, errors.New("render workers closed")
	}
	for n := len(p.idle); n > 0; n = len(p.idle) {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		w.idleTimer.Stop()
		select {
		case <-w.exited: // died while idle (killed from outside): not reused
			continue
		default:
		}
		p.mu.Unlock()
		return w, true, nil
	}
	p.mu.Unlock()
	w, err = startWorker(p.start())
	return w, false, err
}

// put keeps w for the next render, until it has been idle for idleAfter.
func (p *Workers) put(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		go w.stop()
		return
	}
	p.idle = append(p.idle, w)
	w.idleTimer = time.AfterFunc(p.idleAfter, func() {
		p.mu.Lock()
		i := -1
		for j, x := range p.idle {
			if x == w {
				i = j
			}
		}
		if i >= 0 {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
		}
		p.mu.Unlock()
		if i >= 0 {
			w.stop()
		}
	})
}

// errWorkerBroken marks a worker that died or answered out of protocol: it is not
// reused.
var errWorkerBroken = errors.New("render worker failed")

type worker struct {
	cmd       *exec.Cmd
	in        io.WriteCloser
	out       *bufio.Reader
	stderr    *headBuffer
	exited    chan struct{}
	idleTimer *time.Timer
	stopOnce  sync.Once
}

func startWorker(cmd *exec.Cmd) (*worker, error) {
	// A worker dies with the daemon, never outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("start render worker: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start render worker: %w", err)
	}
	w := &worker{cmd: cmd, in: in, out: bufio.NewReader(out), stderr: &headBuffer{max: 4 << 10}, exited: make(chan struct{})}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start render worker %s: %w", cmd.Path, err)
	}
	go func() {
		cmd.Wait() //nolint:errcheck // the exit is reported by the read that fails
		close(w.exited)
	}()
	return w, nil
}

// ping waits until w answers a ping, which it does once its program has
// started; at ctx's end it stops w.
func (w *worker) ping(ctx context.Context) error {
	answered := make(chan error, 1)
	go func() {
		if err := writeFrame(w.in, workerRequest{Op: opPing}); err != nil {
			answered <- w.broken(err)
			return
		}
		var a workerAnswer
		if err := readFrame(w.out, &a); err != nil {
			answered <- w.broken(err)
			return
		}
		answered <- nil
	}()
	select {
	case err := <-answered:
		return err
	case <-ctx.Done():
		w.stop() // ends the read above
		<-answered
		return fmt.Errorf("the render worker did not answer in the time given (%w) and was stopped", context.Cause(ctx))
	}
}

func (w *worker) stop() {
	w.stopOnce.Do(func() {
		w.cmd.Process.Kill() //nolint:errcheck // it may have exited already
		w.in.Close()
		<-w.exited
	})
}

// rss is the worker's resident memory in bytes (0 if unknown).
func (w *worker) rss() int64 { return ResidentMemory(w.cmd.Process.Pid) }

// ResidentMemory is process pid's resident memory in bytes (VmRSS; 0 if unknown).
func ResidentMemory(pid int) int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// broken describes a worker that stopped answering: how it ended and the last
// lines it printed (a Go runtime's fatal error, for one).
func (w *worker) broken(err error) error {
	select {
	case <-w.exited:
		msg := "exited"
		if st := w.cmd.ProcessState; st != nil {
			msg = st.String()
		}
		if tail := strings.TrimSpace(w.stderr.String()); tail != "" {
			msg += ": " + firstLine(tail)
		}
		return fmt.Errorf("%w: the worker %s", errWorkerBroken, msg)
	case <-time.After(100 * time.Millisecond):
		return fmt.Errorf("%w: %w", errWorkerBroken, err)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// sentinels are the errors whose identity crosses from a worker to its daemon.
var sentinels = map[string]error{
	"outside-repository": ErrOutsideRepository,
	"not-regular":        ErrNotRegular,
	"remote":             ErrRemote,
	"remote-fetch":       ErrRemoteFetch,
	"unsupported":        ErrUnsupported,
	"deadline":           ErrDeadline,
	"not-exist":          fs.ErrNotExist,
}

// workerError is an error a worker's render returned: its message, and the sentinel
// errors it wrapped so that errors.Is answers as it did in the worker.
type workerError struct {
	msg string
	is  []string
}

func (e *workerError) Error() string { return e.msg }

func (e *workerError) Is(target error) bool {
	for _, name := range e.is {
		if sentinels[name] == target {
			return true
		}
	}
	return false
}

// mib states a bound in MiB (bounds here are whole MiB: renderWorkerMemory is
// at least 1MiB, the frame bound 64 MiB).
func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }

// headBuffer keeps the first max bytes written to it: the start of a worker's
// stderr, where a Go runtime writes its fatal error.
type headBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *headBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.max - len(t.b); room > 0 {
		t.b = append(t.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (t *headBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
