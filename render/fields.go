package render

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Image fields are data, as in kustomize's image transformer (its FieldSpecs): the
// built-in workload kinds and the operator's custom-resource paths both become
// fieldSpecs, and one walker (imageFields, walk.go) follows them all.

// fieldSpec says where objects of one group and kind keep an image field.
type fieldSpec struct {
	group, kind string
	// path leads from the object to the image field; its last segment names it.
	path []pathSegment
	// podSpec, when > 0, says that the first podSpec segments of path lead to a pod
	// spec: the uses get the platforms its scheduling allows and the name of the
	// container holding the field, and a container that is not a mapping (null
	// included) is an error. Zero for the operator's paths, whose list items are
	// skipped when null.
	podSpec int
}

type pathSegment struct {
	field string
	each  bool // the field is a list; walk every item
}

// workloadKinds are the kinds whose pod templates are read without being asked, and
// where each keeps its pod spec. kustomize's image transformer reads the same kinds
// (plus Rollout, which Argo CD users deploy like a Deployment).
var workloadKinds = []struct{ group, kind, podSpec string }{
	{"", "Pod", "spec"},
	{"", "ReplicationController", "spec.template.spec"},
	{"", "PodTemplate", "template.spec"},
	{"apps", "Deployment", "spec.template.spec"},
	{"apps", "StatefulSet", "spec.template.spec"},
	{"apps", "DaemonSet", "spec.template.spec"},
	{"apps", "ReplicaSet", "spec.template.spec"},
	// extensions/v1beta1 is long gone from clusters but still in old charts.
	{"extensions", "Deployment", "spec.template.spec"},
	{"extensions", "StatefulSet", "spec.template.spec"},
	{"extensions", "DaemonSet", "spec.template.spec"},
	{"extensions", "ReplicaSet", "spec.template.spec"},
	{"batch", "Job", "spec.template.spec"},
	{"batch", "CronJob", "spec.jobTemplate.spec.template.spec"},
	{"argoproj.io", "Rollout", "spec.template.spec"},
}

// containerLists are a pod spec's lists of containers, in the order their images are
// reported.
var containerLists = []string{"containers", "initContainers", "ephemeralContainers"}

// workloadSpecs expands workloadKinds into one fieldSpec per container list, e.g.
// Deployment.apps spec.template.spec.containers[].image.
var workloadSpecs = sync.OnceValue(func() []fieldSpec {
	var out []fieldSpec
	for _, w := range workloadKinds {
		for _, list := range containerLists {
			segs, err := parsePath(w.podSpec + "." + list + "[].image")
			if err != nil {
				panic(fmt.Sprintf("render: built-in image path of %s: %v", w.kind, err)) // a typo in the table above
			}
			out = append(out, fieldSpec{group: w.group, kind: w.kind, path: segs, podSpec: strings.Count(w.podSpec, ".") + 1})
		}
	}
	return out
})

// ExtraPath declares an image field of a custom resource. Group is the API group
// ("" for the core group), Kind the kind, and Path a dotted field path where a
// segment ending in "[]" walks every item of a list, e.g. "spec.image" or
// "spec.containers[].image".
type ExtraPath struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
	Path  string `json:"path"`
}

// String writes p as ParseExtraPath reads it: Kind[.group]:path.
func (p ExtraPath) String() string {
	if p.Group == "" {
		return p.Kind + ":" + p.Path
	}
	return p.Kind + "." + p.Group + ":" + p.Path
}

// extraPathForm is how an operator writes an ExtraPath (ParseExtraPath).
const extraPathForm = "Kind[.group]:path, e.g. Workflow.argoproj.io:spec.templates[].container.image"

const pathAccepted = "dotted field names, \"[]\" after a list field, e.g. spec.containers[].image"

// ParseExtraPath parses an extra image field as an operator writes it,
// Kind[.group]:path: "Workflow.argoproj.io:spec.templates[].container.image", or
// "ConfigMap:data.image" for a kind of the core group. The kind ends at the first
// dot, the group at the first colon. Errors are *resolve.InputError naming s and
// the accepted form.
func ParseExtraPath(s string) (ExtraPath, error) {
	kindGroup, path, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return ExtraPath{}, &resolve.InputError{Field: "extra image path", Value: s, Accepted: extraPathForm,
			Err: errors.New("no \":\" between the kind and the path")}
	}
	kind, group, _ := strings.Cut(kindGroup, ".")
	p := ExtraPath{Group: group, Kind: kind, Path: path}
	if _, _, err := p.check(); err != nil {
		return ExtraPath{}, &resolve.InputError{Field: "extra image path", Value: s, Accepted: extraPathForm, Err: err}
	}
	return p, nil
}

// Validate checks the kind, the group and the path syntax.
func (p ExtraPath) Validate() error {
	_, err := p.spec()
	return err
}

// spec turns p into the walker's data; the error is a *resolve.InputError naming the
// part of p at fault.
func (p ExtraPath) spec() (fieldSpec, error) {
	segs, part, err := p.check()
	if err != nil {
		ie := &resolve.InputError{Field: "extra path " + part, Value: p.Kind, Accepted: "a resource kind such as MyApp", Err: err}
		switch part {
		case "group":
			ie.Value, ie.Accepted = p.Group, "an API group such as example.com, or none for the core group"
		case "path":
			ie.Field, ie.Value, ie.Accepted = "extra path", p.Path, pathAccepted
		}
		return fieldSpec{}, ie
	}
	return fieldSpec{group: p.Group, kind: p.Kind, path: segs}, nil
}

// check returns p's path segments, or which part of p ("kind", "group", "path") is
// wrong and why.
func (p ExtraPath) check() ([]pathSegment, string, error) {
	if err := checkKind(p.Kind); err != nil {
		return nil, "kind", err
	}
	if err := checkGroup(p.Group); err != nil {
		return nil, "group", err
	}
	segs, err := parsePath(p.Path)
	if err != nil {
		return nil, "path", err
	}
	return segs, "", nil
}

// checkKind accepts what a Kubernetes kind can be: letters and digits, starting with
// a letter. Anything else could never match an object, and would silently not.
func checkKind(kind string) error {
	if kind == "" {
		return errors.New("the kind is empty")
	}
	for i, r := range kind {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || r < '0' || r > '9') {
			return fmt.Errorf("kind %q holds %q; a kind is letters and digits, starting with a letter", kind, r)
		}
	}
	return nil
}

// checkGroup accepts an API group as Kubernetes spells them: lower-case DNS labels
// separated by dots, or "" for the core group.
func checkGroup(group string) error {
	if group == "" {
		return nil
	}
	for _, label := range strings.Split(group, ".") {
		ok := label != "" && label[0] != '-' && label[len(label)-1] != '-'
		for _, r := range label {
			ok = ok && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
		}
		if !ok {
			return fmt.Errorf("group %q is not lower-case DNS labels separated by dots", group)
		}
	}
	return nil
}

// parsePath splits a dotted field path ("spec.containers[].image") into segments.
func parsePath(path string) ([]pathSegment, error) {
	if strings.TrimSpace(path) == "" {
		return nil, errors.New("the path is empty")
	}
	var segs []pathSegment
	for i, s := range strings.Split(path, ".") {
		seg := pathSegment{field: s}
		if f, ok := strings.CutSuffix(s, "[]"); ok {
			seg = pathSegment{field: f, each: true}
		}
		if seg.field == "" {
			return nil, fmt.Errorf("segment %d of %q names no field", i+1, path)
		}
		if strings.ContainsAny(seg.field, "[] \t") {
			return nil, fmt.Errorf("segment %d of %q, %q, is not a field name (only \"[]\" may follow one)", i+1, path, s)
		}
		segs = append(segs, seg)
	}
	if segs[len(segs)-1].each {
		return nil, errors.New("the path ends in a list; the last segment names the image field")
	}
	return segs, nil
}
