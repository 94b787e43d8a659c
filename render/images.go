package render

import (
	"fmt"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/yamlnode"
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
	// Index is the use's position in the render's uses, ObjectIndex its object's
	// position in the rendered objects: Edits name fields and objects by them.
	Index, ObjectIndex int

	node *kyaml.Node  // the image scalar
	obj  *kyaml.RNode // the object holding it
}

// ObjectNode returns the object that holds the image field, for Annotate.
func (u ImageUse) ObjectNode() *kyaml.RNode { return u.obj }

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
	f, err := newImageFields(extra)
	if err != nil {
		return nil, err
	}
	if _, err := f.Filter(objs); err != nil {
		return nil, err
	}
	for i := range f.uses {
		f.uses[i].Index = i
	}
	return f.uses, nil
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

// imageUse checks and parses one image field.
func imageUse(obj *kyaml.RNode, ref ObjectRef, path string, n *kyaml.Node) (ImageUse, error) {
	v := deref(n)
	if v.Kind != kyaml.ScalarNode || v.ShortTag() != "!!str" {
		var what, val string
		switch {
		case yamlnode.IsNull(v):
			what = "null"
		case v.Kind == kyaml.ScalarNode:
			val = v.Value
			what = fmt.Sprintf("a %s (%s)", yamlnode.Noun(v), val)
		default:
			what = "a " + yamlnode.Noun(v)
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
