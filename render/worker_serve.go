package render

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// The protocol between a daemon (Workers) and its worker (ServeWorker), over the
// worker's standard input and output. Frames are JSON after their length (4
// bytes, big endian), at most maxWorkerFrame. The daemon sends a request; the
// worker answers:
//
//	render  {dir, options}  ->  {kind, remote, uses} or {error}; the worker keeps the objects
//	apply   {edits}         ->  {} or {error} (the objects are dropped on an error)
//	write                   ->  chunks, then {} or {error}; the objects are dropped
//	drop                    ->  (nothing); the objects are dropped
//	ping                    ->  {}: the worker has started (Workers.Prestart)
//
// A chunk is its length (4 bytes, big endian, at most workerChunk) and that many
// bytes of the output; a chunk of length 0 ends the output, and the answer after
// it says whether the output is whole.
const (
	opRender = "render"
	opApply  = "apply"
	opWrite  = "write"
	opDrop   = "drop"
	opPing   = "ping"
)

const (
	// maxWorkerFrame bounds one frame read from a worker (the image fields of a
	// render: a few hundred bytes each).
	maxWorkerFrame = 64 << 20
	// workerChunk bounds one chunk of output a worker streams.
	workerChunk = 64 << 10
)

type workerRequest struct {
	Op      string  `json:"op"`
	Dir     string  `json:"dir,omitempty"`
	Options Options `json:"options"`
	Edits   *Edits  `json:"edits,omitempty"`
}

type workerAnswer struct {
	Kind   SourceKind    `json:"kind,omitempty"`
	Remote []RemoteInput `json:"remote,omitempty"`
	Uses   []wireUse     `json:"uses,omitempty"`
	Error  string        `json:"error,omitempty"`
	Is     []string      `json:"is,omitempty"` // the sentinel errors the error wraps
}

// wireUse is an ImageUse as it crosses from a worker; its image is parsed again
// from Raw on the daemon's side, as FindImages parsed it.
type wireUse struct {
	Object      ObjectRef          `json:"object"`
	ObjectIndex int                `json:"objectIndex"`
	Path        string             `json:"path"`
	Container   string             `json:"container,omitempty"`
	Raw         string             `json:"raw"`
	Platforms   []resolve.Platform `json:"platforms,omitempty"`
}

// setError sets a's error and the sentinels it wraps.
func (a *workerAnswer) setError(err error) {
	if err == nil {
		return
	}
	a.Error = err.Error()
	for name, s := range sentinels {
		if errors.Is(err, s) {
			a.Is = append(a.Is, name)
		}
	}
}

// imageUses are the uses of the answer, parsed.
func (a *workerAnswer) imageUses() ([]ImageUse, error) {
	uses := make([]ImageUse, len(a.Uses))
	for i, w := range a.Uses {
		img, err := resolve.ParseImage(w.Raw)
		if err != nil {
			return nil, fmt.Errorf("%w: image field %d: %w", errWorkerBroken, i, err)
		}
		uses[i] = ImageUse{Object: w.Object, Path: w.Path, Container: w.Container, Image: img, Raw: w.Raw,
			Platforms: w.Platforms, Index: i, ObjectIndex: w.ObjectIndex}
	}
	return uses, nil
}

// ServeWorker answers render requests read from in on out, one at a time, until in
// ends: the render-worker command a daemon starts through Workers.
func ServeWorker(in io.Reader, out io.Writer) error {
	r := bufio.NewReader(in)
	var held *localSession
	for {
		var req workerRequest
		if err := readFrame(r, &req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var a workerAnswer
		switch req.Op {
		case opRender:
			var err error
			if held, err = openLocal(context.Background(), req.Dir, req.Options); err == nil {
				a = answerOf(held)
			}
			a.setError(err)
		case opApply:
			a.setError(applyHeld(held, req.Edits))
			if a.Error != "" {
				held = nil
			}
		case opWrite:
			err := writeHeld(held, out)
			held = nil
			if errors.Is(err, errOutput) {
				return err // the daemon is gone
			}
			a.setError(err)
		case opDrop:
			held = nil
			continue
		case opPing: // answered as it is: the worker has started
		default:
			return fmt.Errorf("render worker: unknown request %q", req.Op)
		}
		err := writeFrame(out, a)
		if errors.Is(err, errFrameSize) {
			held = nil
			a = workerAnswer{}
			a.setError(fmt.Errorf("the render's answer is too large: %w", err))
			err = writeFrame(out, a)
		}
		if err != nil {
			return err
		}
	}
}

// answerOf is the answer to a render: what the daemon needs to decide its edits.
func answerOf(s *localSession) workerAnswer {
	a := workerAnswer{Kind: s.r.Kind, Remote: s.r.Remote, Uses: make([]wireUse, len(s.uses))}
	for i, u := range s.uses {
		a.Uses[i] = wireUse{Object: u.Object, ObjectIndex: u.ObjectIndex, Path: u.Path, Container: u.Container, Raw: u.Raw, Platforms: u.Platforms}
	}
	return a
}

func applyHeld(held *localSession, e *Edits) error {
	if held == nil || e == nil {
		return errors.New("render worker: edits without a render")
	}
	return held.Apply(*e)
}

// errOutput marks a failure to write to the daemon.
var errOutput = errors.New("render worker: write to the daemon")

// writeHeld streams held's output to out in chunks, then the chunk that ends it.
// An error of the render (an object that cannot be printed) is returned for the
// answer; one of out wraps errOutput.
func writeHeld(held *localSession, out io.Writer) error {
	cw := &chunkWriter{out: out, buf: make([]byte, 0, workerChunk)}
	var err error
	if held == nil {
		err = errors.New("render worker: write without a render")
	} else {
		_, err = held.WriteTo(cw)
	}
	if cw.err != nil {
		return cw.err
	}
	if ferr := cw.flush(); ferr != nil {
		return ferr
	}
	if ferr := cw.chunk(nil); ferr != nil {
		return ferr
	}
	return err
}

// chunkWriter cuts what is written into chunks of at most workerChunk bytes.
type chunkWriter struct {
	out io.Writer
	buf []byte
	err error // of out: wraps errOutput
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), workerChunk-len(c.buf))
		c.buf = append(c.buf, p[:k]...)
		p = p[k:]
		if len(c.buf) == workerChunk {
			if err := c.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	err := c.chunk(c.buf)
	c.buf = c.buf[:0]
	return err
}

// chunk writes one chunk (nil: the end).
func (c *chunkWriter) chunk(b []byte) error {
	if c.err != nil {
		return c.err
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := c.out.Write(n[:]); err != nil {
		c.err = fmt.Errorf("%w: %w", errOutput, err)
		return c.err
	}
	if _, err := c.out.Write(b); err != nil {
		c.err = fmt.Errorf("%w: %w", errOutput, err)
	}
	return c.err
}

// readChunk reads one chunk into buf (of workerChunk bytes) and returns it; an
// empty chunk ends the output.
func readChunk(r io.Reader, buf []byte) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > uint32(len(buf)) {
		return nil, fmt.Errorf("render worker chunk of %d bytes is larger than %d", size, len(buf))
	}
	_, err := io.ReadFull(r, buf[:size])
	return buf[:size], err
}

// errFrameSize marks a frame larger than maxWorkerFrame.
var errFrameSize = errors.New("render worker frame too large")

// writeFrame writes v as JSON after its length (4 bytes, big endian).
func writeFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxWorkerFrame {
		return fmt.Errorf("%w: %d bytes, more than %s", errFrameSize, len(b), mib(maxWorkerFrame))
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// readFrame reads one frame into v; a frame over maxWorkerFrame is an error.
func readFrame(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxWorkerFrame {
		return fmt.Errorf("render worker frame of %d bytes is larger than %s", size, mib(maxWorkerFrame))
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
