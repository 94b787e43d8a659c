package render

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
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

// Renderer renders an application source: Render in this process, or Workers in
// child processes that can be stopped.
type Renderer interface {
	Render(ctx context.Context, dir string, opts Options) (*Rendered, error)
}

// InProcess is the Renderer that calls Render in this process. A render stopped at
// its deadline returns at once, but a Helm template that loops goes on in the
// background until it ends (Go cannot stop it): use it where the process itself
// ends with the render (the `generate` command), Workers in a long-lived daemon.
type InProcess struct{}

// Render calls Render.
func (InProcess) Render(ctx context.Context, dir string, opts Options) (*Rendered, error) {
	return Render(ctx, dir, opts)
}

// Defaults of Workers.
const (
	// DefaultWorkerMemory bounds a worker's resident memory while it renders.
	DefaultWorkerMemory = 1 << 30
	// DefaultWorkerIdle is how long an idle worker is kept before it exits.
	DefaultWorkerIdle = 2 * time.Minute
	// maxWorkerAnswer bounds one answer read from a worker.
	maxWorkerAnswer = 256 << 20
)

// Workers renders in child processes, one render at a time per process, so that a
// render stopped at its deadline (a Helm template that loops, a chart that eats
// memory), or whose caller went away, is stopped for real: its process is killed
// and the next render starts another. Workers are started on demand up to a
// number, reused while they answer, and exit when idle.
//
// A worker is this program's render-worker command (ServeWorker); its answer is the
// objects as Write prints them, parsed back here, so a render's output is the same
// byte for byte as in process.
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

// Prestart starts one worker ahead of the first render, so that it does not wait
// for a process to start; a failure to start is left for that render to report.
func (p *Workers) Prestart() {
	w, err := startWorker(p.start())
	if err != nil {
		return
	}
	p.put(w)
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

// Render renders dir in a worker. Waiting for a free worker counts against ctx; at
// ctx's end the worker is killed and the error wraps ErrDeadline and ctx.Err(), as
// Render's does.
func (p *Workers) Render(ctx context.Context, dir string, opts Options) (*Rendered, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w (%w); every render worker was busy until then", ErrDeadline, ctx.Err())
	}
	defer func() { <-p.slots }()

	w, err := p.get()
	if err != nil {
		return nil, err
	}
	type answer struct {
		r   *Rendered
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := w.render(dir, opts)
		done <- answer{r, err}
	}()
	var tick <-chan time.Time
	if p.maxMemory > 0 {
		t := time.NewTicker(p.rssEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case a := <-done:
			if errors.Is(a.err, errWorkerBroken) {
				w.stop()
				return nil, a.err
			}
			p.put(w)
			return a.r, a.err
		case <-tick:
			if rss := w.rss(); rss > p.maxMemory {
				w.stop()
				<-done
				return nil, fmt.Errorf("the render used more than %s of memory and was stopped", mib(p.maxMemory))
			}
		case <-ctx.Done():
			w.stop()
			<-done
			return nil, fmt.Errorf("%w (%w); the render took longer than the time it was given and its worker was stopped", ErrDeadline, ctx.Err())
		}
	}
}

// get returns an idle worker or starts one.
func (p *Workers) get() (*worker, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("render workers closed")
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
		return w, nil
	}
	p.mu.Unlock()
	return startWorker(p.start())
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

func (w *worker) stop() {
	w.stopOnce.Do(func() {
		w.cmd.Process.Kill() //nolint:errcheck // it may have exited already
		w.in.Close()
		<-w.exited
	})
}

// rss is the worker's resident memory in bytes (0 if unknown).
func (w *worker) rss() int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(w.cmd.Process.Pid) + "/status")
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

// workerRequest and workerAnswer are the frames between a daemon and its worker.
type workerRequest struct {
	Dir     string  `json:"dir"`
	Options Options `json:"options"`
}

type workerAnswer struct {
	Kind    SourceKind    `json:"kind,omitempty"`
	Objects []byte        `json:"objects,omitempty"` // as Write prints them
	Remote  []RemoteInput `json:"remote,omitempty"`
	Error   string        `json:"error,omitempty"`
	Is      []string      `json:"is,omitempty"` // the sentinel errors the error wraps
}

func (w *worker) render(dir string, opts Options) (*Rendered, error) {
	if err := writeFrame(w.in, workerRequest{Dir: dir, Options: opts}); err != nil {
		return nil, w.broken(err)
	}
	var a workerAnswer
	if err := readFrame(w.out, &a); err != nil {
		return nil, w.broken(err)
	}
	if a.Error != "" {
		return nil, &workerError{msg: a.Error, is: a.Is}
	}
	objs, err := parseYAML("render worker output", a.Objects)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errWorkerBroken, err)
	}
	return &Rendered{Kind: a.Kind, Objects: objs, Remote: a.Remote}, nil
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

// ServeWorker answers render requests read from in on out, one at a time, until in
// ends: the render-worker command a daemon starts through Workers.
func ServeWorker(in io.Reader, out io.Writer) error {
	r := bufio.NewReader(in)
	for {
		var req workerRequest
		if err := readFrame(r, &req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var a workerAnswer
		rendered, err := Render(context.Background(), req.Dir, req.Options)
		if err == nil {
			var b bytes.Buffer
			if err = Write(&b, rendered.Objects); err == nil {
				a.Kind, a.Objects, a.Remote = rendered.Kind, b.Bytes(), rendered.Remote
			}
		}
		if err != nil {
			a.Error = err.Error()
			for name, s := range sentinels {
				if errors.Is(err, s) {
					a.Is = append(a.Is, name)
				}
			}
		}
		if err := writeFrame(out, a); err != nil {
			return err
		}
	}
}

// writeFrame writes v as JSON after its length (4 bytes, big endian).
func writeFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxWorkerAnswer {
		return fmt.Errorf("render output of %d bytes is larger than %s", len(b), mib(maxWorkerAnswer))
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// readFrame reads one frame into v; a frame over maxWorkerAnswer is an error.
func readFrame(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxWorkerAnswer {
		return fmt.Errorf("render worker frame of %d bytes is larger than %s", size, mib(maxWorkerAnswer))
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// mib states a bound in MiB (bounds here are whole MiB: renderWorkerMemory is
// at least 1MiB, the frame bound 256 MiB).
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
