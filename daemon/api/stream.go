package api

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The generate stream: the body of a POST /v1/generate answer, so that neither
// the daemon nor the client holds a render's manifests whole.
//
// The manifests come first, in chunks: each is its length (4 bytes, big endian,
// 1 to MaxChunk) and that many bytes of generate's stdout. A chunk of length 0
// ends them; the trailer follows, a GenerateResponse as JSON (Stderr, ExitCode;
// at most MaxTrailer bytes) to the end of the body. The manifests count only if
// the trailer's exit code is 0: a render that fails once some chunks are out (a
// render worker that died while writing) says so in the trailer, and the caller
// discards what it got. A body that ends before its trailer is a broken answer.
const (
	// GenerateStreamType is the Content-Type of a generate stream.
	GenerateStreamType = "application/vnd.argocd-image-resolver.generate-stream"
	// MaxChunk bounds one chunk of a generate stream.
	MaxChunk = 1 << 20
	// MaxTrailer bounds the trailer of a generate stream.
	MaxTrailer = 1 << 20
)

// WriteChunk writes b (at most MaxChunk bytes) as one chunk of a generate stream;
// an empty b ends the manifests.
func WriteChunk(w io.Writer, b []byte) error {
	if len(b) > MaxChunk {
		return fmt.Errorf("generate stream chunk of %d bytes, more than %d", len(b), MaxChunk)
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

// WriteTrailer ends a generate stream: the chunk of length 0, then resp.
func WriteTrailer(w io.Writer, resp GenerateResponse) error {
	if err := WriteChunk(w, nil); err != nil {
		return err
	}
	resp.Stdout = nil
	return json.NewEncoder(w).Encode(resp)
}

// ReadStream reads a generate stream from r: the manifests into stdout (at most
// maxStdout bytes), then the trailer, which it returns. An error is a broken or
// malformed stream, or one of stdout.
func ReadStream(r io.Reader, stdout io.Writer, maxStdout int64) (*GenerateResponse, error) {
	buf := make([]byte, 64<<10)
	var total int64
	for {
		var n [4]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return nil, fmt.Errorf("generate stream cut after %d bytes of manifests: %w", total, unexpected(err))
		}
		size := int64(binary.BigEndian.Uint32(n[:]))
		if size == 0 {
			break
		}
		if size > MaxChunk {
			return nil, fmt.Errorf("generate stream chunk of %d bytes, more than %d", size, MaxChunk)
		}
		if total += size; total > maxStdout {
			return nil, fmt.Errorf("generate stream of more than %d bytes of manifests", maxStdout)
		}
		got, err := io.CopyBuffer(stdout, io.LimitReader(r, size), buf)
		if err == nil && got < size {
			err = fmt.Errorf("generate stream cut in a chunk: %w", io.ErrUnexpectedEOF)
		}
		if err != nil {
			return nil, err
		}
	}
	var resp GenerateResponse
	if err := json.NewDecoder(io.LimitReader(r, MaxTrailer)).Decode(&resp); err != nil {
		return nil, fmt.Errorf("generate stream trailer: %w", unexpected(err))
	}
	return &resp, nil
}

// unexpected turns the end of a stream in its middle into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
