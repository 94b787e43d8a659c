// Package pin keeps an app's image references in git: the pins (what each image
// alias of an app is pinned to), the targets that hold them in the app's directory
// (the pins file, a Kustomize overlay's images:, a Helm values file), and the git
// writer that commits and pushes them (go-git), never force-pushing and never
// dropping a pin.
//
// pin knows nothing of Argo CD, the daemon or the registries: it is given pins and
// where they go.
package pin

import (
	"fmt"
	"strings"
)

// Pin is the reference one image alias of an app is pinned to.
type Pin struct {
	// Alias is the image's alias in the app's policy.
	Alias string `json:"alias" yaml:"alias"`
	// Image is the repository as the policy wrote it (e.g. ghcr.io/org/web).
	Image string `json:"image" yaml:"image"`
	// Reference is what manifests get: Image:Tag, or Image:Tag@Digest when the
	// policy pins digests.
	Reference string `json:"reference" yaml:"reference"`
	// Tag is the chosen tag; Digest the digest it pointed at when chosen (set
	// even when Reference carries none).
	Tag    string `json:"tag" yaml:"tag"`
	Digest string `json:"digest,omitempty" yaml:"digest,omitempty"`
	// Policy says why this tag was chosen (e.g. "semver ~1.2; platforms
	// linux/amd64"), for the reader of the file and the commit.
	Policy string `json:"policy,omitempty" yaml:"policy,omitempty"`
	// Platforms are the platforms the reference was required to have.
	Platforms []string `json:"platforms,omitempty" yaml:"platforms,omitempty"`
	// Skipped are the better tags passed over and why ("1.4.0: no
	// linux/arm64"), for a pull request's body; never written to a file.
	Skipped []string `json:"-" yaml:"-"`
}

// Target is where an app's pins are kept, in one file of its directory. A
// target's methods are pure: they read and edit the file's bytes, keeping what
// they do not own (comments, order, other keys).
type Target interface {
	// String is the target as the pin-target parameter spells it.
	String() string
	// File is the file the target reads and edits, relative to the app's
	// directory, slash-separated.
	File() string
	// Read returns the pins the file holds, by alias, for the aliases asked
	// (alias -> image as the policy wrote it). A file that does not exist
	// (content nil) holds none; aliases without a pin are absent from the map.
	Read(content []byte, images map[string]string) (map[string]Pin, error)
	// Apply returns content with pins set. Content nil creates the file if the
	// target can (the pins file); others return an error naming the file.
	Apply(content []byte, pins []Pin) ([]byte, error)
}

// PinsFile is the pins target's file, beside the app's other files.
const PinsFile = ".argocd-image-resolver.pins.yaml"

// Target names as the pin-target parameter takes them.
const (
	TargetPins          = "pins"
	TargetKustomization = "kustomization"
	TargetHelmValues    = "helmvalues" // helmvalues:<path>
)

// TargetAccepted describes the accepted pin-target values, for messages.
const TargetAccepted = `pins (the default: ` + PinsFile + ` beside the app), kustomization (the overlay's images:), or helmvalues:<path> (a values file of the app, e.g. helmvalues:values-prod.yaml)`

// Modes (the pin-mode parameter).
const (
	ModeOff   = "off"
	ModeWrite = "write"
	ModeUse   = "use"
)

// Edit is a change of pins in one app's directory, and what it is based on: Base
// maps each alias to the reference the change replaces ("" when the alias had no
// pin). When the writer finds another reference than Base (a person edited the
// pin since), theirs wins: that pin is left as it is, and counted as a conflict.
type Edit struct {
	// App names the app, for commit messages and logs.
	App string
	// Dir is the app's directory in the repository (slash-separated, "" or "."
	// for the root); the target's file is in it.
	Dir    string
	Target Target
	Pins   []Pin
	Base   map[string]string
	// DetectHolds asks the writer to read the branch's history for a person's
	// revert (pin-mode use): a pin whose reference the writer's own last change
	// to the alias set, and that a person has replaced since, is not written
	// again; a held: entry is written into the pins file instead (Hold). A
	// held: entry already in the pins file is honoured either way. Direct
	// pushes only: with PushPullRequest the pull requests closed or merged with
	// a pin are what keeps it from being proposed again.
	DetectHolds bool
}

// File is the repository path of the file the edit changes.
func (e Edit) File() string {
	dir := strings.Trim(e.Dir, "/")
	if dir == "" || dir == "." {
		return e.Target.File()
	}
	return dir + "/" + e.Target.File()
}

// ApplyEdit applies e to the file's content: the pins whose current reference is
// their Base (or that already hold the new reference) are set; the others are
// conflicts, left as they are and returned. content nil means the file does not
// exist.
func ApplyEdit(content []byte, e Edit) (out []byte, applied []Pin, conflicts []Pin, err error) {
	images := map[string]string{}
	for _, p := range e.Pins {
		images[p.Alias] = p.Image
	}
	current, err := e.Target.Read(content, images)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read pins of %s from %s: %w", e.App, e.File(), err)
	}
	for _, p := range e.Pins {
		cur := current[p.Alias].Reference
		switch {
		case cur == p.Reference:
			// already there (a retry after a push that did land, or the same pin)
		case cur == e.Base[p.Alias]:
			applied = append(applied, p)
		default:
			conflicts = append(conflicts, p)
		}
	}
	if len(applied) == 0 {
		return content, nil, conflicts, nil
	}
	out, err = e.Target.Apply(content, applied)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("write pins of %s to %s: %w", e.App, e.File(), err)
	}
	return out, applied, conflicts, nil
}
