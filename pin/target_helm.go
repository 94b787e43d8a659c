package pin

import (
	"fmt"
	"slices"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/yamlnode"
)

// defaultHelmTagKey is the tag key of an app with one alias and no keys.
const defaultHelmTagKey = "image.tag"

// helmValuesTarget is a Helm values file of the app (helmvalues:<path>). Each
// alias's image is in the keys its HelmKey names: Spec gets the whole
// reference; else Tag gets the tag (tag@digest when the reference carries a
// digest) and Name, when named, the image.
type helmValuesTarget struct {
	spelled string // helmvalues:<path> as given
	file    string // the path, clean
	keys    HelmKeys
}

func (t helmValuesTarget) String() string { return t.spelled }
func (t helmValuesTarget) File() string   { return t.file }

// helmSlot is where one alias's image is in the values file.
type helmSlot struct {
	spec, tag, name string
}

// slots are the keys of the aliases asked. An alias without keys uses image.tag
// when it is the app's only alias (the aliases asked and those with keys); with
// several it is an error naming the parameters that would name its keys. Two
// aliases may not share a key, nor may one key hold another.
func (t helmValuesTarget) slots(asked []string) (map[string]helmSlot, error) {
	all := map[string]bool{}
	for _, a := range asked {
		all[a] = true
	}
	for a := range t.keys {
		all[a] = true
	}
	out := map[string]helmSlot{}
	type use struct{ key, param string }
	var used []use
	for _, alias := range sortedAliases(all) {
		k := t.keys[alias]
		var s helmSlot
		switch {
		case k.Spec != "":
			s.spec = k.Spec
			used = append(used, use{k.Spec, helmParam(alias, "spec")})
		case k.Tag != "":
			s.tag, s.name = k.Tag, k.Name
			used = append(used, use{k.Tag, helmParam(alias, "tag")})
		case len(all) == 1:
			s.tag, s.name = defaultHelmTagKey, k.Name
			used = append(used, use{defaultHelmTagKey, "the default key (" + alias + " is the only image)"})
		case slices.Contains(asked, alias):
			return nil, fmt.Errorf("file %s: alias %s has no key: with several images, name the keys of each in parameter %s (and %s), or %s",
				t.file, alias, helmParam(alias, "tag"), helmParam(alias, "name"), helmParam(alias, "spec"))
		}
		if s.name != "" {
			used = append(used, use{s.name, helmParam(alias, "name")})
		}
		if slices.Contains(asked, alias) {
			out[alias] = s
		}
	}
	for i, a := range used {
		for _, b := range used[i+1:] {
			if a.key == b.key || strings.HasPrefix(a.key, b.key+".") || strings.HasPrefix(b.key, a.key+".") {
				return nil, fmt.Errorf("file %s: %s (key %s) and %s (key %s) overlap (accepted: a key of its own for each image)", t.file, a.param, a.key, b.param, b.key)
			}
		}
	}
	return out, nil
}

// lookup is the value at a dotted key; nil when a mapping on the way or the key
// is missing or null. A key crossing a value that is not a mapping is an error.
func (t helmValuesTarget) lookup(f *yamlFile, key string) (*kyaml.Node, error) {
	n := f.root()
	parts := strings.Split(key, ".")
	for i, part := range parts {
		if n == nil {
			return nil, nil
		}
		if n.Kind != kyaml.MappingNode {
			return nil, t.crosses(f, key, parts[:i], n)
		}
		_, v, err := f.field(n, strings.Join(parts[:i], "."), part)
		if err != nil {
			return nil, err
		}
		if yamlnode.IsNull(v) {
			return nil, nil
		}
		n = v
	}
	return n, nil
}

func (t helmValuesTarget) crosses(f *yamlFile, key string, at []string, n *kyaml.Node) error {
	return fmt.Errorf("%s: %s is %s, not a mapping (accepted: a key whose every part but the last is a mapping)", f.where(key, n), strings.Join(at, "."), yamlnode.Describe(n))
}

// str is the string at key; "" when missing or null.
func (t helmValuesTarget) str(f *yamlFile, key string) (string, *kyaml.Node, error) {
	v, err := t.lookup(f, key)
	if err != nil || v == nil {
		return "", v, err
	}
	s, err := f.scalarValue(key, v)
	return s, v, err
}

// Read returns the pins the values file holds: a reference at the spec key, or
// a tag (tag@digest) at the tag key with the image at the name key (the
// policy's image when there is none). A missing or empty key holds no pin.
func (t helmValuesTarget) Read(content []byte, images map[string]string) (map[string]Pin, error) {
	out := map[string]Pin{}
	slots, err := t.slots(sortedAliases(images))
	if err != nil {
		return nil, err
	}
	if content == nil {
		return out, nil
	}
	f, err := parseYAMLFile(t.file, content)
	if err != nil {
		return nil, err
	}
	for _, alias := range sortedAliases(images) {
		s := slots[alias]
		var ref string
		var at *kyaml.Node
		key := s.spec
		if s.spec != "" {
			if ref, at, err = t.str(f, s.spec); err != nil {
				return nil, err
			}
			if ref == "" {
				continue
			}
		} else {
			key = s.tag
			tag, tn, err := t.str(f, s.tag)
			if err != nil {
				return nil, err
			}
			if tag == "" {
				continue
			}
			at = tn
			image := images[alias]
			if s.name != "" {
				name, _, err := t.str(f, s.name)
				if err != nil {
					return nil, err
				}
				if name != "" {
					image = name
				}
			}
			ref = image + ":" + tag
		}
		img, err := splitPinReference(ref)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.where(key, at), err)
		}
		out[alias] = Pin{Alias: alias, Image: images[alias], Reference: ref, Tag: img.Tag, Digest: img.Digest}
	}
	return out, nil
}

// Apply writes each pin at its alias's keys, creating the mappings on the way.
func (t helmValuesTarget) Apply(content []byte, pins []Pin) ([]byte, error) {
	_, refs, err := checkPins(pins)
	if err != nil {
		return nil, err
	}
	var aliases []string
	for _, p := range pins {
		aliases = append(aliases, p.Alias)
	}
	slots, err := t.slots(aliases)
	if err != nil {
		return nil, err
	}
	if content == nil {
		return nil, fmt.Errorf("file %s does not exist (pin-target %s edits a values file of the app: create it)", t.file, t.spelled)
	}
	f, err := parseYAMLFile(t.file, content)
	if err != nil {
		return nil, err
	}
	for _, p := range pins {
		s := slots[p.Alias]
		if s.spec != "" {
			if err := t.set(f, s.spec, p.Reference); err != nil {
				return nil, err
			}
			continue
		}
		tag := p.Tag
		if d := refs[p.Alias].Digest; d != "" {
			tag += "@" + d
		}
		if err := t.set(f, s.tag, tag); err != nil {
			return nil, err
		}
		if s.name != "" {
			if err := t.set(f, s.name, p.Image); err != nil {
				return nil, err
			}
		}
	}
	return f.bytes()
}

// set writes value at the dotted key, creating missing (or null) mappings on
// the way; the last of them gets the key after its other keys.
func (t helmValuesTarget) set(f *yamlFile, key, value string) error {
	n := f.ensureRoot()
	parts := strings.Split(key, ".")
	for i, part := range parts {
		path := strings.Join(parts[:i], ".")
		last := i == len(parts)-1
		k, v, err := f.field(n, path, part)
		if err != nil {
			return err
		}
		switch {
		case k == nil && last:
			return f.setField(n, path, part, value, nil)
		case last && (v.Kind == kyaml.ScalarNode):
			return f.setScalar(key, v, value)
		case last:
			return fmt.Errorf("%s: is %s (accepted: a string)", f.where(key, v), yamlnode.Describe(v))
		case k == nil:
			v = newMappingNode()
			n.Content = append(n.Content, &kyaml.Node{Kind: kyaml.ScalarNode, Tag: "!!str", Value: part}, v)
			f.markStructural()
		case yamlnode.IsNull(v):
			*v = kyaml.Node{Kind: kyaml.MappingNode, Tag: "!!map", HeadComment: v.HeadComment, LineComment: v.LineComment, FootComment: v.FootComment}
			f.markStructural()
		case v.Kind != kyaml.MappingNode:
			return t.crosses(f, key, parts[:i+1], v)
		}
		n = v
	}
	return nil
}
