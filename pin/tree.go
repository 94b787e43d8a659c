package pin

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// Reading and writing git trees, read lazily from the attempt's storage: the
// files pins are read from and the commit that sets them, without a work tree.

// readFile reads path at tree: nil when it does not exist; an error when it (or
// a directory on its way) is something else than a regular file (a directory, a
// symbolic link, a submodule).
func readFile(s storer.EncodedObjectStorer, tree *object.Tree, path string) ([]byte, error) {
	parts := strings.Split(path, "/")
	for i, name := range parts {
		e := findEntry(tree, name)
		if e == nil {
			return nil, nil
		}
		last := i == len(parts)-1
		switch {
		case !last && e.Mode == filemode.Dir:
			t, err := object.GetTree(s, e.Hash)
			if err != nil {
				return nil, fmt.Errorf("file %s: %w", path, err)
			}
			tree = t
			continue
		case !last:
			return nil, fmt.Errorf("file %s: %s is not a directory", path, strings.Join(parts[:i+1], "/"))
		case e.Mode == filemode.Dir:
			return nil, fmt.Errorf("file %s: is a directory", path)
		case e.Mode == filemode.Symlink:
			return nil, fmt.Errorf("file %s: is a symbolic link; pins are written to regular files only", path)
		case e.Mode == filemode.Submodule:
			return nil, fmt.Errorf("file %s: is a submodule", path)
		}
		blob, err := object.GetBlob(s, e.Hash)
		if err != nil {
			return nil, fmt.Errorf("file %s: %w", path, err)
		}
		if blob.Size > maxFileSize {
			return nil, fmt.Errorf("file %s: larger than %d bytes", path, maxFileSize)
		}
		r, err := blob.Reader()
		if err != nil {
			return nil, fmt.Errorf("file %s: %w", path, err)
		}
		defer r.Close()
		b, err := io.ReadAll(io.LimitReader(r, maxFileSize+1))
		if err != nil {
			return nil, fmt.Errorf("file %s: %w", path, err)
		}
		if b == nil {
			b = []byte{} // exists, empty: not "missing"
		}
		return b, nil
	}
	return nil, nil
}

func findEntry(t *object.Tree, name string) *object.TreeEntry {
	if t == nil {
		return nil
	}
	for i := range t.Entries {
		if t.Entries[i].Name == name {
			return &t.Entries[i]
		}
	}
	return nil
}

// writeTree stores the tree that is tree (nil: an empty one) with files
// (relative path -> content) written, and the trees on their way, and returns
// its hash. A file keeps its mode (executable stays executable); a new one is a
// regular file.
func writeTree(s storer.EncodedObjectStorer, tree *object.Tree, files map[string][]byte) (plumbing.Hash, error) {
	here := map[string][]byte{}
	below := map[string]map[string][]byte{}
	for p, c := range files {
		dir, rest, ok := strings.Cut(p, "/")
		if !ok {
			here[p] = c
			continue
		}
		if below[dir] == nil {
			below[dir] = map[string][]byte{}
		}
		below[dir][rest] = c
	}
	var entries []object.TreeEntry
	if tree != nil {
		entries = append(entries, tree.Entries...)
	}
	set := func(name string, mode filemode.FileMode, h plumbing.Hash) {
		for i := range entries {
			if entries[i].Name == name {
				entries[i].Mode, entries[i].Hash = mode, h
				return
			}
		}
		entries = append(entries, object.TreeEntry{Name: name, Mode: mode, Hash: h})
	}
	for name, content := range here {
		mode := filemode.Regular
		if e := findEntry(tree, name); e != nil {
			switch e.Mode {
			case filemode.Regular, filemode.Executable:
				mode = e.Mode
			case filemode.Deprecated:
			default:
				return plumbing.ZeroHash, fmt.Errorf("%s: not a regular file (mode %s)", name, e.Mode)
			}
		}
		h, err := writeBlob(s, content)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		set(name, mode, h)
	}
	for name, sub := range below {
		var subtree *object.Tree
		if e := findEntry(tree, name); e != nil {
			if e.Mode != filemode.Dir {
				return plumbing.ZeroHash, fmt.Errorf("%s: not a directory", name)
			}
			t, err := object.GetTree(s, e.Hash)
			if err != nil {
				return plumbing.ZeroHash, fmt.Errorf("%s: %w", name, err)
			}
			subtree = t
		}
		h, err := writeTree(s, subtree, sub)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("%s/%w", name, err)
		}
		set(name, filemode.Dir, h)
	}
	sort.Sort(object.TreeEntrySorter(entries))
	obj := s.NewEncodedObject()
	if err := (&object.Tree{Entries: entries}).Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(obj)
}

func writeBlob(s storer.EncodedObjectStorer, content []byte) (plumbing.Hash, error) {
	obj := s.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(int64(len(content)))
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(content); err != nil {
		w.Close()
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(obj)
}

// fileSet is the files an attempt reads from its base tree and edits: the
// edited content of each file read, and what it was.
type fileSet struct {
	s     storer.EncodedObjectStorer
	tree  *object.Tree
	files map[string][]byte // path -> content after the edits (nil: no file)
	orig  map[string][]byte
	order []string
}

func newFileSet(s storer.EncodedObjectStorer, tree *object.Tree) *fileSet {
	return &fileSet{s: s, tree: tree, files: map[string][]byte{}, orig: map[string][]byte{}}
}

// get returns the file's content as edited so far (nil: it does not exist).
func (fs *fileSet) get(p string) ([]byte, error) {
	if content, seen := fs.files[p]; seen {
		return content, nil
	}
	content, err := readFile(fs.s, fs.tree, p)
	if err != nil {
		return nil, err
	}
	fs.files[p], fs.orig[p] = content, content
	fs.order = append(fs.order, p)
	return content, nil
}

// set records the file's edited content (get first).
func (fs *fileSet) set(p string, content []byte) { fs.files[p] = content }

// changed returns the files whose content the edits changed: path -> content.
func (fs *fileSet) changed() map[string][]byte {
	changed := map[string][]byte{}
	for _, p := range fs.order {
		if fs.files[p] != nil && (fs.orig[p] == nil || !bytes.Equal(fs.files[p], fs.orig[p])) {
			changed[p] = fs.files[p]
		}
	}
	return changed
}
