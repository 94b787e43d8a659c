package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
)

// streamChunk is the size of the chunks of a generate stream the daemon writes.
const streamChunk = 64 << 10

// generateStream writes a generate stream (api.GenerateStreamType) to a caller:
// the manifests in chunks as they come, each flushed to the socket within
// socketLimits.Write (a caller that does not read for that long is cut), then
// the trailer. Its Write fails once the caller is gone or cut.
type generateStream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf *bufio.Writer // gathers small writes into chunks
	err error
}

func newGenerateStream(w http.ResponseWriter) *generateStream {
	w.Header().Set("Content-Type", api.GenerateStreamType)
	// One answer per connection: the write deadline stays on it.
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusOK)
	s := &generateStream{w: w, rc: http.NewResponseController(w)}
	s.buf = bufio.NewWriterSize(chunker{s}, streamChunk)
	return s
}

// Write takes manifests.
func (s *generateStream) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	return s.buf.Write(p)
}

// end writes what is buffered, then the trailer.
func (s *generateStream) end(resp api.GenerateResponse) error {
	if err := s.buf.Flush(); err != nil {
		return err
	}
	if s.err != nil {
		return s.err
	}
	s.deadline()
	if err := api.WriteTrailer(s.w, resp); err != nil {
		return err
	}
	return s.rc.Flush()
}

// deadline gives the next write to the socket socketLimits.Write (not every
// ResponseWriter has a socket under it: then none).
func (s *generateStream) deadline() {
	_ = s.rc.SetWriteDeadline(time.Now().Add(socketLimits.Write))
}

// chunker writes each write it is given as chunks of at most streamChunk
// bytes, each sent to the socket within socketLimits.Write.
type chunker struct{ s *generateStream }

func (c chunker) Write(p []byte) (int, error) {
	s := c.s
	n := 0
	for len(p) > 0 && s.err == nil {
		k := min(len(p), streamChunk)
		s.deadline()
		err := api.WriteChunk(s.w, p[:k])
		if err == nil {
			err = s.rc.Flush()
		}
		if err != nil {
			s.err = fmt.Errorf("write the manifests to the caller: %w", err)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				s.err = fmt.Errorf("the caller read nothing of the manifests for %s, and was cut: %w", socketLimits.Write, err)
			}
			return n, s.err
		}
		n += k
		p = p[k:]
	}
	return n, s.err
}
