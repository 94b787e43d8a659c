package cache

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
)

// The Redis client (go-redis) allocates what a reply announces before reading it:
// a bulk string of the length its header gives ("$2000000000\r\n"), an array of the
// count its header gives. So every connection to Redis is wrapped: the bytes read
// pass through a streaming RESP2/RESP3 scanner that reads each header before the
// client does and fails the read (closing the connection) when a bulk length, an
// aggregate count, or the whole reply they add up to is over its bound. The
// command then fails like any other failed command: the tier stops using Redis
// until a probe succeeds, and the daemon resolves from memory and registries.

// Bounds of one reply from Redis.
const (
	// DefaultRedisMaxReply bounds the bytes of one reply: a little above the
	// largest value the tier writes (values over maxRedisWrite are not written).
	DefaultRedisMaxReply = 64 << 20
	// maxReplyElements bounds the elements one reply announces, all aggregates
	// (arrays, maps, sets, pushes, attributes) of it together: the client holds
	// an interface value (16 bytes) per element. The tier's largest replies are
	// the watch list's HGETALL (two per app source).
	maxReplyElements = 1_000_000
	// maxHeaderDigits bounds the digits of a length or count (below int64's).
	maxHeaderDigits = 18
)

// ReplyTooLargeError is a reply from Redis refused before the client read it.
type ReplyTooLargeError struct {
	What      string // "bulk string", "array", ...; "reply" for the sum of one reply
	Announced int64  // the size (bytes) or count (elements) announced
	Max       int64
	Elements  bool // Announced and Max count elements, not bytes
}

func (e *ReplyTooLargeError) Error() string {
	if e.Elements {
		return fmt.Sprintf("redis reply refused: %s of %d elements announced, over the bound of %d elements per reply", e.What, e.Announced, e.Max)
	}
	return fmt.Sprintf("redis reply refused: %s of %d bytes announced, over the bound of %d bytes (setting redis.maxReply)", e.What, e.Announced, e.Max)
}

// respScanner follows the replies in the bytes read from one connection. RESP is
// prefix-encoded: every element starts with a type byte and a line; bulk types
// carry a payload of the length their line announces; aggregates announce how
// many elements follow. need counts the elements the current reply still has to
// read, so the scanner knows where a reply ends and sums the reply's sizes.
type respScanner struct {
	maxBytes, maxElems int64

	state  int
	typ    byte
	num    int64
	neg    bool
	digits int
	skip   int64 // bulk payload and its CRLF still to pass

	need  int64 // elements of the current reply still to read
	bytes int64 // bytes of the current reply, announced or read
	elems int64 // elements the current reply announced
}

const (
	respType  = iota // at an element's type byte
	respLine         // in a simple line (status, error, number...), to its LF
	respNum          // in the length or count of a bulk or aggregate header
	respNumLF        // after its CR
	respBulk         // in a bulk payload (and its CRLF)
)

// Kinds of type bytes (0: not RESP).
const (
	respKindLine = iota + 1
	respKindBulk
	respKindAggregate
)

func respKind(b byte) int {
	switch b {
	case '+', '-', ':', ',', '#', '_', '(':
		return respKindLine
	case '$', '!', '=':
		return respKindBulk
	case '*', '%', '~', '>', '|':
		return respKindAggregate
	}
	return 0
}

func respName(b byte) string {
	switch b {
	case '$':
		return "bulk string"
	case '!':
		return "bulk error"
	case '=':
		return "verbatim string"
	case '*':
		return "array"
	case '%':
		return "map"
	case '~':
		return "set"
	case '>':
		return "push"
	case '|':
		return "attribute"
	}
	return fmt.Sprintf("%q", b)
}

// feed scans bytes read, in order; an error refuses the connection.
func (s *respScanner) feed(p []byte) error {
	for len(p) > 0 {
		if s.state == respBulk {
			k := min(s.skip, int64(len(p)))
			s.skip -= k
			p = p[k:]
			if s.skip == 0 {
				s.done(1)
			}
			continue
		}
		b := p[0]
		p = p[1:]
		if err := s.byte(b); err != nil {
			return err
		}
	}
	return nil
}

func (s *respScanner) byte(b byte) error {
	switch s.state {
	case respType:
		if s.need == 0 { // a new reply (or a push between replies)
			s.need, s.bytes, s.elems = 1, 0, 0
		}
		s.typ, s.num, s.neg, s.digits = b, 0, false, 0
		switch respKind(b) {
		case respKindLine:
			s.state = respLine
		case respKindBulk, respKindAggregate:
			s.state = respNum
		default:
			return fmt.Errorf("redis reply refused: type byte %q is not RESP", b)
		}
		return s.count(1)
	case respLine:
		if b == '\n' {
			s.done(1)
		}
		return s.count(1)
	case respNum:
		return s.header(b)
	case respNumLF:
		if b != '\n' {
			return fmt.Errorf("redis reply refused: %s header not ended by CRLF", respName(s.typ))
		}
		return s.headerDone()
	}
	return nil
}

// count adds n bytes read to the current reply.
func (s *respScanner) count(n int64) error {
	s.bytes += n
	if s.bytes > s.maxBytes {
		return &ReplyTooLargeError{What: "reply", Announced: s.bytes, Max: s.maxBytes}
	}
	return nil
}

func (s *respScanner) header(b byte) error {
	switch {
	case b == '-' && s.digits == 0 && !s.neg:
		s.neg = true
	case b >= '0' && b <= '9':
		if s.digits++; s.digits > maxHeaderDigits {
			return fmt.Errorf("redis reply refused: %s header of more than %d digits", respName(s.typ), maxHeaderDigits)
		}
		s.num = s.num*10 + int64(b-'0')
	case b == '\r' && s.digits > 0:
		s.state = respNumLF
	default:
		return fmt.Errorf("redis reply refused: %s header with byte %q (streamed replies are not accepted)", respName(s.typ), b)
	}
	return s.count(1)
}

// headerDone checks a complete length or count against the bounds.
func (s *respScanner) headerDone() error {
	if err := s.count(1); err != nil {
		return err
	}
	n := s.num
	if s.neg {
		if n != 1 {
			return fmt.Errorf("redis reply refused: %s of length -%d", respName(s.typ), n)
		}
		s.done(1) // a null
		return nil
	}
	if respKind(s.typ) == respKindBulk {
		if n > s.maxBytes {
			return &ReplyTooLargeError{What: respName(s.typ), Announced: n, Max: s.maxBytes}
		}
		if s.bytes+n > s.maxBytes {
			return &ReplyTooLargeError{What: "reply", Announced: s.bytes + n, Max: s.maxBytes}
		}
		s.bytes += n + 2
		s.skip, s.state = n+2, respBulk
		return nil
	}
	m := n
	if s.typ == '%' || s.typ == '|' {
		m = 2 * n
	}
	if m > s.maxElems {
		return &ReplyTooLargeError{What: respName(s.typ), Announced: m, Max: s.maxElems, Elements: true}
	}
	if s.elems += m; s.elems > s.maxElems {
		return &ReplyTooLargeError{What: "reply", Announced: s.elems, Max: s.maxElems, Elements: true}
	}
	s.state = respType
	if s.typ == '|' { // attributes precede the element they describe
		s.need += m
		return nil
	}
	s.need += m - 1
	return nil
}

// done ends n elements of the current reply.
func (s *respScanner) done(n int64) {
	s.need -= n
	s.state = respType
}

// boundedConn is a connection to Redis whose reads are scanned.
type boundedConn struct {
	net.Conn
	scan    respScanner
	refused func(error)
	err     atomic.Pointer[error]
}

// boundedSyscallConn keeps the connection's SyscallConn, with which the client
// checks that an idle pooled connection is still open (it only peeks).
type boundedSyscallConn struct{ *boundedConn }

func (c boundedSyscallConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

func (c *boundedConn) Read(p []byte) (int, error) {
	if e := c.err.Load(); e != nil {
		return 0, *e
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		if serr := c.scan.feed(p[:n]); serr != nil {
			c.err.Store(&serr)
			_ = c.Conn.Close()
			if c.refused != nil {
				c.refused(serr)
			}
			return 0, serr
		}
	}
	return n, err
}

// boundedDialer wraps dial's connections: replies over maxBytes (or
// maxReplyElements) are refused, refused is told.
func boundedDialer(dial func(context.Context, string, string) (net.Conn, error), maxBytes int64,
	refused func(error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		bc := &boundedConn{Conn: conn, refused: refused, scan: respScanner{maxBytes: maxBytes, maxElems: maxReplyElements}}
		if _, ok := conn.(syscall.Conn); ok {
			return boundedSyscallConn{bc}, nil
		}
		return bc, nil
	}
}
