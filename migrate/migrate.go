// Package migrate turns argocd-image-updater's configuration into this project's:
// Applications with argocd-image-updater annotations, and ImageUpdater resources
// (argocd-image-updater.argoproj.io/v1alpha1) with the Applications they select,
// become Applications that name the plugin, their policy carried in plugin
// parameters; the credentials they name become a registries file. Whatever cannot
// be carried over, and every word the two tools read differently, is said in a YAML
// comment above the object it concerns: nothing is dropped silently.
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

// DefaultPluginName is the name Applications give the plugin (plugin.yaml's
// name-version).
const DefaultPluginName = "image-resolver-v1"

// Input is one YAML stream to migrate.
type Input struct {
	// Name names the input in messages: a file name, or "-" for stdin.
	Name string
	Data []byte
}

// Options adjust a migration.
type Options struct {
	// PluginName is the plugin Applications name; DefaultPluginName when empty.
	PluginName string
}

// InputError is input migrate cannot read: YAML that does not parse, a document
// that is not a mapping, a resource whose fields have the wrong types.
type InputError struct {
	Input string // the input's name
	Doc   int    // 1-based document number; 0 for the whole input
	Err   error
}

func (e *InputError) Error() string {
	if e.Doc > 0 {
		return fmt.Sprintf("%s: document %d: %v", e.Input, e.Doc, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Input, e.Err)
}

func (e *InputError) Unwrap() error { return e.Err }

// ObjectFindings are the findings about one object of the output.
type ObjectFindings struct {
	Object   string // "Application argocd/web", "ImageUpdater argocd/x", "registries"
	Findings []Finding
}

// Result is a migration's output.
type Result struct {
	// Manifests is the YAML stream: the input's documents in order, Applications
	// rewritten (each with its findings as comments above it), other objects as
	// they were; argocd-image-updater's own resources are replaced by comments.
	Manifests []byte
	// Registries is the registries file for the credentials and registries found
	// (docs/registries.md), or nil when there are none.
	Registries []byte
	// Objects lists the findings per object, in output order.
	Objects []ObjectFindings
	// Lost counts the findings of kind Lost: what could not be carried over.
	Lost int
}

// Stream is the output as one YAML stream: the manifests, then, when there is
// one, the registries file as a last document with a comment saying where it goes.
func (r *Result) Stream() []byte {
	var b bytes.Buffer
	b.Write(r.Manifests)
	if r.Registries != nil {
		if b.Len() > 0 {
			b.WriteString("---\n")
		}
		b.WriteString("# The registries file (not a Kubernetes object): the sidecar's $IMAGE_RESOLVER_REGISTRIES_CONFIG,\n")
		b.WriteString("# or registries: in its $IMAGE_RESOLVER_CONFIG (docs/registries.md). migrate --registries-out FILE writes it apart.\n")
		b.Write(r.Registries)
	}
	return b.Bytes()
}

// doc is one document of the input.
type doc struct {
	input string
	n     int
	node  *yaml.Node // the DocumentNode
	root  *yaml.Node // its mapping
	kind  string
	group string // apiVersion's group
	// set while migrating
	app      *application
	cr       *imageUpdater
	consumed string // for argocd-image-updater's own objects: the comment replacing them
}

// application is an Argo CD Application of the input.
type application struct {
	d                 *doc
	name, namespace   string
	labels            map[string]string
	annotations       map[string]string
	conf              *appConf
	selectedBy        string
	extra             []Finding
	repoURL, srcPath  string
	hasUpdaterKeys    bool
	annotationsIgnore string
}

func (a *application) label() string {
	if a.namespace != "" {
		return a.namespace + "/" + a.name
	}
	return a.name
}

// imageUpdater is an ImageUpdater resource of the input.
type imageUpdater struct {
	d        *doc
	label    string
	spec     crSpec
	unread   []string
	selected [][]string // per applicationRef, the Applications it selects
	findings []Finding
}

// Migrate migrates the inputs.
func Migrate(inputs []Input, opts Options) (*Result, error) {
	if opts.PluginName == "" {
		opts.PluginName = DefaultPluginName
	}
	var docs []*doc
	for _, in := range inputs {
		ds, err := readDocs(in)
		if err != nil {
			return nil, err
		}
		docs = append(docs, ds...)
	}

	var apps []*application
	var crs []*imageUpdater
	regs := &registries{}
	for _, d := range docs {
		switch {
		case d.kind == "Application" && d.group == "argoproj.io":
			a, err := readApplication(d)
			if err != nil {
				return nil, err
			}
			d.app = a
			apps = append(apps, a)
		case d.kind == "ImageUpdater" && d.group == "argocd-image-updater.argoproj.io":
			cr, err := readImageUpdater(d)
			if err != nil {
				return nil, err
			}
			d.cr = cr
			crs = append(crs, cr)
		case d.kind == "ConfigMap" && d.group == "" && mapString(mapGet(d.root, "metadata"), "name") == "argocd-image-updater-config":
			if err := regs.readConfigMap(d); err != nil {
				return nil, err
			}
		case d.kind == "" && mapGet(d.root, "registries") != nil && len(d.root.Content) == 2:
			// A registries.conf file of argocd-image-updater on its own.
			if err := regs.readConf(d, fmt.Sprintf("%s (document %d)", d.input, d.n), d.root); err != nil {
				return nil, err
			}
			d.consumed = fmt.Sprintf("argocd-image-updater's registries configuration (%s, document %d): carried over into the registries file", d.input, d.n)
		}
	}

	// Which configuration each Application has: the first ImageUpdater
	// applicationRef that selects it, else its annotations.
	for _, cr := range crs {
		cr.selected = make([][]string, len(cr.spec.ApplicationRefs))
		for _, rg := range cr.spec.Registries {
			regs.readEntry(rg, cr.label+" spec.registries")
		}
	}
	for _, a := range apps {
		for _, cr := range crs {
			for i, ref := range cr.spec.ApplicationRefs {
				ok, err := selects(cr, ref, a)
				if err != nil {
					return nil, &InputError{Input: cr.d.input, Doc: cr.d.n, Err: fmt.Errorf("spec.applicationRefs[%d].labelSelectors: %w", i, err)}
				}
				if !ok {
					continue
				}
				if a.selectedBy != "" {
					a.extra = append(a.extra, Finding{Note, fmt.Sprintf("%s applicationRefs[%d] selects this app too; argocd-image-updater's configuration is taken from %s", cr.label, i, a.selectedBy)})
					continue
				}
				cr.selected[i] = append(cr.selected[i], a.label())
				if ref.UseAnnotations != nil && *ref.UseAnnotations {
					a.selectedBy = fmt.Sprintf("%s applicationRefs[%d] (useAnnotations)", cr.label, i)
					a.conf = fromAnnotations(a.annotations)
					if a.conf == nil {
						a.conf = &appConf{via: a.selectedBy, unread: []string{"useAnnotations: true, but the Application has no argocd-image-updater annotations"}}
					}
					a.conf.via = a.selectedBy + ", from annotations"
					continue
				}
				a.selectedBy = fmt.Sprintf("%s applicationRefs[%d]", cr.label, i)
				a.conf = fromResource(cr, i)
				if a.hasUpdaterKeys {
					a.extra = append(a.extra, Finding{Note, "argocd-image-updater annotations of this Application are not read when an ImageUpdater selects it (useAnnotations is not set); removed"})
				}
			}
		}
		if a.selectedBy == "" {
			a.conf = fromAnnotations(a.annotations)
		}
	}
	for _, cr := range crs {
		var parts []string
		for i, sel := range cr.selected {
			ref := cr.spec.ApplicationRefs[i]
			if len(sel) == 0 {
				cr.findings = append(cr.findings, Finding{Lost, fmt.Sprintf("applicationRefs[%d] (namePattern %q) selects no Application of the input; give migrate the Applications it selects (argocd app get NAME -o yaml, or their manifests in git)", i, ref.NamePattern)})
				continue
			}
			parts = append(parts, fmt.Sprintf("applicationRefs[%d] -> %s", i, strings.Join(sel, ", ")))
		}
		for _, u := range cr.unread {
			cr.findings = append(cr.findings, Finding{Lost, u})
		}
		cr.d.consumed = fmt.Sprintf("%s: replaced by the plugin parameters of the Applications it selects", cr.label)
		if len(parts) > 0 {
			cr.d.consumed += " (" + strings.Join(parts, "; ") + ")"
		}
	}

	res := &Result{}
	var out bytes.Buffer
	first := true
	emit := func(comments []string, node *yaml.Node) error {
		if !first {
			out.WriteString("---\n")
		}
		first = false
		for _, c := range comments {
			out.WriteString("# " + oneLine(c) + "\n")
		}
		if node == nil {
			return nil
		}
		var b bytes.Buffer
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(node); err != nil {
			return err
		}
		if err := enc.Close(); err != nil {
			return err
		}
		out.Write(b.Bytes())
		return nil
	}
	for _, d := range docs {
		switch {
		case d.app != nil && d.app.conf != nil:
			a := d.app
			c := convert(a.conf, appSource{repoURL: a.repoURL, path: a.srcPath})
			c.findings = append(slices.Clone(a.extra), c.findings...)
			rewriteApplication(a, c.params, &c, opts.PluginName)
			regs.addCredentials(a.label(), c.creds, &c)
			fs := sortFindings(c.findings)
			obj := "Application " + a.label()
			res.Objects = append(res.Objects, ObjectFindings{Object: obj, Findings: fs})
			comments := []string{fmt.Sprintf("argocd-image-resolver migrate: %s, from argocd-image-updater's %s", obj, a.conf.via)}
			comments = append(comments, findingLines(fs)...)
			if err := emit(comments, d.node); err != nil {
				return nil, err
			}
		case d.cr != nil:
			fs := sortFindings(d.cr.findings)
			res.Objects = append(res.Objects, ObjectFindings{Object: d.cr.label, Findings: fs})
			if err := emit(append([]string{"argocd-image-resolver migrate: " + d.consumed}, findingLines(fs)...), nil); err != nil {
				return nil, err
			}
		case d.consumed != "":
			if err := emit([]string{"argocd-image-resolver migrate: " + d.consumed}, nil); err != nil {
				return nil, err
			}
		default:
			if err := emit(nil, d.node); err != nil {
				return nil, err
			}
		}
	}
	res.Manifests = out.Bytes()
	rb, rf, err := regs.render()
	if err != nil {
		return nil, err
	}
	res.Registries = rb
	if len(rf) > 0 {
		res.Objects = append(res.Objects, ObjectFindings{Object: "registries", Findings: sortFindings(rf)})
	}
	for _, o := range res.Objects {
		for _, f := range o.Findings {
			if f.Kind == Lost {
				res.Lost++
			}
		}
	}
	return res, nil
}

func findingLines(fs []Finding) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Kind.String() + ": " + f.Text
	}
	return out
}

// oneLine keeps a comment on one line, whatever the input's values hold.
func oneLine(s string) string {
	return strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(s)
}

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
	unknown(spec, crSpecFields, "spec")
	unknown(mapGet(spec, "commonUpdateSettings"), crCommonFields, "spec.commonUpdateSettings")
	if refs := mapGet(spec, "applicationRefs"); refs != nil {
		for i, r := range refs.Content {
			at := fmt.Sprintf("spec.applicationRefs[%d]", i)
			unknown(r, crRefFields, at)
			unknown(mapGet(r, "commonUpdateSettings"), crCommonFields, at+".commonUpdateSettings")
			if imgs := mapGet(r, "images"); imgs != nil {
				for j, im := range imgs.Content {
					unknown(im, crImageFields, fmt.Sprintf("%s.images[%d]", at, j))
					unknown(mapGet(im, "commonUpdateSettings"), crCommonFields, fmt.Sprintf("%s.images[%d].commonUpdateSettings", at, j))
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
