package render

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrOutsideRepository marks a read refused because the path, after its symbolic
// links, is not inside the repository checkout (Options.RepoRoot).
var ErrOutsideRepository = errors.New("outside the repository checkout")

// ErrNotRegular marks a read refused because the file is not a regular file (a
// named pipe, a device, a socket): such files are never opened for reading, so a
// render cannot block on them.
var ErrNotRegular = errors.New("not a regular file")

// ErrRemote marks a Kustomize reference that would reach the network (a git or
// HTTP(S) URL) on a host the operator did not list in kustomizeRemoteHosts. Entries
// on a listed host are fetched by the render itself (remote_fetch.go), never by
// Kustomize, and git never runs.
var ErrRemote = errors.New("remote references are not fetched by the sidecar")

// maxFileSize bounds every file a render reads (as Helm bounds chart files).
const maxFileSize = 64 << 20

// boundary is the repository checkout a render may read: every path is checked
// after its symbolic links against the real (symlink-free) root.
type boundary struct {
	root string // absolute, as given
	real string // root with symbolic links evaluated
}

func newBoundary(repoRoot, dir string) (*boundary, error) {
	root := repoRoot
	if root == "" {
		root = dir
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("repository root: %w", err)
	}
	if !within(root, dir) {
		return nil, fmt.Errorf("application directory %s is not inside the repository root %s", dir, root)
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("repository root: %w", err)
	}
	return &boundary{root: root, real: real}, nil
}

// name is p as shown in errors: relative to the repository root when inside it.
func (b *boundary) name(p string) string {
	if rel, err := filepath.Rel(b.root, p); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return filepath.ToSlash(rel)
	}
	if rel, err := filepath.Rel(b.real, p); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return filepath.ToSlash(rel)
	}
	return p
}

// resolve returns p with its symbolic links evaluated, or an error wrapping
// ErrOutsideRepository when that leaves the repository. A path that does not exist is
// returned as the underlying error (wrapping fs.ErrNotExist).
func (b *boundary) resolve(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if !within(b.root, abs) && !within(b.real, abs) {
		return "", fmt.Errorf("%s: %w", b.name(abs), ErrOutsideRepository)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	if !within(b.real, real) {
		return "", fmt.Errorf("%s: a symbolic link leads %w", b.name(abs), ErrOutsideRepository)
	}
	return real, nil
}

// readFile reads the regular file p inside the boundary. Special files are refused
// before they are opened for reading (and opened non-blocking, so a file swapped
// for a pipe in between cannot block either); errors name the file, never its
// content.
func (b *boundary) readFile(p string) ([]byte, error) {
	real, err := b.resolve(p)
	if err != nil {
		return nil, err
	}
	return readRegular(real, b.name(p))
}

// readRegular reads the regular file p (symbolic links already resolved); name is
// how errors call it.
func readRegular(p, name string) ([]byte, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s), refused", name, ErrNotRegular, fileType(fi.Mode()))
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s), refused", name, ErrNotRegular, fileType(fi.Mode()))
	}
	if fi.Size() > maxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes, refused", name, maxFileSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes, refused", name, maxFileSize)
	}
	return data, nil
}

func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	}
	return "a special file"
}
