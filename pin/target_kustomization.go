package pin

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/yamlnode"
)

// kustomizationFields are the keys of an images: entry, in Kustomize's order.
var kustomizationFields = []string{"name", "newName", "newTag", "digest"}

// kustomizationTarget is the images: list of the overlay's kustomization.yaml
// (KustomizationFile; kustomization.yml and Kustomization are not edited). An
// alias's entry is the first whose name is the alias's image, else the first
// whose newName is (an image Kustomize renames to it). Its reference is
// (newName or name):newTag, with @digest when digest is set.
type kustomizationTarget struct{}

func (kustomizationTarget) String() string { return TargetKustomization }
func (kustomizationTarget) File() string   { return KustomizationFile }

// kustomizeImage is one entry of images:.
type kustomizeImage struct {
	index                         int
	node                          *kyaml.Node
	name, newName, newTag, digest string
}

// kustomizationImages reads images: (nil when absent or null).
func kustomizationImages(f *yamlFile) (*kyaml.Node, []kustomizeImage, error) {
	root := f.root()
	if root == nil {
		return nil, nil, nil
	}
	_, seq, err := f.field(root, "", "images")
	if err != nil || yamlnode.IsNull(seq) {
		return nil, nil, err
	}
	accepted := "a mapping with keys " + strings.Join(kustomizationFields, ", ")
	if seq.Kind != kyaml.SequenceNode {
		return nil, nil, fmt.Errorf("%s: is %s (accepted: a list of %s)", f.where("images", seq), yamlnode.Describe(seq), accepted)
	}
	var out []kustomizeImage
	for i, it := range seq.Content {
		path := "images[" + strconv.Itoa(i) + "]"
		if it.Kind != kyaml.MappingNode {
			return nil, nil, fmt.Errorf("%s: is %s (accepted: %s)", f.where(path, it), yamlnode.Describe(it), accepted)
		}
		ki := kustomizeImage{index: i, node: it}
		for _, kv := range []struct {
			key string
			v   *string
		}{{"name", &ki.name}, {"newName", &ki.newName}, {"newTag", &ki.newTag}, {"digest", &ki.digest}} {
			_, v, err := f.field(it, path, kv.key)
			if err != nil {
				return nil, nil, err
			}
			if *kv.v, err = f.scalarValue(path+"."+kv.key, v); err != nil {
				return nil, nil, err
			}
		}
		out = append(out, ki)
	}
	return seq, out, nil
}

// findImage is the entry of image: by name first, else by newName; -1 when none.
func findImage(entries []kustomizeImage, image string) int {
	if i := slices.IndexFunc(entries, func(e kustomizeImage) bool { return e.name == image }); i >= 0 {
		return i
	}
	return slices.IndexFunc(entries, func(e kustomizeImage) bool { return e.newName == image })
}

// Read returns the pins of the aliases whose image has an entry with a newTag.
func (t kustomizationTarget) Read(content []byte, images map[string]string) (map[string]Pin, error) {
	out := map[string]Pin{}
	if content == nil {
		return out, nil
	}
	f, err := parseYAMLFile(KustomizationFile, content)
	if err != nil {
		return nil, err
	}
	_, entries, err := kustomizationImages(f)
	if err != nil {
		return nil, err
	}
	for _, alias := range sortedAliases(images) {
		i := findImage(entries, images[alias])
		if i < 0 {
			continue
		}
		e := entries[i]
		if e.newTag == "" && e.digest == "" {
			continue
		}
		where := f.where("images["+strconv.Itoa(e.index)+"]", e.node)
		if e.newTag == "" {
			return nil, fmt.Errorf("%s: image %s has a digest but no newTag: a pin needs a tag (accepted: newTag, or newTag and digest)", where, images[alias])
		}
		name := e.name
		if e.newName != "" {
			name = e.newName
		}
		ref := name + ":" + e.newTag
		if e.digest != "" {
			ref += "@" + e.digest
		}
		img, err := splitPinReference(ref)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		out[alias] = Pin{Alias: alias, Image: images[alias], Reference: ref, Tag: img.Tag, Digest: img.Digest}
	}
	return out, nil
}

// Apply sets newTag (and digest, or removes it) of each pin's entry, keeping
// name and newName; an image without an entry gets one, appended to images:.
func (t kustomizationTarget) Apply(content []byte, pins []Pin) ([]byte, error) {
	_, refs, err := checkPins(pins)
	if err != nil {
		return nil, err
	}
	if content == nil {
		return nil, fmt.Errorf("the app has no %s (pin-target %s needs a Kustomize overlay with a %s; kustomization.yml and Kustomization are not edited: rename the file)", KustomizationFile, TargetKustomization, KustomizationFile)
	}
	f, err := parseYAMLFile(KustomizationFile, content)
	if err != nil {
		return nil, err
	}
	seq, entries, err := kustomizationImages(f)
	if err != nil {
		return nil, err
	}
	root := f.ensureRoot()
	if seq == nil {
		seq = &kyaml.Node{Kind: kyaml.SequenceNode, Tag: "!!seq"}
		if i := fieldIndex(root, "images"); i >= 0 {
			old := root.Content[i+1]
			seq.HeadComment, seq.LineComment, seq.FootComment = old.HeadComment, old.LineComment, old.FootComment
			root.Content[i+1] = seq
		} else {
			root.Content = append(root.Content, &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!str", Value: "images"}, seq)
		}
		f.markStructural()
	}
	// Entries of images without one are appended in alias order.
	order := slices.Clone(pins)
	slices.SortStableFunc(order, func(a, b Pin) int {
		ai, bi := findImage(entries, a.Image) < 0, findImage(entries, b.Image) < 0
		switch {
		case ai != bi && ai:
			return 1
		case ai != bi:
			return -1
		case ai:
			return strings.Compare(a.Alias, b.Alias)
		}
		return 0
	})
	for _, p := range order {
		i := findImage(entries, p.Image)
		if i < 0 {
			m := newMappingNode()
			m.Content = append(m.Content, &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!str", Value: "name"}, newStringNode(p.Image))
			seq.Content = append(seq.Content, m)
			seq.Style &^= kyaml.FlowStyle
			entries = append(entries, kustomizeImage{index: len(seq.Content) - 1, node: m, name: p.Image})
			f.markStructural()
			i = len(entries) - 1
		}
		e := entries[i]
		path := "images[" + strconv.Itoa(e.index) + "]"
		if err := f.setField(e.node, path, "newTag", p.Tag, kustomizationFields); err != nil {
			return nil, err
		}
		if d := refs[p.Alias].Digest; d != "" {
			err = f.setField(e.node, path, "digest", d, kustomizationFields)
		} else {
			f.removeField(e.node, "digest")
		}
		if err != nil {
			return nil, err
		}
	}
	return f.bytes()
}
