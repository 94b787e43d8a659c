package pipeline

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// maxPinsFileSize bounds what is read of a pins target (a values file or an overlay
// is a few KiB).
const maxPinsFileSize = 1 << 20

// readPins reads the pins the app's target holds. The file is opened inside the
// app directory only (os.Root: no symlink or .. leaves it); a missing file holds no
// pins.
func readPins(dir string, pol *plugin.AppPolicy) (map[string]pin.Pin, error) {
	images := map[string]string{}
	for _, ip := range pol.Images {
		images[ip.Alias] = ip.Written
	}
	content, err := readAppFile(dir, pol.Pins.Target.File())
	if err != nil {
		return nil, fmt.Errorf("pins (pin-target %s): %w", pol.Pins.Target, err)
	}
	held, err := pol.Pins.Target.Read(content, images)
	if err != nil {
		return nil, fmt.Errorf("pins (pin-target %s): %w", pol.Pins.Target, err)
	}
	return held, nil
}

// readHolds reads the holds of the app's pins file (pin.PinsFile, whatever the
// pin target), opened as readPins opens the target.
func readHolds(dir string) (map[string]pin.Hold, error) {
	content, err := readAppFile(dir, pin.PinsFile)
	if err != nil {
		return nil, fmt.Errorf("holds: %w", err)
	}
	holds, err := pin.ReadHolds(content)
	if err != nil {
		return nil, fmt.Errorf("holds: %w", err)
	}
	return holds, nil
}

// readAppFile reads name inside dir; nil when it does not exist.
func readAppFile(dir, name string) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", name, unwrapPath(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", name, unwrapPath(err))
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("file %s: not a regular file", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxPinsFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", name, unwrapPath(err))
	}
	if len(b) > maxPinsFileSize {
		return nil, fmt.Errorf("file %s: larger than %d bytes", name, maxPinsFileSize)
	}
	return b, nil
}

// unwrapPath drops the absolute path of a random work directory from an error.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// pinnedReference spells a pin's reference with the repository as the manifest
// wrote it: written:tag, and @digest when the pin's reference carries one.
func pinnedReference(written string, p pin.Pin) string {
	ref := written + ":" + p.Tag
	if _, digest, ok := strings.Cut(p.Reference, "@"); ok {
		ref += "@" + digest
	}
	return ref
}

// IsHeld says whether ref is held for alias in the app's pins file.
func (r *Report) IsHeld(alias, ref string) bool {
	h, ok := r.Holds[alias]
	return ok && h.Reference == ref
}

// LivePins are the pins the aliases resolved live in this render would get, in
// alias order, one per alias.
func (r *Report) LivePins() []pin.Pin {
	var out []pin.Pin
	seen := map[string]bool{}
	for _, s := range r.Substitutions {
		res := s.Answer.Result
		if s.FromPin != nil || res == nil || s.Answer.Error != "" || seen[s.Policy.Alias] {
			continue
		}
		seen[s.Policy.Alias] = true
		out = append(out, PinOf(s.Policy.Alias, s.Request, res))
	}
	return out
}

// PinOf is the pin of alias for a resolution.
func PinOf(alias string, req resolve.Request, res *resolve.Result) pin.Pin {
	var skipped []string
	for _, sk := range res.Skipped {
		skipped = append(skipped, sk.Tag+": "+sk.Reason)
	}
	return pin.Pin{Alias: alias, Image: req.Image, Reference: res.ReferenceFor(req.Image), Tag: res.Tag, Digest: res.Digest,
		Policy: Describe(req, res), Platforms: res.Platforms, Skipped: skipped}
}

// PinEdit is the change of pins this render asks for: with pin-mode write, every
// alias resolved live whose pin differs; with use, every alias that had no pin (it
// was resolved live and is pinned now). A reference the pins file holds (Holds) is
// never asked for. dir is the app's path in the repository. ok is false when
// nothing is to be written. With use, the writer is asked to detect a person's
// revert (pin.Edit.DetectHolds).
func (r *Report) PinEdit(app, dir string) (pin.Edit, bool) {
	if r == nil || (r.PinMode != plugin.PinWrite && r.PinMode != plugin.PinUse) {
		return pin.Edit{}, false
	}
	e := pin.Edit{App: app, Dir: dir, Target: r.Pins.Target, Base: map[string]string{}, DetectHolds: r.PinMode == plugin.PinUse}
	for _, p := range r.LivePins() {
		held, has := r.Held[p.Alias]
		if has && (r.PinMode == plugin.PinUse || held.Reference == p.Reference) {
			continue
		}
		if r.IsHeld(p.Alias, p.Reference) {
			continue
		}
		e.Pins = append(e.Pins, p)
		e.Base[p.Alias] = held.Reference
	}
	return e, len(e.Pins) > 0
}
