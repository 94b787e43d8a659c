package pin

import (
	"fmt"
	"slices"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/yamlnode"
)

// Hold is a reference a person rolled back in git: the writer does not pin it
// again for its alias. Holds are kept in the app's pins file (PinsFile), under
// held:, whatever the app's pin target:
//
//	held:
//	  web:
//	    reference: ghcr.io/org/web:1.3.0@sha256:...
//	    commit: 0123456789abcdef0123456789abcdef01234567
//	    reason: a person replaced it in git (commit 0123456789ab)
//
// Deleting the entry (by a person) lifts the hold; a newer reference than the
// held one is pinned as usual, and the writer removes the entry in that commit.
type Hold struct {
	// Alias is the image's alias in the app's policy.
	Alias string `json:"alias" yaml:"alias"`
	// Reference is the reference held: it is not pinned again.
	Reference string `json:"reference" yaml:"reference"`
	// Commit is the commit that replaced the reference (for the reader; may
	// be empty).
	Commit string `json:"commit,omitempty" yaml:"commit,omitempty"`
	// Reason says why, for the reader.
	Reason string `json:"reason,omitempty" yaml:"reason,omitempty"`
}

// heldFields are the keys of a held entry, in the order they are written.
var heldFields = []string{"reference", "commit", "reason"}

// heldComment heads the held: key when the writer creates it.
const heldComment = `Image references a person rolled back in git: the resolver does not pin them
again. Delete an entry to lift its hold; a newer reference lifts it by itself.`

// checkHeldValue checks a value of a held entry: a string; the reference one
// of an image with a tag.
func checkHeldValue(f *yamlFile, path string, val *kyaml.Node) error {
	if err := checkString(f, path, val); err != nil {
		return err
	}
	if strings.HasSuffix(path, ".reference") {
		if _, err := splitPinReference(val.Value); err != nil {
			return fmt.Errorf("%s: %w", f.where(path, val), err)
		}
	}
	return nil
}

// ReadHolds returns the holds of a pins file (PinsFile), by alias. The file is
// read as strictly as its pins: an unknown key, a value of the wrong kind, or a
// held entry without a reference (image:tag or image:tag@digest) is an error
// naming the file, the line and the key. content nil (no file) holds none.
func ReadHolds(content []byte) (map[string]Hold, error) {
	out := map[string]Hold{}
	if content == nil {
		return out, nil
	}
	d, err := parsePinsDoc(content)
	if err != nil {
		return nil, err
	}
	for alias, e := range d.held {
		out[alias] = Hold{Alias: alias, Reference: e.str("reference"), Commit: e.str("commit"), Reason: e.str("reason")}
	}
	return out, nil
}

// ApplyHolds returns the pins file content with the holds set (an alias's entry
// replaced, new aliases appended in alias order) and the holds of the aliases
// in lift removed; a held: left empty is removed. Comments, pins and the order
// of the other entries are kept. content nil (no file) creates the file when
// there is a hold to set; with nothing to set it stays nil.
func ApplyHolds(content []byte, set []Hold, lift []string) ([]byte, error) {
	bySet, err := checkHolds(set)
	if err != nil {
		return nil, err
	}
	if content == nil && len(set) == 0 {
		return nil, nil
	}
	if content == nil {
		content = []byte{}
	}
	d, err := parsePinsDoc(content)
	if err != nil {
		return nil, err
	}
	f := d.f
	root := f.ensureRoot()
	heldNode, err := f.heldNode(root, len(set) > 0)
	if err != nil || heldNode == nil {
		return content, err
	}
	for _, alias := range lift {
		if _, setting := bySet[alias]; !setting && d.held[alias] != nil {
			f.removeField(heldNode, alias)
		}
	}
	var added []string
	for _, h := range set {
		if e := d.held[h.Alias]; e != nil {
			if err := f.setHeldEntry(e.node, "held."+h.Alias, h); err != nil {
				return nil, err
			}
			continue
		}
		added = append(added, h.Alias)
	}
	slices.Sort(added)
	if len(added) > 0 {
		heldNode.Style &^= kyaml.FlowStyle
	}
	for _, alias := range added {
		m := newMappingNode()
		if err := f.setHeldEntry(m, "held."+alias, bySet[alias]); err != nil {
			return nil, err
		}
		heldNode.Content = append(heldNode.Content, &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!str", Value: alias}, m)
		f.markStructural()
	}
	if len(heldNode.Content) == 0 {
		f.removeField(root, "held")
	}
	return f.bytes()
}

// checkHolds checks the holds given to ApplyHolds: one per alias, each with a
// reference of an image and tag. It returns them by alias.
func checkHolds(set []Hold) (map[string]Hold, error) {
	out := map[string]Hold{}
	for _, h := range set {
		if h.Alias == "" {
			return nil, fmt.Errorf("a hold of %q has no alias", h.Reference)
		}
		if _, dup := out[h.Alias]; dup {
			return nil, fmt.Errorf("alias %s is held twice", h.Alias)
		}
		if _, err := splitPinReference(h.Reference); err != nil {
			return nil, fmt.Errorf("hold of alias %s: %w", h.Alias, err)
		}
		out[h.Alias] = h
	}
	return out, nil
}

// heldNode returns the held: mapping of root, creating it (with a comment for
// the reader) when create is set; nil when absent and not created.
func (f *yamlFile) heldNode(root *kyaml.Node, create bool) (*kyaml.Node, error) {
	_, n, err := f.field(root, "", "held")
	switch {
	case err != nil:
		return nil, err
	case n == nil && !create:
		return nil, nil
	case n == nil:
		n = newMappingNode()
		key := &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!str", Value: "held", HeadComment: heldComment}
		root.Content = append(root.Content, key, n)
		f.markStructural()
	case yamlnode.IsNull(n):
		*n = kyaml.Node{Kind: kyaml.MappingNode, Tag: "!!map", HeadComment: n.HeadComment, LineComment: n.LineComment, FootComment: n.FootComment}
		f.markStructural()
	}
	return n, nil
}

// setHeldEntry writes h into the entry mapping m.
func (f *yamlFile) setHeldEntry(m *kyaml.Node, path string, h Hold) error {
	for _, kv := range [][2]string{{"reference", h.Reference}, {"commit", h.Commit}, {"reason", h.Reason}} {
		if kv[1] == "" {
			f.removeField(m, kv[0])
			continue
		}
		if err := f.setField(m, path, kv[0], kv[1], heldFields); err != nil {
			return err
		}
	}
	return nil
}
