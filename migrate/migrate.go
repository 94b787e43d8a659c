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
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
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
	// stripped are the fields the API server set that were removed (kubectl get
	// -o yaml prints them), to say so above the object.
	stripped []string
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
	d               *doc
	name, namespace string
	label           string
	spec            crSpec
	unread          []string
	selected        [][]string // per applicationRef, the Applications it selects
	findings        []Finding
}

// Migrate migrates the inputs.
func Migrate(inputs []Input, opts Options) (*Result, error) {
	if opts.PluginName == "" {
		opts.PluginName = DefaultPluginName
	}
	m := &migration{opts: opts, regs: &registries{}, res: &Result{}}
	for _, in := range inputs {
		ds, err := readDocs(in)
		if err != nil {
			return nil, err
		}
		m.docs = append(m.docs, ds...)
	}
	if err := m.readObjects(); err != nil {
		return nil, err
	}
	if err := m.chooseConfigurations(); err != nil {
		return nil, err
	}
	for _, cr := range m.crs {
		cr.describeReplacement()
	}
	if err := m.writeManifests(); err != nil {
		return nil, err
	}
	if err := m.writeRegistries(); err != nil {
		return nil, err
	}
	for _, o := range m.res.Objects {
		for _, f := range o.Findings {
			if f.Kind == Lost {
				m.res.Lost++
			}
		}
	}
	return m.res, nil
}

// migration is what Migrate's steps hand on to each other.
type migration struct {
	opts Options
	docs []*doc
	apps []*application
	crs  []*imageUpdater
	regs *registries
	res  *Result
}

// readObjects reads the documents migrate knows: Applications, ImageUpdater
// resources, and argocd-image-updater's registries configuration.
func (m *migration) readObjects() error {
	for _, d := range m.docs {
		switch {
		case d.kind == "Application" && d.group == "argoproj.io":
			a, err := readApplication(d)
			if err != nil {
				return err
			}
			d.app = a
			m.apps = append(m.apps, a)
		case d.kind == "ImageUpdater" && d.group == "argocd-image-updater.argoproj.io":
			cr, err := readImageUpdater(d)
			if err != nil {
				return err
			}
			d.cr = cr
			m.crs = append(m.crs, cr)
		case d.kind == "ConfigMap" && d.group == "" && mapString(mapGet(d.root, "metadata"), "name") == "argocd-image-updater-config":
			if err := m.regs.readConfigMap(d); err != nil {
				return err
			}
		case d.kind == "" && mapGet(d.root, "registries") != nil && len(d.root.Content) == 2:
			// A registries.conf file of argocd-image-updater on its own.
			if err := m.regs.readConf(d, fmt.Sprintf("%s (document %d)", d.input, d.n), d.root); err != nil {
				return err
			}
			d.consumed = fmt.Sprintf("argocd-image-updater's registries configuration (%s, document %d): carried over into the registries file", d.input, d.n)
		}
	}
	return nil
}

// chooseConfigurations gives each Application its configuration: the first
// ImageUpdater applicationRef that selects it, else its annotations.
func (m *migration) chooseConfigurations() error {
	for _, cr := range m.crs {
		cr.selected = make([][]string, len(cr.spec.ApplicationRefs))
		for _, rg := range cr.spec.Registries {
			m.regs.readEntry(rg, cr.label+" spec.registries")
		}
	}
	for _, a := range m.apps {
		for _, cr := range m.crs {
			if err := a.selectBy(cr); err != nil {
				return err
			}
		}
		if a.selectedBy == "" {
			a.conf = fromAnnotations(a.annotations)
		}
	}
	return nil
}

// selectBy gives a the configuration of the first of cr's applicationRefs that
// selects it, unless another selected it before; a later one is said.
func (a *application) selectBy(cr *imageUpdater) error {
	for i, ref := range cr.spec.ApplicationRefs {
		ok, err := selects(cr, ref, a)
		if err != nil {
			return &InputError{Input: cr.d.input, Doc: cr.d.n, Err: fmt.Errorf("spec.applicationRefs[%d].labelSelectors: %w", i, err)}
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
	return nil
}

// describeReplacement sets the comment that replaces cr in the output (the
// Applications each applicationRef selects), and finds the applicationRefs that
// select none.
func (cr *imageUpdater) describeReplacement() {
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
	cr.d.consumed += "; " + cr.deleteAdvice()
}

// deleteAdvice says that the ImageUpdater must be deleted by hand: migrate prints
// no object for it, and while it is in the cluster argocd-image-updater goes on
// updating the Applications it selects, now the plugin's.
func (cr *imageUpdater) deleteAdvice() string {
	cmd := "kubectl delete imageupdaters.argocd-image-updater.argoproj.io " + cr.name
	if cr.namespace != "" {
		cmd += " -n " + cr.namespace
	}
	return fmt.Sprintf("delete the ImageUpdater from the cluster once every Application it selects is migrated and applied (%s), or argocd-image-updater keeps acting on them", cmd)
}

// writeManifests writes the output stream, document by document in input order:
// Applications migrated, argocd-image-updater's own objects replaced by
// comments, other objects as they were.
func (m *migration) writeManifests() error {
	var w manifestWriter
	for _, d := range m.docs {
		var err error
		switch {
		case d.app != nil && d.app.conf != nil:
			comments := m.migrateApplication(d.app)
			err = w.emit(comments, d.node)
		case d.cr != nil:
			fs := sortFindings(d.cr.findings)
			m.res.Objects = append(m.res.Objects, ObjectFindings{Object: d.cr.label, Findings: fs})
			err = w.emit(append([]string{"argocd-image-resolver migrate: " + d.consumed}, findingLines(fs)...), nil)
		case d.consumed != "":
			err = w.emit([]string{"argocd-image-resolver migrate: " + d.consumed}, nil)
		default:
			var comments []string
			if len(d.stripped) > 0 {
				comments = []string{"argocd-image-resolver migrate: " + strippedText(d.stripped)}
			}
			err = w.emit(comments, d.node)
		}
		if err != nil {
			return err
		}
	}
	m.res.Manifests = w.out.Bytes()
	return nil
}

// migrateApplication rewrites an Application in place to name the plugin with
// its converted parameters, and returns the comments to write above it.
func (m *migration) migrateApplication(a *application) []string {
	c := convert(a.conf, appSource{repoURL: a.repoURL, path: a.srcPath})
	c.findings = append(slices.Clone(a.extra), c.findings...)
	if len(a.d.stripped) > 0 {
		c.add(Note, "%s", strippedText(a.d.stripped))
	}
	rewriteApplication(a, c.params, &c, m.opts.PluginName)
	m.regs.addCredentials(a.label(), c.creds, &c)
	fs := sortFindings(c.findings)
	obj := "Application " + a.label()
	m.res.Objects = append(m.res.Objects, ObjectFindings{Object: obj, Findings: fs})
	comments := []string{fmt.Sprintf("argocd-image-resolver migrate: %s, from argocd-image-updater's %s", obj, a.conf.via)}
	return append(comments, findingLines(fs)...)
}

// manifestWriter writes a YAML stream: documents separated by "---", each with
// its comments above it.
type manifestWriter struct {
	out     bytes.Buffer
	started bool
}

// emit writes one document: the comments, then the node unless it is nil.
func (w *manifestWriter) emit(comments []string, node *yaml.Node) error {
	if w.started {
		w.out.WriteString("---\n")
	}
	w.started = true
	for _, c := range comments {
		w.out.WriteString("# " + oneLine(c) + "\n")
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
	w.out.Write(b.Bytes())
	return nil
}

// writeRegistries renders the registries file, with its findings.
func (m *migration) writeRegistries() error {
	rb, rf, err := m.regs.render()
	if err != nil {
		return err
	}
	m.res.Registries = rb
	if len(rf) > 0 {
		m.res.Objects = append(m.res.Objects, ObjectFindings{Object: "registries", Findings: sortFindings(rf)})
	}
	return nil
}

// strippedText says which fields the API server set were removed, and why.
func strippedText(fields []string) string {
	return fmt.Sprintf("%s: set by the API server (kubectl get -o yaml prints them); removed, as applied back they fail (a stale resourceVersion) or conflict", strings.Join(fields, ", "))
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
