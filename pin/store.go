package pin

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// The repository an attempt works in: on disk (a directory of its own under
// the temporary directory, removed when the attempt ends), objects read lazily
// from the fetched pack through its index, and bounded: the pack a fetch
// transfers, and the objects it holds once inflated, are counted against the
// writer's maxRepositoryBytes before go-git indexes them.

// DefaultMaxRepositoryBytes bounds what the writer fetches and holds of one
// repository (WithMaxRepositoryBytes): 256 MiB. A branch tip of manifests, and
// the 50 commits of history the holds read, is a few MiB even in a large
// monorepo; 256 MiB leaves room for repositories that also keep charts,
// documentation and a few binary assets, while a write (the pack on disk, go-git
// indexing it one object at a time) stays well within the sidecar's memory.
const DefaultMaxRepositoryBytes int64 = 256 << 20

// MaxRepositoryBytesSetting names the setting that raises the bound, for
// messages.
const MaxRepositoryBytesSetting = "git.maxRepositoryBytes (IMAGE_RESOLVER_GIT_MAX_REPOSITORY_BYTES, --git-max-repository-bytes)"

// ErrRepositoryTooLarge: a fetch of the repository transferred, or would hold
// once inflated, more than the writer's bound; its pins are not pushed.
var ErrRepositoryTooLarge = errors.New("repository larger than the pin writer's bound")

const (
	// objectOverhead is what each object of a pack is counted for beside its
	// size: what go-git keeps of it while indexing, so that a pack of millions
	// of tiny objects is bounded too.
	objectOverhead = 256
	// objectCacheBytes bounds the objects an attempt keeps decoded in memory
	// (trees on the way to the files edited, those files, commits).
	objectCacheBytes = 8 << 20
)

// TooLargeError is a repository a fetch of which is over the writer's bound.
type TooLargeError struct {
	Repository string // without credentials
	Bound      int64
	// What is over the bound: "transferred" (the pack's bytes) or "inflated"
	// (the objects' sizes it declares).
	What string
}

func (e *TooLargeError) Error() string {
	what := "transferred"
	if e.What == "inflated" {
		what = "would hold (inflated)"
	}
	return fmt.Sprintf("git repository %s: the pin writer holds at most %s of a repository, and fetching this one's branch %s more; its pins are not pushed: raise %s, or keep large files out of the branch pins are committed to",
		e.Repository, formatBytes(e.Bound), what, MaxRepositoryBytesSetting)
}

// Unwrap makes the error ErrRepositoryTooLarge.
func (e *TooLargeError) Unwrap() error { return ErrRepositoryTooLarge }

// formatBytes writes n as MiB or GiB when it is a whole number of them.
func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// boundedStore is the on-disk storage of one attempt. Every pack fetched into
// it is counted: its bytes as they arrive, then the sizes of its objects, all
// against max, over every fetch of the attempt.
type boundedStore struct {
	*filesystem.Storage
	dir   string
	shown string
	max   int64
	// fetched and held are the pack bytes and the inflated object bytes (with
	// objectOverhead each) of the attempt's fetches so far.
	fetched, held int64
}

// newBoundedStore makes the storage of an attempt on repository shown in a
// new temporary directory; close removes it.
func newBoundedStore(shown string, max int64) (*boundedStore, error) {
	dir, err := os.MkdirTemp("", "image-resolver-pin-*")
	if err != nil {
		return nil, fmt.Errorf("git repository %s: a directory to fetch into: %w", shown, err)
	}
	fs := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRU(objectCacheBytes),
		filesystem.Options{ExclusiveAccess: true, LargeObjectThreshold: maxFileSize})
	return &boundedStore{Storage: fs, dir: dir, shown: shown, max: max}, nil
}

// close removes the attempt's repository.
func (s *boundedStore) close() {
	_ = s.Storage.Close()
	_ = os.RemoveAll(s.dir)
}

// PackfileWriter takes a fetched pack: it is written to a file of its own,
// counted as it arrives; on Close its objects are counted, and only a pack
// within the bound is handed to go-git to index.
func (s *boundedStore) PackfileWriter() (io.WriteCloser, error) {
	f, err := os.CreateTemp(s.dir, "incoming-*.pack")
	if err != nil {
		return nil, err
	}
	return &incomingPack{s: s, f: f}, nil
}

// incomingPack is a pack being fetched.
type incomingPack struct {
	s      *boundedStore
	f      *os.File
	failed bool
}

func (p *incomingPack) Write(b []byte) (int, error) {
	if p.s.fetched+int64(len(b)) > p.s.max {
		p.failed = true
		return 0, &TooLargeError{Repository: p.s.shown, Bound: p.s.max, What: "transferred"}
	}
	n, err := p.f.Write(b)
	p.s.fetched += int64(n)
	if err != nil {
		p.failed = true
	}
	return n, err
}

// Close counts the pack's objects and, within the bound, has go-git store it.
func (p *incomingPack) Close() error {
	defer os.Remove(p.f.Name())
	defer p.f.Close()
	if p.failed {
		return nil // the fetch fails with the Write's error
	}
	size, err := p.f.Seek(0, io.SeekCurrent)
	if err != nil || size == 0 {
		return err // an empty pack: go-git says so
	}
	if err := p.count(); err != nil {
		return err
	}
	if _, err := p.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	pw, err := p.s.Storage.PackfileWriter()
	if err != nil {
		return err
	}
	if _, err := io.Copy(pw, p.f); err != nil {
		pw.Close()
		return err
	}
	return pw.Close()
}

// count adds the sizes of the pack's objects (a delta's: the object it makes)
// to what the store holds, and fails past the bound. It reads the pack as a
// stream, inflating each object without keeping it.
func (p *incomingPack) count() error {
	if _, err := p.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	sc := packfile.NewScanner(p.f)
	_, n, err := sc.Header()
	if err != nil {
		return err
	}
	for range n {
		oh, err := sc.NextObjectHeader()
		if err != nil {
			return err
		}
		size := oh.Length
		if oh.Type == plumbing.OFSDeltaObject || oh.Type == plumbing.REFDeltaObject {
			var d deltaHeader
			if _, _, err := sc.NextObject(&d); err != nil {
				return err
			}
			var ok bool
			if size, ok = d.target(); !ok {
				return fmt.Errorf("git repository %s: the fetched pack has a malformed delta at offset %d", p.s.shown, oh.Offset)
			}
		}
		p.s.held += max(size, 0) + objectOverhead
		if p.s.held > p.s.max {
			return &TooLargeError{Repository: p.s.shown, Bound: p.s.max, What: "inflated"}
		}
	}
	return nil
}

// deltaHeader keeps the first bytes of a delta's instructions, which say the
// sizes of its base and of the object it makes, and discards the rest.
type deltaHeader struct {
	b [20]byte
	n int
}

func (d *deltaHeader) Write(b []byte) (int, error) {
	d.n += copy(d.b[d.n:], b)
	return len(b), nil
}

// target is the size of the object the delta makes: the second of the two
// variable-length sizes it starts with; false when they do not fit.
func (d *deltaHeader) target() (int64, bool) {
	b := d.b[:d.n]
	var size int64
	for range 2 {
		size = 0
		for shift := uint(0); ; shift += 7 {
			if len(b) == 0 || shift > 56 {
				return 0, false
			}
			c := b[0]
			b = b[1:]
			size |= int64(c&0x7f) << shift
			if c&0x80 == 0 {
				break
			}
		}
	}
	return size, true
}
