package render

import (
	"fmt"
	"slices"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/yamlnode"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Node labels that constrain where a pod runs.
var (
	archLabels = []string{"kubernetes.io/arch", "beta.kubernetes.io/arch"}
	osLabels   = []string{"kubernetes.io/os", "beta.kubernetes.io/os"}
)

// valueSet is a set of label values; all means unconstrained.
type valueSet struct {
	all  bool
	vals []string
}

var anyValue = valueSet{all: true}

func (s valueSet) intersect(o valueSet) valueSet {
	switch {
	case s.all:
		return o
	case o.all:
		return s
	}
	var out []string
	for _, v := range s.vals {
		if slices.Contains(o.vals, v) {
			out = append(out, v)
		}
	}
	return valueSet{vals: out}
}

// podPlatforms derives the platforms a pod may be scheduled on from its nodeSelector
// and required node affinity (operator In on the os/arch labels). The nodeSelector
// and the affinity must both hold; affinity terms are ORed, so each term gives its
// own os × arch and the results are united. The os defaults to linux when only the
// architecture is constrained. The result is nil when any way of scheduling the pod
// leaves the architecture open (then the pod does not say which platforms it needs).
func podPlatforms(spec *kyaml.Node, ref ObjectRef, prefix string) ([]resolve.Platform, error) {
	nsOS, nsArch := anyValue, anyValue
	sel := field(spec, "nodeSelector")
	if !yamlnode.IsNull(sel) {
		if sel.Kind != kyaml.MappingNode {
			return nil, &ImageFieldError{Object: ref, Path: prefix + ".nodeSelector", Err: fmt.Errorf("is a %s, not a mapping", yamlnode.Noun(sel))}
		}
		for _, l := range archLabels {
			if v := field(sel, l); v != nil && v.Kind == kyaml.ScalarNode {
				nsArch = nsArch.intersect(valueSet{vals: []string{v.Value}})
			}
		}
		for _, l := range osLabels {
			if v := field(sel, l); v != nil && v.Kind == kyaml.ScalarNode {
				nsOS = nsOS.intersect(valueSet{vals: []string{v.Value}})
			}
		}
	}

	type term struct{ os, arch valueSet }
	terms := []term{{anyValue, anyValue}}
	tp := prefix + ".affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
	req := field(field(field(spec, "affinity"), "nodeAffinity"), "requiredDuringSchedulingIgnoredDuringExecution")
	if list := field(req, "nodeSelectorTerms"); !yamlnode.IsNull(list) {
		if list.Kind != kyaml.SequenceNode {
			return nil, &ImageFieldError{Object: ref, Path: tp, Err: fmt.Errorf("is a %s, not a list", yamlnode.Noun(list))}
		}
		terms = nil
		for i, t := range list.Content {
			t = deref(t)
			if yamlnode.IsNull(t) {
				continue // an empty term matches no node
			}
			if t.Kind != kyaml.MappingNode {
				return nil, &ImageFieldError{Object: ref, Path: fmt.Sprintf("%s[%d]", tp, i), Err: fmt.Errorf("is a %s, not a mapping", yamlnode.Noun(t))}
			}
			exprs := field(t, "matchExpressions")
			fields := field(t, "matchFields")
			if isEmptyList(exprs) && isEmptyList(fields) {
				continue // an empty term matches no node
			}
			cur := term{anyValue, anyValue}
			if !yamlnode.IsNull(exprs) {
				if exprs.Kind != kyaml.SequenceNode {
					return nil, &ImageFieldError{Object: ref, Path: fmt.Sprintf("%s[%d].matchExpressions", tp, i), Err: fmt.Errorf("is a %s, not a list", yamlnode.Noun(exprs))}
				}
				for _, e := range exprs.Content {
					e = deref(e)
					if e.Kind != kyaml.MappingNode || scalarValue(field(e, "operator")) != "In" {
						continue // only In enumerates the nodes a pod may land on
					}
					key := scalarValue(field(e, "key"))
					var vals []string
					if vs := field(e, "values"); vs != nil && vs.Kind == kyaml.SequenceNode {
						for _, v := range vs.Content {
							if s := scalarValue(deref(v)); s != "" {
								vals = append(vals, s)
							}
						}
					}
					switch {
					case slices.Contains(archLabels, key):
						cur.arch = cur.arch.intersect(valueSet{vals: vals})
					case slices.Contains(osLabels, key):
						cur.os = cur.os.intersect(valueSet{vals: vals})
					}
				}
			}
			terms = append(terms, cur)
		}
	}

	var out []resolve.Platform
	for _, t := range terms {
		oses, arches := nsOS.intersect(t.os), nsArch.intersect(t.arch)
		if arches.all {
			return nil, nil // the pod may land on any architecture
		}
		if oses.all {
			oses = valueSet{vals: []string{"linux"}}
		}
		for _, o := range oses.vals {
			for _, a := range arches.vals {
				p, err := resolve.ParsePlatform(o + "/" + a)
				if err != nil {
					continue // no node carries such a label value
				}
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return resolve.SortPlatforms(out), nil
}

func isEmptyList(n *kyaml.Node) bool {
	return yamlnode.IsNull(n) || (n.Kind == kyaml.SequenceNode && len(n.Content) == 0)
}
