package render

import (
	"fmt"

	"sigs.k8s.io/kustomize/kyaml/kio"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/yamlnode"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// imageFields is the one walker of image fields: a kio.Filter, like kustomize's
// image transformer, that follows the fieldSpecs of each object's group and kind
// (the built-in workload kinds, then the operator's extra paths, in their order) and
// collects an ImageUse for every image field found. It changes no object; a use
// points at its field, so SetImage can edit it afterwards.
type imageFields struct {
	specs map[groupKind][]fieldSpec
	uses  []ImageUse
}

var _ kio.Filter = (*imageFields)(nil)

type groupKind struct{ group, kind string }

// newImageFields indexes the built-in workload specs and the extra paths by kind.
func newImageFields(extra []ExtraPath) (*imageFields, error) {
	f := &imageFields{specs: map[groupKind][]fieldSpec{}}
	add := func(s fieldSpec) {
		gk := groupKind{s.group, s.kind}
		f.specs[gk] = append(f.specs[gk], s)
	}
	for _, s := range workloadSpecs() {
		add(s)
	}
	for _, p := range extra {
		s, err := p.spec()
		if err != nil {
			return nil, err
		}
		add(s)
	}
	return f, nil
}

// Filter walks objs in order and appends their image fields to f.uses. objs are
// returned unchanged; the first field that cannot be used stops the walk with an
// *ImageFieldError.
func (f *imageFields) Filter(objs []*kyaml.RNode) ([]*kyaml.RNode, error) {
	for i, obj := range objs {
		if obj == nil || obj.YNode() == nil || deref(obj.YNode()).Kind != kyaml.MappingNode {
			continue
		}
		ref := objectRef(obj)
		specs := f.specs[groupKind{apiGroup(ref.APIVersion), ref.Kind}]
		if len(specs) == 0 {
			continue
		}
		w := objectWalk{f: f, obj: obj, index: i, ref: ref, platforms: map[*kyaml.Node][]resolve.Platform{}}
		for _, s := range specs {
			if err := w.walk(s, deref(obj.YNode()), 0, "", nil); err != nil {
				return nil, err
			}
		}
	}
	return objs, nil
}

// objectWalk is the state of walking one object.
type objectWalk struct {
	f     *imageFields
	obj   *kyaml.RNode
	index int // obj's position in the objects
	ref   ObjectRef
	// platforms caches each pod spec's platforms: the container lists of a pod spec
	// are separate specs, and its scheduling is read once.
	platforms map[*kyaml.Node][]resolve.Platform
}

// walk follows s.path from n, which the first i segments reached at path. plats are
// the platforms of the pod spec passed on the way, if any.
func (w *objectWalk) walk(s fieldSpec, n *kyaml.Node, i int, path string, plats []resolve.Platform) error {
	if n.Kind != kyaml.MappingNode {
		return &ImageFieldError{Object: w.ref, Path: path, Err: fmt.Errorf("is a %s, not a mapping", yamlnode.Noun(n))}
	}
	if s.podSpec > 0 && i == s.podSpec {
		p, ok := w.platforms[n]
		if !ok {
			var err error
			if p, err = podPlatforms(n, w.ref, path); err != nil {
				return err
			}
			w.platforms[n] = p
		}
		plats = p
	}
	seg := s.path[i]
	p := seg.field
	if path != "" {
		p = path + "." + seg.field
	}
	if i == len(s.path)-1 {
		img := fieldNode(n, seg.field)
		if img == nil {
			return nil // no image field; the API server will say so if it needs one
		}
		u, err := imageUse(w.obj, w.ref, p, img)
		if err != nil {
			return err
		}
		u.ObjectIndex = w.index
		if s.podSpec > 0 {
			u.Container = scalarValue(field(n, "name"))
			u.Platforms = plats
		}
		w.f.uses = append(w.f.uses, u)
		return nil
	}
	next := field(n, seg.field)
	if yamlnode.IsNull(next) {
		return nil // nothing there, e.g. a Rollout with a workloadRef instead of a template
	}
	if !seg.each {
		return w.walk(s, next, i+1, p, plats)
	}
	if next.Kind != kyaml.SequenceNode {
		return &ImageFieldError{Object: w.ref, Path: p, Err: fmt.Errorf("is a %s, not a list", yamlnode.Noun(next))}
	}
	for j, it := range next.Content {
		it = deref(it)
		if it.Kind != kyaml.MappingNode {
			if s.podSpec == 0 && yamlnode.IsNull(it) {
				continue // operators' lists may be sparse
			}
			noun := "mapping"
			if s.podSpec > 0 {
				noun = "container"
			}
			return &ImageFieldError{Object: w.ref, Path: fmt.Sprintf("%s[%d]", p, j), Err: fmt.Errorf("is a %s, not a %s", yamlnode.Noun(it), noun)}
		}
		if err := w.walk(s, it, i+1, p+"["+itemKey(it, j)+"]", plats); err != nil {
			return err
		}
	}
	return nil
}
