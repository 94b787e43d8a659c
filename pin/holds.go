package pin

import (
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// Holds: a reference a person rolled back in git is not pinned again, by any
// writer, after any restart. The memory is git itself: at write time the writer
// reads the branch's recent history (stateless: every replica reads the same),
// and when the last change its own author made to an alias's reference set the
// very reference it is about to write, and a later commit replaced it, the pin
// is not written; a held: entry is written into the app's pins file instead
// (target_holds.go), where every render, preview and replica sees it and a
// person lifts it by deleting it.

// DefaultHoldHistory is how many commits of the branch the writer reads for a
// person's revert (WithHoldHistory).
const DefaultHoldHistory = 50

// history is the branch's recent commits as one attempt fetched them, newest
// first by committer time, with what was read of them cached.
type history struct {
	s      storer.EncodedObjectStorer
	tip    plumbing.Hash
	limit  int
	author string // the writer's author email: its own commits

	walked  bool
	commits []*object.Commit
	trees   map[plumbing.Hash]*object.Tree
	blobs   map[plumbing.Hash][]byte
}

// newHistory returns the history of tip, limit commits deep; nil (no history
// read) when limit is 0 or tip is zero.
func newHistory(s storer.EncodedObjectStorer, tip plumbing.Hash, limit int, author string) *history {
	if limit <= 0 || tip.IsZero() {
		return nil
	}
	return &history{s: s, tip: tip, limit: limit, author: author,
		trees: map[plumbing.Hash]*object.Tree{}, blobs: map[plumbing.Hash][]byte{}}
}

// list returns the commits, newest first by committer time (merged branches
// interleaved as git log shows them), at most limit. Commits beyond what was
// fetched (a shallow history's boundary) are not listed.
func (h *history) list() []*object.Commit {
	if h.walked {
		return h.commits
	}
	h.walked = true
	seen := map[plumbing.Hash]bool{h.tip: true}
	var queue []*object.Commit
	if c, err := object.GetCommit(h.s, h.tip); err == nil {
		queue = append(queue, c)
	}
	for len(queue) > 0 && len(h.commits) < h.limit {
		next := 0
		for i, c := range queue {
			if c.Committer.When.After(queue[next].Committer.When) {
				next = i
			}
		}
		c := queue[next]
		queue = append(queue[:next], queue[next+1:]...)
		h.commits = append(h.commits, c)
		for _, p := range c.ParentHashes {
			if seen[p] {
				continue
			}
			seen[p] = true
			if pc, err := object.GetCommit(h.s, p); err == nil {
				queue = append(queue, pc)
			}
		}
	}
	return h.commits
}

// parentTree is the tree c's change is read against: its first parent's; the
// zero hash for a root commit; ok false when the parent was not fetched.
func (h *history) parentTree(c *object.Commit) (plumbing.Hash, bool) {
	if len(c.ParentHashes) == 0 {
		return plumbing.ZeroHash, true
	}
	p, err := object.GetCommit(h.s, c.ParentHashes[0])
	if err != nil {
		return plumbing.ZeroHash, false
	}
	return p.TreeHash, true
}

// blobAt is the blob of the file p in the tree (zero: no such regular file).
func (h *history) blobAt(tree plumbing.Hash, p string) plumbing.Hash {
	parts := strings.Split(p, "/")
	for i, name := range parts {
		if tree.IsZero() {
			return plumbing.ZeroHash
		}
		t := h.trees[tree]
		if t == nil {
			var err error
			if t, err = object.GetTree(h.s, tree); err != nil {
				return plumbing.ZeroHash
			}
			h.trees[tree] = t
		}
		e := findEntry(t, name)
		switch {
		case e == nil:
			return plumbing.ZeroHash
		case i < len(parts)-1 && e.Mode == filemode.Dir:
			tree = e.Hash
		case i == len(parts)-1 && e.Mode.IsFile() && e.Mode != filemode.Symlink:
			return e.Hash
		default:
			return plumbing.ZeroHash
		}
	}
	return plumbing.ZeroHash
}

// content is a blob's bytes (nil for the zero hash: no file); ok false when it
// cannot be read or is too large.
func (h *history) content(blob plumbing.Hash) ([]byte, bool) {
	if blob.IsZero() {
		return nil, true
	}
	if b, ok := h.blobs[blob]; ok {
		return b, b != nil
	}
	h.blobs[blob] = nil
	obj, err := object.GetBlob(h.s, blob)
	if err != nil || obj.Size > maxFileSize {
		return nil, false
	}
	r, err := obj.Reader()
	if err != nil {
		return nil, false
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxFileSize))
	if err != nil {
		return nil, false
	}
	if b == nil {
		b = []byte{}
	}
	h.blobs[blob] = b
	return b, true
}

// refAt is the reference a version of e's file holds for alias (of image);
// ok false when that version cannot be read.
func (h *history) refAt(blob plumbing.Hash, t Target, alias, image string) (string, bool) {
	b, ok := h.content(blob)
	if !ok {
		return "", false
	}
	pins, err := t.Read(b, map[string]string{alias: image})
	if err != nil {
		return "", false
	}
	return pins[alias].Reference, true
}

// heldAt says whether a version of the pins file holds alias; ok false when it
// cannot be read.
func (h *history) heldAt(blob plumbing.Hash, alias string) (held, ok bool) {
	b, ok := h.content(blob)
	if !ok {
		return false, false
	}
	holds, err := ReadHolds(b)
	if err != nil {
		return false, false
	}
	_, held = holds[alias]
	return held, true
}

// heldBy reads the history for p, a pin of e that the file now replaces (the
// file holds another reference, its Base). The first relevant commit, newest
// first, decides: one that added or removed held.<alias> in the pins file
// (pinsPath): not held (a person lifted or set a hold: the file says which);
// one by the writer's own author that changed the alias's reference: held when
// it set p.Reference (a person has replaced ours since), else not. Other
// commits (a person's) are passed over, the most recent before ours being the
// one named as replacing it. A commit whose versions cannot be read, or whose
// parent was not fetched, is passed over.
func (h *history) heldBy(e Edit, p Pin, pinsPath string) (Hold, bool) {
	file := e.File()
	var replacer *object.Commit
	for _, c := range h.list() {
		parent, ok := h.parentTree(c)
		if !ok {
			continue
		}
		pinsBefore, pinsAfter := h.blobAt(parent, pinsPath), h.blobAt(c.TreeHash, pinsPath)
		if pinsBefore != pinsAfter {
			before, ok1 := h.heldAt(pinsBefore, p.Alias)
			after, ok2 := h.heldAt(pinsAfter, p.Alias)
			if ok1 && ok2 && before != after {
				return Hold{}, false
			}
		}
		before, after := pinsBefore, pinsAfter
		if file != pinsPath {
			before, after = h.blobAt(parent, file), h.blobAt(c.TreeHash, file)
		}
		if before == after {
			continue
		}
		old, ok1 := h.refAt(before, e.Target, p.Alias, p.Image)
		now, ok2 := h.refAt(after, e.Target, p.Alias, p.Image)
		if !ok1 || !ok2 || old == now {
			continue
		}
		if !strings.EqualFold(c.Author.Email, h.author) {
			replacer = c
			continue
		}
		if now != p.Reference {
			return Hold{}, false
		}
		return replacedHold(p, replacer), true
	}
	return Hold{}, false
}

// replacedHold is the hold of p's reference, replaced by the commit replacer
// (nil when unknown).
func replacedHold(p Pin, replacer *object.Commit) Hold {
	h := Hold{Alias: p.Alias, Reference: p.Reference, Reason: "a person replaced it in git"}
	if replacer != nil {
		h.Commit = replacer.Hash.String()
		h.Reason = fmt.Sprintf("a person replaced it in git (commit %s)", short(replacer.Hash))
	}
	return h
}

// pinsFileOf is the repository path of the pins file beside e's target file:
// where e's holds are kept.
func pinsFileOf(e Edit) string {
	dir := strings.Trim(e.Dir, "/")
	if dir == "" || dir == "." {
		return PinsFile
	}
	return path.Join(dir, PinsFile)
}

// heldPin is a pin an attempt did not apply because its reference is held, or
// a hold it lifted.
type heldPin struct {
	App, File string // File: the pins file
	Hold      Hold
	New       bool // written by this attempt (detected from the history)
}

// holdPlan is what holds do to one edit of an attempt.
type holdPlan struct {
	edit     Edit   // the edit without its held pins
	pinsPath string // the pins file beside the edit's target file
	present  map[string]Hold
	held     []heldPin // pins of the edit not applied: held
	set      []Hold    // holds to write (detected now)
}

// planHolds decides which pins of e (whose file holds content) are held: those
// whose reference a held: entry of the pins file names, and, when e asks for
// detection and the attempt reads history, those a person replaced in git
// (history.heldBy) among the pins ApplyEdit would apply over another reference.
func planHolds(fs *fileSet, hist *history, e Edit, content []byte) (*holdPlan, error) {
	pl := &holdPlan{edit: e, pinsPath: pinsFileOf(e)}
	pinsContent, err := fs.get(pl.pinsPath)
	if err != nil {
		return nil, fmt.Errorf("app %s: %w", e.App, err)
	}
	if pl.present, err = ReadHolds(pinsContent); err != nil {
		return nil, fmt.Errorf("app %s: holds in %s: %w", e.App, pl.pinsPath, err)
	}
	var current map[string]string
	pl.edit.Pins = nil
	for _, p := range e.Pins {
		if h, ok := pl.present[p.Alias]; ok && h.Reference == p.Reference {
			pl.held = append(pl.held, heldPin{App: e.App, File: pl.pinsPath, Hold: h})
			continue
		}
		if e.DetectHolds && hist != nil {
			if current == nil {
				current = currentRefs(content, e)
			}
			cur := current[p.Alias]
			if cur != "" && cur != p.Reference && cur == e.Base[p.Alias] {
				if h, ok := hist.heldBy(e, p, pl.pinsPath); ok {
					pl.held = append(pl.held, heldPin{App: e.App, File: pl.pinsPath, Hold: h, New: true})
					pl.set = append(pl.set, h)
					continue
				}
			}
		}
		pl.edit.Pins = append(pl.edit.Pins, p)
	}
	return pl, nil
}

// write writes the plan's new holds into the pins file, and lifts the holds of
// the aliases that got another pin (applied), noting both in out.
func (pl *holdPlan) write(fs *fileSet, applied []Pin, out *attempt) error {
	var lift []string
	for _, a := range applied {
		if h, ok := pl.present[a.Alias]; ok {
			lift = append(lift, a.Alias)
			out.lifted = append(out.lifted, heldPin{App: pl.edit.App, File: pl.pinsPath, Hold: h})
		}
	}
	out.held = append(out.held, pl.held...)
	if len(pl.set)+len(lift) == 0 {
		return nil
	}
	content, err := fs.get(pl.pinsPath)
	if err != nil {
		return fmt.Errorf("app %s: %w", pl.edit.App, err)
	}
	edited, err := ApplyHolds(content, pl.set, lift)
	if err != nil {
		return fmt.Errorf("app %s: holds in %s: %w", pl.edit.App, pl.pinsPath, err)
	}
	fs.set(pl.pinsPath, edited)
	return nil
}

// depth is how deep an attempt fetches the branch: one commit, or, when an
// edit asks for holds to be detected, the history read and the parent of its
// oldest commit (whose change is read against it).
func (t *target) depth() int {
	if t.holdHistory > 0 {
		for _, e := range t.edits {
			if e.DetectHolds {
				return t.holdHistory + 1
			}
		}
	}
	return 1
}

// apps lists the apps of what an attempt committed: pins applied, holds
// written or lifted, in that order (with repeats).
func (a *attempt) apps() []string {
	var out []string
	for _, p := range a.applied {
		out = append(out, p.App)
	}
	for _, h := range a.held {
		if h.New {
			out = append(out, h.App)
		}
	}
	for _, h := range a.lifted {
		out = append(out, h.App)
	}
	return out
}

// noteHolds adds an attempt's held pins to res, counts and logs them, and logs
// the holds lifted.
func (w *Writer) noteHolds(rem *remote, res *Result, a *attempt) {
	for _, h := range a.held {
		res.Held = append(res.Held, h.Hold)
		w.metrics.holds.Inc()
		msg := "pin held: its reference is held in the pins file; not pinned"
		if h.New {
			msg = "pin held: a person replaced this reference in git; a hold is written, and it is not pinned again"
		}
		w.log.Info(msg, "repository", rem.shown, "branch", a.branch, "app", h.App, "file", h.File, "alias", h.Hold.Alias,
			"reference", h.Hold.Reference, "commit", h.Hold.Commit)
	}
	for _, h := range a.lifted {
		w.log.Info("hold lifted: another reference is pinned", "repository", rem.shown, "branch", a.branch, "app", h.App,
			"file", h.File, "alias", h.Hold.Alias, "reference", h.Hold.Reference)
	}
}
