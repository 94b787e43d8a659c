package webhook

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// The listener process and its parent talk in JSON lines over the child's
// standard input (parent to child) and output (child to parent). Both sides
// may send at any time; a reply names the id of its request.
const (
	msgInit   = "init"   // parent → child, first: the secrets and limits
	msgReady  = "ready"  // child → parent: serving
	msgPush   = "push"   // child → parent: an authenticated push (ID, Event)
	msgPushed = "pushed" // parent → child: its verdict (ID, Used, Err)
	msgCount  = "count"  // parent → child: ask for the events counted (ID)
	msgCounts = "counts" // child → parent: the counts (ID, Counts)
	msgLog    = "log"    // child → parent: a log record for the parent's log
)

// maxMessage bounds one line of the protocol. The largest is the init message
// (ten secrets) or a push naming a long repository: far below it.
const maxMessage = 1 << 20

type message struct {
	Type   string       `json:"t"`
	ID     uint64       `json:"id,omitempty"`
	Init   *processInit `json:"init,omitempty"`
	Event  *Event       `json:"ev,omitempty"`
	Used   bool         `json:"used,omitempty"`
	Err    string       `json:"err,omitempty"`
	Counts []count      `json:"counts,omitempty"`
	Log    *logRecord   `json:"log,omitempty"`
}

// processInit is what a listener process is told before it serves. The
// secrets travel here, never in its arguments or environment, which other
// processes of the pod can read.
type processInit struct {
	Secrets     Secrets       `json:"secrets"`
	Limits      Limits        `json:"limits"`
	Nice        int           `json:"nice"`
	Idle        bool          `json:"idle"`
	LogLevel    slog.Level    `json:"logLevel"`
	PushTimeout time.Duration `json:"pushTimeout"`
}

// count is one series of webhook_events_total.
type count struct {
	Kind    string  `json:"kind"`
	Outcome string  `json:"outcome"`
	Value   float64 `json:"value"`
}

// logRecord is a log line of the child, logged by the parent with its handler.
type logRecord struct {
	Level slog.Level `json:"level"`
	Msg   string     `json:"msg"`
	Attrs []logAttr  `json:"attrs,omitempty"`
}

type logAttr struct {
	Key   string `json:"k"`
	Value any    `json:"v"`
}

// conn is one side of the protocol: a line reader and a writer safe for
// concurrent senders.
type conn struct {
	in *bufio.Scanner

	mu  sync.Mutex
	out *bufio.Writer
}

func newConn(r io.Reader, w io.Writer) *conn {
	in := bufio.NewScanner(r)
	in.Buffer(make([]byte, 0, 4096), maxMessage)
	return &conn{in: in, out: bufio.NewWriter(w)}
}

// send writes m as one line and flushes it.
func (c *conn) send(m message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s message: %w", m.Type, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out.Write(b)        //nolint:errcheck // the flush reports it
	c.out.WriteByte('\n') //nolint:errcheck
	if err := c.out.Flush(); err != nil {
		return fmt.Errorf("send %s message: %w", m.Type, err)
	}
	return nil
}

// receive reads the next message; io.EOF when the other side closed.
func (c *conn) receive() (message, error) {
	if !c.in.Scan() {
		if err := c.in.Err(); err != nil {
			return message{}, fmt.Errorf("read a message: %w", err)
		}
		return message{}, io.EOF
	}
	var m message
	if err := json.Unmarshal(c.in.Bytes(), &m); err != nil {
		return message{}, fmt.Errorf("decode a message: %w", err)
	}
	if m.Type == "" {
		return message{}, errors.New("decode a message: no type")
	}
	return m, nil
}

// waiting are one side's requests waiting for the other's reply, by id.
type waiting struct {
	mu     sync.Mutex
	next   uint64
	m      map[uint64]chan message
	closed bool
}

// add registers a request: its id and the channel its reply comes on (closed
// without one when the other side is gone). ok is false once closed.
func (w *waiting) add() (id uint64, reply <-chan message, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, nil, false
	}
	if w.m == nil {
		w.m = map[uint64]chan message{}
	}
	w.next++
	ch := make(chan message, 1)
	w.m[w.next] = ch
	return w.next, ch, true
}

// drop forgets request id (its waiter gave up).
func (w *waiting) drop(id uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, id)
}

// reply hands m to the request of its id, if one still waits.
func (w *waiting) reply(m message) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.m[m.ID]; ok {
		delete(w.m, m.ID)
		ch <- m
	}
}

// close ends every request without a reply, and refuses new ones.
func (w *waiting) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for id, ch := range w.m {
		close(ch)
		delete(w.m, id)
	}
}
