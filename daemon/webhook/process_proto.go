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
