package render

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Open renders dir in a worker, which finds its image fields and keeps the
// objects: the Session applies edits there and streams the output from there
// (WriteTo), in chunks of at most 64 KiB, so that this process never holds it. The
// worker and its slot are the Session's until Close.
//
// Waiting for a free worker counts against ctx. At ctx's end, in any phase, the
// worker is killed and the error wraps ErrDeadline and ctx.Err(), as Render's
// does; past the worker memory bound it is killed with an error saying so.
func (p *Workers) Open(ctx context.Context, dir string, opts Options) (Session, error) {
	s, err := p.open(ctx, dir, opts, p.get)
	if errors.Is(err, errReusedWorkerDead) && ctx.Err() == nil {
		// A worker kept idle broke before its render was answered: it may have
		// died while idle (killed from outside, as the kernel's OOM killer does)
		// before the pool saw it exit. Once, on a new worker: a render that breaks
		// a new worker too fails with that worker's error.
		s, err = p.open(ctx, dir, opts, func() (*worker, bool, error) {
			w, err := startWorker(p.start())
			return w, false, err
		})
	}
	return s, err
}

// errReusedWorkerDead marks a render whose reused worker was dead before it
// answered: Open runs it again on a new one.
var errReusedWorkerDead = errors.New("the idle render worker it was given had died")

// open takes a slot and a worker from get, and renders dir on it.
func (p *Workers) open(ctx context.Context, dir string, opts Options, get func() (*worker, bool, error)) (Session, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w (%w); every render worker was busy until then", ErrDeadline, ctx.Err())
	}
	w, reused, err := get()
	if err != nil {
		<-p.slots
		return nil, err
	}
	s := &workerSession{pool: p, w: w, state: stateIdle, stop: make(chan struct{}), watched: make(chan struct{})}
	go s.watch(ctx)
	a, err := s.call(workerRequest{Op: opRender, Dir: dir, Options: opts}, stateHeld)
	if err == nil {
		s.uses, err = a.imageUses()
	}
	if err != nil {
		s.Close()
		if reused && errors.Is(err, errWorkerBroken) {
			return nil, fmt.Errorf("%w: %w", errReusedWorkerDead, err)
		}
		return nil, err
	}
	s.kind, s.remote = a.Kind, a.Remote
	return s, nil
}

// Busy is the number of renders holding a worker now.
func (p *Workers) Busy() int { return len(p.slots) }

// sessionState is where a worker session is in the protocol (worker_serve.go).
type sessionState int

const (
	stateIdle    sessionState = iota // between requests, holding no objects
	stateHeld                        // between requests, holding the objects
	stateApplied                     // between requests, holding the edited objects
	stateBusy                        // a request sent, its answer not read whole
	stateBroken                      // out of protocol, dead or killed
)

// workerSession is a Session whose objects a worker holds.
type workerSession struct {
	pool   *Workers
	w      *worker
	kind   SourceKind
	remote []RemoteInput
	uses   []ImageUse

	state   sessionState
	cause   atomic.Pointer[error] // why watch killed the worker
	stop    chan struct{}         // closed by Close: watch returns
	watched chan struct{}         // closed when watch has returned
	once    sync.Once
}

func (s *workerSession) Kind() SourceKind      { return s.kind }
func (s *workerSession) Remote() []RemoteInput { return s.remote }
func (s *workerSession) Uses() []ImageUse      { return s.uses }

// watch kills the worker at ctx's end or past the memory bound, until Close.
func (s *workerSession) watch(ctx context.Context) {
	defer close(s.watched)
	var tick <-chan time.Time
	if s.pool.maxMemory > 0 {
		t := time.NewTicker(s.pool.rssEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.stop:
			return
		case <-tick:
			if rss := s.w.rss(); rss > s.pool.maxMemory {
				s.kill(fmt.Errorf("the render used more than %s of memory (renderWorkerMemory) and was stopped; an app this large needs a larger renderWorkerMemory, and a container memory limit to hold it", mib(s.pool.maxMemory)))
				return
			}
		case <-ctx.Done():
			s.kill(fmt.Errorf("%w (%w); the render took longer than the time it was given and its worker was stopped", ErrDeadline, ctx.Err()))
			return
		}
	}
}

func (s *workerSession) kill(cause error) {
	s.cause.Store(&cause)
	s.w.stop()
}

// failed turns a failure to speak with the worker into the error to return: why
// it was killed, else how it broke.
func (s *workerSession) failed(err error) error {
	s.state = stateBroken
	// watch stores the cause before it kills: a read the kill broke finds it.
	if c := s.cause.Load(); c != nil {
		return *c
	}
	return s.w.broken(err)
}

// call sends req and reads its answer; the session is then in state next, or
// idle when the worker answered an error (it drops its objects).
func (s *workerSession) call(req workerRequest, next sessionState) (*workerAnswer, error) {
	s.state = stateBusy
	if err := writeFrame(s.w.in, req); err != nil {
		return nil, s.failed(err)
	}
	var a workerAnswer
	if err := readFrame(s.w.out, &a); err != nil {
		return nil, s.failed(err)
	}
	if a.Error != "" {
		s.state = stateIdle
		return nil, &workerError{msg: a.Error, is: a.Is}
	}
	s.state = next
	return &a, nil
}

func (s *workerSession) Apply(e Edits) error {
	if s.state != stateHeld {
		return errors.New("render session: edits applied twice, after the output or after close")
	}
	_, err := s.call(workerRequest{Op: opApply, Edits: &e}, stateApplied)
	return err
}

func (s *workerSession) WriteTo(w io.Writer) (int64, error) {
	if s.state != stateHeld && s.state != stateApplied {
		return 0, errors.New("render session: written twice or after close")
	}
	s.state = stateBusy
	if err := writeFrame(s.w.in, workerRequest{Op: opWrite}); err != nil {
		return 0, s.failed(err)
	}
	buf := make([]byte, workerChunk)
	var n int64
	for {
		chunk, err := readChunk(s.w.out, buf)
		if err != nil {
			return n, s.failed(err)
		}
		if len(chunk) == 0 {
			break
		}
		k, err := w.Write(chunk)
		n += int64(k)
		if err != nil {
			return n, err // busy: Close stops the worker
		}
	}
	var a workerAnswer
	if err := readFrame(s.w.out, &a); err != nil {
		return n, s.failed(err)
	}
	s.state = stateIdle
	if a.Error != "" {
		return n, &workerError{msg: a.Error, is: a.Is}
	}
	return n, nil
}

// Close gives the worker back when it is between requests (after telling it to
// drop the objects it holds), else stops it; then frees its slot.
func (s *workerSession) Close() {
	s.once.Do(func() {
		close(s.stop)
		<-s.watched
		switch {
		case s.cause.Load() != nil || s.state == stateBusy || s.state == stateBroken:
			s.w.stop()
		case s.state == stateHeld || s.state == stateApplied:
			if err := writeFrame(s.w.in, workerRequest{Op: opDrop}); err != nil {
				s.w.stop()
				break
			}
			s.pool.put(s.w)
		default:
			s.pool.put(s.w)
		}
		s.uses = nil
		<-s.pool.slots
	})
}
