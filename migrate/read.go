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

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/yamlerr"
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
		if err := duplicateKey(&node, "", "; two objects in one document? separate them with a line ---"); err != nil {
			return nil, &InputError{Input: in.Name, Doc: n, Err: err}
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
	d.stripped = stripServerFields(root)
	return d
}

// duplicateKey refuses a mapping that repeats a key, as the plugin's policy file
// and the sidecar's configuration file do (key path, line and column as
// internal/yamlerr writes a place): a YAML decoder keeps one of the two values
// silently, so two manifests joined without "---" would be read as one object with
// the second one's metadata. A merge key (<<) is not a key of its own. topHint
// follows the message for a key of the document's top level.
func duplicateKey(n *yaml.Node, path, topHint string) error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := duplicateKey(c, path, topHint); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := duplicateKey(c, fmt.Sprintf("%s[%d]", path, i), topHint); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			kp := path
			if k.Kind == yaml.ScalarNode && k.Tag != "!!merge" {
				kp = joinKey(path, k.Value)
				if first, dup := seen[k.Value]; dup {
					hint := ""
					if path == "" {
						hint = topHint
					}
					where := (&yamlerr.Error{Line: k.Line, Column: k.Column}).Where()
					return fmt.Errorf("key %s%s: duplicate key (first at line %d)%s", kp, where, first, hint)
				}
				seen[k.Value] = k.Line
			}
			if err := duplicateKey(v, kp, topHint); err != nil {
				return err
			}
		}
	}
	return nil
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// serverMetadata are the metadata fields the API server sets, which kubectl get
// -o yaml prints: applied back, a stale resourceVersion fails, managedFields and
// kubectl's last-applied-configuration conflict with the object's new owner.
var serverMetadata = []string{"resourceVersion", "uid", "generation", "creationTimestamp", "managedFields", "selfLink"}

// lastApplied is kubectl apply's record of the object as last applied: an
// Application's still names argocd-image-updater's annotations.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// stripServerFields removes from a Kubernetes object (a mapping with apiVersion
// and kind) the fields the API server sets: serverMetadata, status, and the
// last-applied-configuration annotation. It returns the fields removed, to say so.
func stripServerFields(root *yaml.Node) []string {
	if mapString(root, "apiVersion") == "" || mapString(root, "kind") == "" {
		return nil
	}
	var removed []string
	if md := mapGet(root, "metadata"); md != nil && md.Kind == yaml.MappingNode {
		for _, k := range serverMetadata {
			if mapGet(md, k) != nil {
				mapDelete(md, k)
				removed = append(removed, "metadata."+k)
			}
		}
		if ann := mapGet(md, "annotations"); ann != nil && ann.Kind == yaml.MappingNode && mapGet(ann, lastApplied) != nil {
			mapDelete(ann, lastApplied)
			removed = append(removed, "annotation "+lastApplied)
			if len(ann.Content) == 0 {
				mapDelete(md, "annotations")
			}
		}
	}
	if mapGet(root, "status") != nil {
		mapDelete(root, "status")
		removed = append(removed, "status")
	}
	return removed
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
	cr := &imageUpdater{d: d, name: mapString(md, "name"), namespace: mapString(md, "namespace")}
	cr.label = "ImageUpdater " + cr.name
	if cr.namespace != "" {
		cr.label = "ImageUpdater " + cr.namespace + "/" + cr.name
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
				hint := ""
				if k == "writeBranch" && strings.HasSuffix(at, ".gitConfig") {
					hint = fmt.Sprintf(writeBranchHint, "gitConfig.branch")
				}
				cr.unread = append(cr.unread, fmt.Sprintf("%s %s.%s: unknown to migrate%s", cr.label, at, k, hint))
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
