package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
)

// ServeProcess is the listener process's side (the program's webhook-listener
// command): it reads its secrets and limits from in, lowers its own priority,
// serves the webhooks on listener (an inherited TCP listener) and hands each
// push to its parent over out, until in closes; then it stops serving, letting
// deliveries in flight end for up to shutdownWait.
//
// It runs apart from the daemon so that a flood of deliveries cannot take the
// CPU its renders need: the kernel schedules threads by priority, and Go's
// scheduler has none among goroutines.
func ServeProcess(in io.Reader, out io.Writer, listener *os.File) error {
	c := newConn(in, out)
	m, err := c.receive()
	if err != nil || m.Type != msgInit || m.Init == nil {
		return fmt.Errorf("webhook listener: no init message first (%v)", err)
	}
	init := m.Init
	ln, err := net.FileListener(listener)
	if err != nil {
		return fmt.Errorf("webhook listener: inherited listener: %w", err)
	}
	listener.Close()
	log := slog.New(&pipeLog{c: c, level: init.LogLevel})
	if err := lowerPriority(init.Nice, init.Idle); err != nil {
		log.Warn("webhook listener priority not lowered in full: a flood of deliveries may slow renders", "nice", init.Nice, "idle", init.Idle, "err", err)
	}
	sink := &parentSink{c: c, timeout: init.PushTimeout}
	reg := prometheus.NewRegistry()
	h, err := NewHandler(init.Secrets, sink, append(init.Limits.options(), WithRegisterer(reg), WithLogger(log))...)
	if err != nil {
		return fmt.Errorf("webhook listener: %w", err)
	}
	srv := NewServer(h)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(netutil.LimitListener(ln, MaxConns)) }()
	if err := c.send(message{Type: msgReady}); err != nil {
		return err
	}
	readErr := make(chan error, 1)
	go func() { readErr <- sink.read(h) }()
	select {
	case err = <-serveErr:
		return fmt.Errorf("webhook listener: %w", err)
	case err = <-readErr: // the parent closed our input, or broke the protocol
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	srv.Shutdown(ctx) //nolint:errcheck // exiting: what is left is dropped
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// shutdownWait bounds how long deliveries in flight may take once the parent
// asks the listener to stop.
const shutdownWait = 5 * time.Second

// parentSink hands pushes to the parent and waits for its verdicts.
type parentSink struct {
	c        *conn
	timeout  time.Duration
	verdicts waiting
}

var errParentGone = errors.New("the daemon did not take the push")

// Push implements Sink.
func (s *parentSink) Push(ctx context.Context, ev Event) (bool, error) {
	id, reply, ok := s.verdicts.add()
	if !ok {
		return false, errParentGone
	}
	defer s.verdicts.drop(id)
	if err := s.c.send(message{Type: msgPush, ID: id, Event: &ev}); err != nil {
		return false, fmt.Errorf("%w: %w", errParentGone, err)
	}
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case m, ok := <-reply:
		if !ok {
			return false, errParentGone
		}
		if m.Err != "" {
			return false, fmt.Errorf("%w: %s", errParentGone, m.Err)
		}
		return m.Used, nil
	case <-t.C:
		return false, fmt.Errorf("%w within %s", errParentGone, s.timeout)
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// read answers the parent's messages until its input ends: verdicts to the
// pushes waiting for them, counts to its requests.
func (s *parentSink) read(h *Handler) error {
	defer s.verdicts.close()
	for {
		m, err := s.c.receive()
		if err != nil {
			return err
		}
		switch m.Type {
		case msgPushed:
			s.verdicts.reply(m)
		case msgCount:
			if err := s.c.send(message{Type: msgCounts, ID: m.ID, Counts: h.counts()}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("webhook listener: unexpected %q message", m.Type)
		}
	}
}

// pipeLog is a slog.Handler that sends records to the parent, which logs them
// with its own handler (format, level, destination).
type pipeLog struct {
	c     *conn
	level slog.Level
	attrs []logAttr
}

func (p *pipeLog) Enabled(_ context.Context, l slog.Level) bool { return l >= p.level }

func (p *pipeLog) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{Level: r.Level, Msg: r.Message, Attrs: append([]logAttr(nil), p.attrs...)}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs = append(rec.Attrs, toLogAttr(a))
		return true
	})
	return p.c.send(message{Type: msgLog, Log: &rec})
}

func (p *pipeLog) WithAttrs(as []slog.Attr) slog.Handler {
	q := *p
	q.attrs = append([]logAttr(nil), p.attrs...)
	for _, a := range as {
		q.attrs = append(q.attrs, toLogAttr(a))
	}
	return &q
}

// WithGroup is not used by this package: a group's attributes are kept flat.
func (p *pipeLog) WithGroup(string) slog.Handler { return p }

// toLogAttr keeps numbers, booleans and strings as they are, and sends the
// rest (durations, times, errors) as their strings.
func toLogAttr(a slog.Attr) logAttr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString, slog.KindInt64, slog.KindUint64, slog.KindFloat64, slog.KindBool:
		return logAttr{Key: a.Key, Value: v.Any()}
	default:
		return logAttr{Key: a.Key, Value: v.String()}
	}
}
