package render

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// ObjectRef names a rendered object.
type ObjectRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

// String is "Kind/name" or "Kind/namespace/name" with the API group, e.g.
// "Deployment.apps/shop/web".
func (r ObjectRef) String() string {
	k := r.Kind
	if g := apiGroup(r.APIVersion); g != "" {
		k += "." + g
	}
	if r.Namespace != "" {
		return k + "/" + r.Namespace + "/" + r.Name
	}
	return k + "/" + r.Name
}

// ImageUse is one image field of a rendered object.
type ImageUse struct {
	Object ObjectRef
	// Path is the field, e.g. spec.template.spec.containers[web].image (containers by
	// name, or by index when they have none).
	Path string
	// Container is the container's name; empty for extra paths.
	Container string
	// Image is the parsed reference; Raw the field's value as rendered.
	Image resolve.Image
	Raw   string
	// Platforms are those the workload's pod may be scheduled on, derived from its
	// nodeSelector and required node affinity; nil when they do not pin the
	// architecture (or for extra paths).
	Platforms []resolve.Platform

	node *kyaml.Node  // the image scalar
	obj  *kyaml.RNode // the object holding it
}

// ObjectNode returns the object that holds the image field, for Annotate.
func (u ImageUse) ObjectNode() *kyaml.RNode { return u.obj }

// ExtraPath declares an image field of a custom resource. Group is the API group
// ("" for the core group), Kind the kind, and Path a dotted field path where a
// segment ending in "[]" walks every item of a list, e.g. "spec.image" or
// "spec.containers[].image".
type ExtraPath struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
	Path  string `json:"path"`
}

// Validate checks the path syntax.
func (p ExtraPath) Validate() error {
	_, err := p.segments()
	return err
}

type pathSegment struct {
	field string
	each  bool
}

func (p ExtraPath) segments() ([]pathSegment, error) {
	const accepted = "dotted field names, \"[]\" after a list field, e.g. spec.containers[].image"
	if p.Kind == "" {
		return nil, &resolve.InputError{Field: "extra path kind", Value: p.Kind, Accepted: "a resource kind such as MyApp"}
	}
	if strings.TrimSpace(p.Path) == "" {
		return nil, &resolve.InputError{Field: "extra path", Value: p.Path, Accepted: accepted}
	}
	var segs []pathSegment
	for _, s := range strings.Split(p.Path, ".") {
		seg := pathSegment{field: s}
		if f, ok := strings.CutSuffix(s, "[]"); ok {
			seg = pathSegment{field: f, each: true}
		}
		if seg.field == "" || strings.ContainsAny(seg.field, "[] \t") {
			return nil, &resolve.InputError{Field: "extra path", Value: p.Path, Accepted: accepted}
		}
		segs = append(segs, seg)
	}
	if segs[len(segs)-1].each {
		return nil, &resolve.InputError{Field: "extra path", Value: p.Path, Accepted: accepted + " (the last segment names the image field)",
			Err: errors.New("the path ends in a list")}
	}
	return segs, nil
}

// podSpecPath returns where a workload kind keeps its pod spec, or nil.
func podSpecPath(group, kind string) []string {
	switch group {
	case "":
		switch kind {
		case "Pod":
			return []string{"spec"}
		case "ReplicationController":
			return []string{"spec", "template", "spec"}
		case "PodTemplate":
			return []string{"template", "spec"}
		}
	case "apps", "extensions":
		switch kind {
		case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet":
			return []string{"spec", "template", "spec"}
		}
	case "batch":
		switch kind {
		case "Job":
			return []string{"spec", "template", "spec"}
		case "CronJob":
			return []string{"spec", "jobTemplate", "spec", "template", "spec"}
		}
	case "argoproj.io":
		if kind == "Rollout" {
			return []string{"spec", "template", "spec"}
		}
	}
	return nil
}

var containerFields = []string{"containers", "initContainers", "ephemeralContainers"}

// ImageFieldError reports an image field that cannot be used.
type ImageFieldError struct {
	Object ObjectRef
	Path   string
	Value  string
	Err    error
}

func (e *ImageFieldError) Error() string {
	return fmt.Sprintf("%s: %s: %v", e.Object, e.Path, e.Err)
}

func (e *ImageFieldError) Unwrap() error { return e.Err }

// FindImages returns the image fields of every pod template in objs (containers,
// initContainers and ephemeralContainers of Pod, Deployment, StatefulSet, DaemonSet,
// ReplicaSet, Job, CronJob, ReplicationController, PodTemplate and Argo Rollouts'
// Rollout), then those at the extra paths, in object order. An image field that is
// not a string or not an image reference is an error.
func FindImages(objs []*kyaml.RNode, extra ...ExtraPath) ([]ImageUse, error) {
	segs := make([][]pathSegment, len(extra))
	for i, p := range extra {
		s, err := p.segments()
		if err != nil {
			return nil, err
		}
		segs[i] = s
	}
	var out []ImageUse
	for _, obj := range objs {
		if obj == nil || obj.YNode() == nil || deref(obj.YNode()).Kind != kyaml.MappingNode {
			continue
		}
		ref := objectRef(obj)
		group := apiGroup(ref.APIVersion)
		if p := podSpecPath(group, ref.Kind); p != nil {
			uses, err := podImages(obj, ref, p)
			if err != nil {
				return nil, err
			}
			out = append(out, uses...)
		}
		for i, ep := range extra {
			if ep.Group != group || ep.Kind != ref.Kind {
				continue
			}
			uses, err := extraImages(obj, ref, segs[i])
			if err != nil {
				return nil, err
			}
			out = append(out, uses...)
		}
	}
	return out, nil
}

func objectRef(obj *kyaml.RNode) ObjectRef {
	n := deref(obj.YNode())
	ref := ObjectRef{
		APIVersion: scalarValue(field(n, "apiVersion")),
		Kind:       scalarValue(field(n, "kind")),
	}
	md := field(n, "metadata")
	ref.Name = scalarValue(field(md, "name"))
	ref.Namespace = scalarValue(field(md, "namespace"))
	return ref
}

func apiGroup(apiVersion string) string {
	g, _, ok := strings.Cut(apiVersion, "/")
	if !ok {
		return ""
	}
	return g
}

func podImages(obj *kyaml.RNode, ref ObjectRef, specPath []string) ([]ImageUse, error) {
	n := deref(obj.YNode())
	for i, f := range specPath {
		n = field(n, f)
		if isNull(n) {
			return nil, nil // no pod template (e.g. a Rollout with workloadRef)
		}
		if n.Kind != kyaml.MappingNode {
			return nil, &ImageFieldError{Object: ref, Path: strings.Join(specPath[:i+1], "."),
				Err: fmt.Errorf("is a %s, not a mapping", nodeKindName(n))}
		}
	}
	prefix := strings.Join(specPath, ".")
	platforms, err := podPlatforms(n, ref, prefix)
	if err != nil {
		return nil, err
	}
	var out []ImageUse
	for _, cf := range containerFields {
		list := field(n, cf)
		if isNull(list) {
			continue
		}
		lp := prefix + "." + cf
		if list.Kind != kyaml.SequenceNode {
			return nil, &ImageFieldError{Object: ref, Path: lp, Err: fmt.Errorf("is a %s, not a list", nodeKindName(list))}
		}
		for i, c := range list.Content {
			c = deref(c)
			if c.Kind != kyaml.MappingNode {
				return nil, &ImageFieldError{Object: ref, Path: fmt.Sprintf("%s[%d]", lp, i),
					Err: fmt.Errorf("is a %s, not a container", nodeKindName(c))}
			}
			name := scalarValue(field(c, "name"))
			img := fieldNode(c, "image")
			if img == nil {
				continue // no image field; the API server will say so
			}
			path := lp + "[" + itemKey(c, i) + "].image"
			u, err := imageUse(obj, ref, path, img)
			if err != nil {
				return nil, err
			}
			u.Container = name
			u.Platforms = platforms
			out = append(out, u)
		}
	}
	return out, nil
}

func extraImages(obj *kyaml.RNode, ref ObjectRef, segs []pathSegment) ([]ImageUse, error) {
	var out []ImageUse
	var walk func(n *kyaml.Node, i int, path string) error
	walk = func(n *kyaml.Node, i int, path string) error {
		seg := segs[i]
		p := seg.field
		if path != "" {
			p = path + "." + seg.field
		}
		if n.Kind != kyaml.MappingNode {
			return &ImageFieldError{Object: ref, Path: path, Err: fmt.Errorf("is a %s, not a mapping", nodeKindName(n))}
		}
		if i == len(segs)-1 {
			img := fieldNode(n, seg.field)
			if img == nil {
				return nil
			}
			u, err := imageUse(obj, ref, p, img)
			if err != nil {
				return err
			}
			out = append(out, u)
			return nil
		}
		next := field(n, seg.field)
		if isNull(next) {
			return nil
		}
		if !seg.each {
			return walk(next, i+1, p)
		}
		if next.Kind != kyaml.SequenceNode {
			return &ImageFieldError{Object: ref, Path: p, Err: fmt.Errorf("is a %s, not a list", nodeKindName(next))}
		}
		for j, it := range next.Content {
			it = deref(it)
			if isNull(it) {
				continue
			}
			if err := walk(it, i+1, p+"["+itemKey(it, j)+"]"); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(deref(obj.YNode()), 0, ""); err != nil {
		return nil, err
	}
	return out, nil
}

// imageUse checks and parses one image field.
func imageUse(obj *kyaml.RNode, ref ObjectRef, path string, n *kyaml.Node) (ImageUse, error) {
	v := deref(n)
	if v.Kind != kyaml.ScalarNode || v.ShortTag() != "!!str" {
		var what, val string
		switch {
		case isNull(v):
			what = "null"
		case v.Kind == kyaml.ScalarNode:
			val = v.Value
			what = fmt.Sprintf("a %s (%s)", nodeKindName(v), val)
		default:
			what = "a " + nodeKindName(v)
		}
		return ImageUse{}, &ImageFieldError{Object: ref, Path: path, Value: val,
			Err: fmt.Errorf("the image is %s, not a string", what)}
	}
	img, err := resolve.ParseImage(v.Value)
	if err != nil {
		return ImageUse{}, &ImageFieldError{Object: ref, Path: path, Value: v.Value, Err: err}
	}
	return ImageUse{Object: ref, Path: path, Image: img, Raw: v.Value, node: n, obj: obj}, nil
}

// itemKey names a list item by its name field, else by its index.
func itemKey(n *kyaml.Node, i int) string {
	if name := scalarValue(field(n, "name")); name != "" {
		return name
	}
	return strconv.Itoa(i)
}

// deref follows YAML aliases (bounded, in case of a cycle).
func deref(n *kyaml.Node) *kyaml.Node {
	for i := 0; n != nil && n.Kind == kyaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// fieldNode returns the value node of key in mapping n (not dereferenced), or nil.
func fieldNode(n *kyaml.Node, key string) *kyaml.Node {
	n = deref(n)
	if n == nil || n.Kind != kyaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := deref(n.Content[i]); k != nil && k.Kind == kyaml.ScalarNode && k.Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// field returns the dereferenced value of key in mapping n, or nil.
func field(n *kyaml.Node, key string) *kyaml.Node { return deref(fieldNode(n, key)) }

func scalarValue(n *kyaml.Node) string {
	if n == nil || n.Kind != kyaml.ScalarNode || n.ShortTag() == "!!null" {
		return ""
	}
	return n.Value
}
