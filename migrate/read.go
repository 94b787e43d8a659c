package migrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// readDocs reads the documents of one input.
func readDocs(in Input) ([]*doc, error) {
	dec := yaml.NewDecoder(bytes.NewReader(in.Data))
	var out []*doc
	for n := 1; ; n++ {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, &InputError{Input: in.Name, Err: fmt.Errorf("not YAML: %w", err)}
		}
		if len(node.Content) == 0 || node.Content[0].Kind == yaml.ScalarNode && node.Content[0].Tag == "!!null" {
			continue // an empty document
		}
		root := node.Content[0]
		if root.Kind != yaml.MappingNode {
			return nil, &InputError{Input: in.Name, Doc: n, Err: errors.New("not a mapping (accepted: Kubernetes objects: Applications, ImageUpdater resources, argocd-image-updater's ConfigMap; or a registries.conf)")}
		}
		if items := mapGet(root, "items"); mapString(root, "kind") == "List" && items != nil && items.Kind == yaml.SequenceNode {
			// kubectl get -o yaml: each item is migrated as a document of its own.
			for _, it := range items.Content {
				if it.Kind != yaml.MappingNode {
					return nil, &InputError{Input: in.Name, Doc: n, Err: errors.New("an item of the List is not a mapping")}
				}
				out = append(out, newDoc(in.Name, n, &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{it}}))
			}
			continue
		}
		out = append(out, newDoc(in.Name, n, &node))
	}
}

func newDoc(input string, n int, node *yaml.Node) *doc {
	root := node.Content[0]
	d := &doc{input: input, n: n, node: node, root: root, kind: mapString(root, "kind")}
	if g, _, ok := strings.Cut(mapString(root, "apiVersion"), "/"); ok {
		d.group = g
	}
	return d
}

// mapGet returns the value of key in a mapping node, or nil.
func mapGet(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func mapString(m *yaml.Node, key string) string {
	if v := mapGet(m, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

func mapDelete(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
}

func mapSet(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, scalar(key), v)
}

func scalar(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

// stringMap decodes a mapping of strings (labels, annotations).
func stringMap(n *yaml.Node, what string) (map[string]string, error) {
	out := map[string]string{}
	if n == nil {
		return out, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: not a mapping", what)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		v := n.Content[i+1]
		if v.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%s.%s: not a string", what, n.Content[i].Value)
		}
		out[n.Content[i].Value] = v.Value
	}
	return out, nil
}

func readApplication(d *doc) (*application, error) {
	md := mapGet(d.root, "metadata")
	a := &application{d: d, name: mapString(md, "name"), namespace: mapString(md, "namespace")}
	var err error
	if a.labels, err = stringMap(mapGet(md, "labels"), "metadata.labels"); err != nil {
		return nil, &InputError{Input: d.input, Doc: d.n, Err: err}
	}
	if a.annotations, err = stringMap(mapGet(md, "annotations"), "metadata.annotations"); err != nil {
		return nil, &InputError{Input: d.input, Doc: d.n, Err: err}
	}
	for k := range a.annotations {
		if strings.HasPrefix(k, AnnotationPrefix) {
			a.hasUpdaterKeys = true
		}
	}
	src := mapGet(mapGet(d.root, "spec"), "source")
	a.repoURL, a.srcPath = mapString(src, "repoURL"), mapString(src, "path")
	return a, nil
}

// toJSON converts a YAML node to JSON, for decoding into typed structs.
func toJSON(n *yaml.Node) ([]byte, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func readImageUpdater(d *doc) (*imageUpdater, error) {
	md := mapGet(d.root, "metadata")
	cr := &imageUpdater{d: d, label: "ImageUpdater " + mapString(md, "name")}
	if ns := mapString(md, "namespace"); ns != "" {
		cr.label = "ImageUpdater " + ns + "/" + mapString(md, "name")
	}
	spec := mapGet(d.root, "spec")
	if spec == nil {
		return nil, &InputError{Input: d.input, Doc: d.n, Err: fmt.Errorf("%s has no spec", cr.label)}
	}
	js, err := toJSON(spec)
	if err == nil {
		err = json.Unmarshal(js, &cr.spec)
	}
	if err != nil {
		return nil, &InputError{Input: d.input, Doc: d.n, Err: fmt.Errorf("%s spec: %w (accepted: the fields of argocd-image-updater.argoproj.io/v1alpha1 ImageUpdater)", cr.label, err)}
	}
	// Fields migrate does not know are said, never dropped silently.
	unknown := func(n *yaml.Node, known []string, at string) {
		if n == nil || n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i].Value; !slices.Contains(known, k) {
				cr.unread = append(cr.unread, fmt.Sprintf("%s %s.%s: unknown to migrate", cr.label, at, k))
			}
		}
	}
	verify := func(n *yaml.Node, at string) {
		v := mapGet(n, "imagesVerification")
		unknown(v, crVerifyFields, at+".imagesVerification")
		unknown(mapGet(v, "cosignKey"), crCosignKeyFields, at+".imagesVerification.cosignKey")
	}
	writeBack := func(n *yaml.Node, at string) {
		w := mapGet(n, "writeBackConfig")
		unknown(w, crWriteFields, at+".writeBackConfig")
		g := mapGet(w, "gitConfig")
		unknown(g, crGitFields, at+".writeBackConfig.gitConfig")
		unknown(mapGet(g, "pullRequest"), crForges, at+".writeBackConfig.gitConfig.pullRequest")
	}
	unknown(spec, crSpecFields, "spec")
	writeBack(spec, "spec")
	unknown(mapGet(spec, "commonUpdateSettings"), crCommonFields, "spec.commonUpdateSettings")
	verify(spec, "spec")
	if refs := mapGet(spec, "applicationRefs"); refs != nil {
		for i, r := range refs.Content {
			at := fmt.Sprintf("spec.applicationRefs[%d]", i)
			unknown(r, crRefFields, at)
			writeBack(r, at)
			unknown(mapGet(r, "commonUpdateSettings"), crCommonFields, at+".commonUpdateSettings")
			verify(r, at)
			if imgs := mapGet(r, "images"); imgs != nil {
				for j, im := range imgs.Content {
					unknown(im, crImageFields, fmt.Sprintf("%s.images[%d]", at, j))
					unknown(mapGet(im, "commonUpdateSettings"), crCommonFields, fmt.Sprintf("%s.images[%d].commonUpdateSettings", at, j))
					verify(im, fmt.Sprintf("%s.images[%d]", at, j))
				}
			}
		}
	}
	for i, ref := range cr.spec.ApplicationRefs {
		if _, err := path.Match(ref.NamePattern, ""); err != nil || ref.NamePattern == "" {
			return nil, &InputError{Input: d.input, Doc: d.n, Err: fmt.Errorf("%s spec.applicationRefs[%d].namePattern %q: not a glob (accepted: a pattern such as my-app-*)", cr.label, i, ref.NamePattern)}
		}
	}
	return cr, nil
}

// selects reports whether an applicationRef selects an Application: the name
// matches namePattern (a glob), the labels match labelSelectors, and the
// Application is in the resource's spec.namespace (when both say one).
func selects(cr *imageUpdater, ref crRef, a *application) (bool, error) {
	if ok, _ := path.Match(ref.NamePattern, a.name); !ok {
		return false, nil
	}
	if ns := cr.spec.Namespace; ns != "" && a.namespace != "" && ns != a.namespace {
		return false, nil
	}
	if len(ref.LabelSelectors) > 0 && string(ref.LabelSelectors) != "null" {
		var ls metav1.LabelSelector
		if err := json.Unmarshal(ref.LabelSelectors, &ls); err != nil {
			return false, err
		}
		sel, err := metav1.LabelSelectorAsSelector(&ls)
		if err != nil {
			return false, err
		}
		if !sel.Matches(labels.Set(a.labels)) {
			return false, nil
		}
	}
	return true, nil
}
