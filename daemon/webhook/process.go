package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of a listener process.
const (
	// DefaultNice is the listener process's nice value, the lowest priority a
	// process can give itself; with idle scheduling (the default) it only
	// orders the listener's threads among themselves.
	DefaultNice = 19
	// DefaultPushTimeout bounds how long the listener waits for the daemon to
	// take a push before it answers the sender 503.
	DefaultPushTimeout = 5 * time.Second
)

// Process serves the webhooks in a child process of lower priority
// (ServeProcess) on a listener the daemon holds, and hands the pushes it
// authenticates to a Sink in this process. A child that exits is started
// again, on the same listener. It is a prometheus.Collector of the child's
// webhook_events_total, kept monotonic across restarts.
type Process struct {
	start func() *exec.Cmd
	file  *os.File // the listener, inherited by every child as fd 3
	init  processInit
	sink  Sink
	log   *slog.Logger
	desc  *prometheus.Desc
	ready chan struct{}

	mu        sync.Mutex
	cur       *child
	base      map[[2]string]float64 // counts of the children that exited
	readyOnce sync.Once
	stopping  bool
	stop      chan struct{} // closed by Stop: no child is started after it
	done      chan struct{}
}

// ProcessOption configures a Process.
type ProcessOption func(*Process)

// WithProcessLogger logs the process's life and the child's log records to log.
func WithProcessLogger(log *slog.Logger) ProcessOption {
	return func(p *Process) {
		if log != nil {
			p.log = log
		}
	}
}

// WithProcessLimits sets the child's handler bounds.
func WithProcessLimits(l Limits) ProcessOption { return func(p *Process) { p.init.Limits = l } }

// WithPriority sets the child's nice value (default DefaultNice; 0 keeps the
// daemon's) and whether it runs under SCHED_IDLE (default true): only on CPU
// time the daemon and its render workers leave, giving it up at once when one
// of them wakes.
func WithPriority(nice int, idle bool) ProcessOption {
	return func(p *Process) { p.init.Nice, p.init.Idle = nice, idle }
}

// WithPushTimeout bounds how long the child waits for a push to be taken.
func WithPushTimeout(d time.Duration) ProcessOption {
	return func(p *Process) {
		if d > 0 {
			p.init.PushTimeout = d
		}
	}
}

// StartProcess starts the listener process: start makes its command (this
// program's webhook-listener command), ln is the listener it serves (kept open
// here: its address stays bound while a child restarts), secrets are the kinds
// served. It fails on secrets NewHandler would refuse; the child's own start
// is awaited by Ready. The process runs until Stop.
func StartProcess(start func() *exec.Cmd, ln *net.TCPListener, secrets Secrets, sink Sink, opts ...ProcessOption) (*Process, error) {
	if _, err := serveKinds(secrets); err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, errors.New("webhook: no sink")
	}
	f, err := ln.File()
	if err != nil {
		return nil, fmt.Errorf("webhook listener: %w", err)
	}
	p := &Process{start: start, file: f, sink: sink, log: slog.New(slog.DiscardHandler), ready: make(chan struct{}),
		init: processInit{Secrets: secrets, Nice: DefaultNice, Idle: true, PushTimeout: DefaultPushTimeout},
		base: map[[2]string]float64{}, stop: make(chan struct{}), done: make(chan struct{}),
		desc: prometheus.NewDesc(namespace+"_webhook_events_total", eventsHelp, []string{"kind", "outcome"}, nil)}
	for _, o := range opts {
		o(p)
	}
	for kind := range secrets {
		for _, o := range outcomes {
			p.base[[2]string{kind, o}] = 0 // every series from the start, at 0
		}
	}
	p.init.LogLevel = lowestEnabled(p.log)
	go p.run()
	return p, nil
}

// lowestEnabled is the lowest level log writes: the child sends no record the
// parent would drop.
func lowestEnabled(log *slog.Logger) slog.Level {
	for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn} {
		if log.Enabled(context.Background(), l) {
			return l
		}
	}
	return slog.LevelError
}

// Pid is the running listener process's id (0 between two).
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return 0
	}
	return p.cur.cmd.Process.Pid
}

// Ready is closed once a child serves.
func (p *Process) Ready() <-chan struct{} { return p.ready }

// run starts children until Stop, waiting a little longer after each early
// exit (1s doubling to 30s; a child that served a minute starts the count again).
func (p *Process) run() {
	defer close(p.done)
	backoff := time.Second
	for {
		began := time.Now()
		c, err := p.spawn()
		if c != nil { // started, if not told its init: wait for its end
			if werr := c.wait(); err == nil {
				err = werr
			}
		}
		p.mu.Lock()
		stopping := p.stopping
		p.cur = nil // wait folded its counts already, under the same lock
		p.mu.Unlock()
		if stopping {
			return
		}
		if time.Since(began) > time.Minute {
			backoff = time.Second
		}
		p.log.Error("webhook listener process exited; starting another", "err", err, "after", backoff)
		select {
		case <-time.After(backoff):
		case <-p.stop:
			return
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// Stop asks the child to stop (deliveries in flight end, for a few seconds),
// kills it if it has not by ctx's end, and starts no other.
func (p *Process) Stop(ctx context.Context) {
	p.mu.Lock()
	if !p.stopping {
		close(p.stop)
	}
	p.stopping = true
	c := p.cur
	p.mu.Unlock()
	if c != nil {
		c.stdin.Close()
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		if c != nil {
			c.cmd.Process.Kill() //nolint:errcheck // it may have exited since
		}
		<-p.done
	}
	p.file.Close()
}

// Describe implements prometheus.Collector.
func (p *Process) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

// Collect implements prometheus.Collector: the counts the exited children
// reached plus the running child's, asked for now (for at most a second; its
// last answer otherwise).
func (p *Process) Collect(ch chan<- prometheus.Metric) {
	p.mu.Lock()
	c := p.cur
	p.mu.Unlock()
	var now map[[2]string]float64
	if c != nil {
		now = c.counts(time.Second)
	}
	p.mu.Lock()
	total := make(map[[2]string]float64, len(p.base))
	for k, v := range p.base {
		total[k] = v
	}
	if p.cur == c { // not exited meanwhile: its counts are not in the base yet
		for k, v := range now {
			total[k] += v
		}
	}
	p.mu.Unlock()
	keys := slices.SortedFunc(func(yield func([2]string) bool) {
		for k := range total {
			if !yield(k) {
				return
			}
		}
	}, func(a, b [2]string) int { return slices.Compare(a[:], b[:]) })
	for _, k := range keys {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.CounterValue, total[k], k[0], k[1])
	}
}

// spawn starts a child and sends it its init message.
func (p *Process) spawn() (*child, error) {
	cmd := p.start()
	cmd.ExtraFiles = []*os.File{p.file}
	// The listener dies with the daemon, never outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr // a panic's trace, which cannot travel as a record
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("start the webhook listener: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start the webhook listener: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the webhook listener: %w", err)
	}
	c := &child{p: p, cmd: cmd, stdin: stdin, conn: newConn(stdout, stdin),
		last: map[[2]string]float64{}, read: make(chan error, 1)}
	p.mu.Lock()
	p.cur = c
	stopping := p.stopping
	p.mu.Unlock()
	if stopping {
		stdin.Close()
	}
	go func() { c.read <- c.serve() }()
	if err := c.conn.send(message{Type: msgInit, Init: &p.init}); err != nil {
		cmd.Process.Kill() //nolint:errcheck
		return c, err
	}
	return c, nil
}

// child is one listener process.
type child struct {
	p     *Process
	cmd   *exec.Cmd
	stdin io.Closer
	conn  *conn
	read  chan error
	asks  waiting // count requests

	mu     sync.Mutex
	last   map[[2]string]float64
	asking bool // a count request is unanswered: no other is sent
}

// wait waits for the child to exit and folds its last counts into the base.
func (c *child) wait() error {
	readErr := <-c.read
	c.stdin.Close()
	err := c.cmd.Wait()
	c.mu.Lock()
	last := c.last
	c.mu.Unlock()
	// Folded and no longer current at once, so that a scrape never counts
	// the child twice (a counter must not go back).
	c.p.mu.Lock()
	for k, v := range last {
		c.p.base[k] += v
	}
	if c.p.cur == c {
		c.p.cur = nil
	}
	c.p.mu.Unlock()
	if err == nil && readErr != nil && !errors.Is(readErr, io.EOF) {
		err = readErr
	}
	return err
}

// serve answers the child's messages until its output ends.
func (c *child) serve() error {
	defer c.asks.close()
	for {
		m, err := c.conn.receive()
		if err != nil {
			return err
		}
		switch m.Type {
		case msgReady:
			c.p.readyOnce.Do(func() { close(c.p.ready) })
			c.p.log.Info("webhook listener process serving", "pid", c.cmd.Process.Pid, "nice", c.p.init.Nice, "idle", c.p.init.Idle)
		case msgPush:
			if err := c.push(m); err != nil {
				return err
			}
		case msgCounts:
			c.keepCounts(m.Counts) // a late answer too: the next scrape may ask again
			c.asks.reply(m)
		case msgLog:
			c.p.relog(m.Log)
		default:
			return fmt.Errorf("webhook listener: unexpected %q message", m.Type)
		}
	}
}

// push hands one push to the sink and answers its verdict.
func (c *child) push(m message) error {
	if m.Event == nil {
		return errors.New("webhook listener: a push without its event")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.p.init.PushTimeout)
	used, err := c.p.sink.Push(ctx, *m.Event)
	cancel()
	reply := message{Type: msgPushed, ID: m.ID, Used: used}
	if err != nil {
		reply.Err = err.Error()
	}
	return c.conn.send(reply)
}

// counts asks the child for its counts, waiting up to wait; without an answer
// it gives the last it had. One request is in flight at most: a child that
// stopped reading holds one sender, not one per scrape.
func (c *child) counts(wait time.Duration) map[[2]string]float64 {
	c.mu.Lock()
	if c.asking {
		defer c.mu.Unlock()
		return c.last
	}
	c.asking = true
	c.mu.Unlock()
	if id, reply, ok := c.asks.add(); ok {
		defer c.asks.drop(id)
		go func() {
			if err := c.conn.send(message{Type: msgCount, ID: id}); err != nil {
				c.keepCounts(nil)
			}
		}()
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-reply:
		case <-t.C:
		}
	} else {
		c.keepCounts(nil) // the child is gone
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// keepCounts keeps the counts the child answered (nil: the request failed)
// and lets the next scrape ask again.
func (c *child) keepCounts(counts []count) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asking = false
	if counts == nil {
		return
	}
	got := make(map[[2]string]float64, len(counts))
	for _, n := range counts {
		got[[2]string{n.Kind, n.Outcome}] = n.Value
	}
	c.last = got
}

// relog logs a child's record with this process's logger.
func (p *Process) relog(r *logRecord) {
	if r == nil {
		return
	}
	args := make([]any, 0, 2*len(r.Attrs)+2)
	for _, a := range r.Attrs {
		args = append(args, a.Key, a.Value)
	}
	args = append(args, "process", "webhook-listener")
	p.log.Log(context.Background(), r.Level, r.Msg, args...)
}
