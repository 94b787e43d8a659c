// Package pipeline is the render of one Argo CD app: policy -> render -> resolve ->
// rewrite -> annotations -> output. generate, preview and the daemon's
// /v1/generate call it alike; how images are resolved (the daemon, or directly)
// comes in as a resolve.Batch, and the operator's settings as a Settings value.
package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/render"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Annotations written on every object whose images were rewritten. Their values
// change only when the resolution changes, so `argocd app diff` stays quiet otherwise.
const (
	annotationResolved = "argocd-image-resolver/resolved"
	annotationSkipped  = "argocd-image-resolver/skipped"
	annotationStale    = "argocd-image-resolver/stale"
)

// Settings are the operator's, the same for every app: built once from the
// configuration (config.Config) by the command that runs the pipeline.
type Settings struct {
	// ExtraImagePaths are image fields of custom resources.
	ExtraImagePaths []render.ExtraPath
	// DefaultPlatforms are required of an image whose policy and workload name none.
	DefaultPlatforms []resolve.Platform
	// Timeout bounds one render (0: none beyond the caller's context).
	Timeout time.Duration
	// Renderer renders the sources (nil: render.InProcess; the daemon gives
	// render.Workers, whose renders can be stopped).
	Renderer render.Renderer
	// KustomizeRemoteHosts are the hosts Kustomize remote entries may be fetched
	// from (none: refused).
	KustomizeRemoteHosts []render.RemoteHost
}

// Pipeline renders apps with one way of resolving and one set of settings.
type Pipeline struct {
	batch    resolve.Batch
	settings Settings
}

// New returns a Pipeline resolving through batch.
func New(batch resolve.Batch, settings Settings) *Pipeline {
	return &Pipeline{batch: batch, settings: settings}
}

// Substitution is one image field and what it resolved to.
type Substitution struct {
	Use     render.ImageUse
	Policy  *plugin.ImagePolicy
	Request resolve.Request
	Answer  resolve.Answer
	// NewRef is the reference written into the field: the image as the manifest
	// spelled it, with the resolved tag (and digest when pinned).
	NewRef string
	// FromPin is the pin the field was rendered from (pin-mode use, an alias with a
	// pin in git); nil when it was resolved live.
	FromPin *pin.Pin

	reqIdx  int    // index of Request in the batch; -1 when FromPin
	pinFile string // the target's file, when FromPin
}

// Report is what a render did, for preview and stderr.
type Report struct {
	Kind          render.SourceKind
	Substitutions []*Substitution
	// Stale lists "alias: entry" for every answer served past its TTL.
	Stale []string
	// Notes are warnings for stderr.
	Notes []string
	// Remote are the remote Kustomize inputs the render fetched (an operator's
	// kustomizeRemoteHosts), with the commit of each git repository.
	Remote []render.RemoteInput
	// Refresh is the app's refresh mode (plugin.RefreshHard, or RefreshOff when it
	// opted out of the daemon's refresh loop).
	Refresh string
	// PinMode and Pins are the app's pin settings; Held the pins its target held
	// at this render (pin-mode write or use), by alias.
	PinMode string
	Pins    plugin.PinSettings
	Held    map[string]pin.Pin
	// Holds are the references held in the app's pins file (held:, pin-mode
	// write or use), by alias: a person rolled them back in git, and they are
	// not pinned again (pin.Hold).
	Holds map[string]pin.Hold
}

// Render runs the whole CMP render of the app in dir: policy, source, image fields,
// resolution, rewrite, output. The manifests are returned only if every image named
// by a policy resolved: a partial render is never printed. The report is returned
// whenever the render got as far as reading the policy, also with an error.
//
// Render holds the manifests whole; Prepare and Output.WriteTo stream them.
func (p *Pipeline) Render(ctx context.Context, dir string, env *plugin.Env) ([]byte, *Report, error) {
	out, report, err := p.Prepare(ctx, dir, env)
	if err != nil {
		return nil, report, err
	}
	defer out.Close()
	var b bytes.Buffer
	if _, err := out.WriteTo(&b); err != nil {
		return nil, report, err
	}
	return b.Bytes(), report, nil
}

// errRenderTimeout is the cause of a render's context ending at Settings.Timeout.
var errRenderTimeout = errors.New("render timeout")

// Prepare runs a render up to its output: policy, source, image fields,
// resolution, and the edits (new references, annotations) applied to the objects,
// which stay where the Renderer holds them (a worker process, or this one). Every
// error of the render but the output's own is decided here, before a byte of the
// manifests is written. The report is returned whenever the render got as far as
// reading the policy, also with an error. The caller writes the manifests with
// Output.WriteTo and closes the Output; Settings.Timeout bounds both phases.
func (p *Pipeline) Prepare(ctx context.Context, dir string, env *plugin.Env) (*Output, *Report, error) {
	o := &Output{timeout: p.settings.Timeout}
	o.ctx, o.cancel = ctx, func() {}
	if p.settings.Timeout > 0 {
		o.ctx, o.cancel = context.WithTimeoutCause(ctx, p.settings.Timeout, errRenderTimeout)
	}
	session, report, err := p.prepare(o.ctx, dir, env)
	if err != nil {
		o.cancel()
		return nil, report, o.timedOut(err)
	}
	o.session = session
	return o, report, nil
}

// MaxOutput bounds the manifests of one render: what a render's worker streams, and
// what argocd-image-resolver-generate spools to a temporary file before printing it
// (deploy's tests size the sidecar's /tmp with it).
const MaxOutput = 256 << 20

// Output is a prepared render: its manifests, every image resolved, ready to be
// written.
type Output struct {
	session render.Session
	ctx     context.Context
	cancel  context.CancelFunc
	timeout time.Duration
}

// WriteTo writes the manifests, once: the YAML stream generate prints. An error
// here (a render worker that failed or was stopped while writing, the render's
// deadline, manifests of more than 256 MiB) comes after some bytes may have been
// written: the caller discards them, as a render that failed.
func (o *Output) WriteTo(w io.Writer) (int64, error) {
	lw := &limitWriter{w: w, left: MaxOutput}
	n, err := o.session.WriteTo(lw)
	if lw.over {
		err = fmt.Errorf("the rendered manifests are larger than %d MiB, more than the plugin passes to Argo CD", MaxOutput>>20)
	}
	if err != nil {
		return n, o.timedOut(err)
	}
	return n, nil
}

// Close releases the render (its worker); it may be called more than once.
func (o *Output) Close() {
	o.session.Close()
	o.cancel()
}

// timedOut says so in err when the render's deadline passed.
func (o *Output) timedOut(err error) error {
	if err != nil && errors.Is(context.Cause(o.ctx), errRenderTimeout) {
		return fmt.Errorf("the render did not finish within %s (renderTimeout); what the registries answered meanwhile is cached, and Argo CD will render again: %w", o.timeout, err)
	}
	return err
}

// limitWriter fails a write past left bytes.
type limitWriter struct {
	w    io.Writer
	left int64
	over bool
}

func (l *limitWriter) Write(b []byte) (int, error) {
	if int64(len(b)) > l.left {
		l.over = true
		return 0, errors.New("output bound")
	}
	l.left -= int64(len(b))
	return l.w.Write(b)
}

// prepare runs the phases of Prepare, each a step below.
func (p *Pipeline) prepare(ctx context.Context, dir string, env *plugin.Env) (render.Session, *Report, error) {
	root, _ := filepath.Abs(dir)
	root = plugin.RepoRoot(root, env.SourcePath)
	pol, err := plugin.LoadPolicyIn(root, dir, env.Parameters)
	if err != nil {
		return nil, nil, err
	}
	session, err := p.openSource(ctx, dir, root, env, pol)
	if err != nil {
		return nil, nil, err
	}
	report, err := p.decide(ctx, dir, env, pol, session)
	if err == nil {
		err = session.Apply(edits(report.Substitutions))
	}
	if err != nil {
		session.Close()
		return nil, report, err
	}
	return session, report, nil
}

// decide reads the image fields of the rendered source, the app's pins, and
// resolves: the report says what each field becomes.
func (p *Pipeline) decide(ctx context.Context, dir string, env *plugin.Env, pol *plugin.AppPolicy, session render.Session) (*Report, error) {
	report := &Report{Kind: session.Kind(), Notes: pol.Warnings, Remote: session.Remote(), Refresh: pol.Refresh, PinMode: pol.PinMode, Pins: pol.Pins}
	if pol.PinMode != plugin.PinOff {
		var err error
		if report.Held, err = readPins(dir, pol); err != nil {
			return report, err
		}
		if report.Holds, err = readHolds(dir); err != nil {
			return report, err
		}
	}
	reqs := p.substitutions(report, pol, session.Uses())
	if unused := unusedAliases(pol, report.Substitutions); len(unused) > 0 {
		report.Notes = append(report.Notes, fmt.Sprintf("no image field uses the repository of %s", strings.Join(unused, ", ")))
	}
	return report, p.resolve(ctx, env.AppName, report, reqs)
}

// openSource renders the app's Helm chart, Kustomize overlay or plain YAML, with
// the Helm inputs and directory options the policy names, and finds its image
// fields.
func (p *Pipeline) openSource(ctx context.Context, dir, root string, env *plugin.Env, pol *plugin.AppPolicy) (render.Session, error) {
	renderer := p.settings.Renderer
	if renderer == nil {
		renderer = render.InProcess{}
	}
	return renderer.Open(ctx, dir, render.Options{
		AppName: env.AppName, Namespace: env.AppNamespace,
		KubeVersion: env.KubeVersion, APIVersions: env.KubeAPIVersions,
		ValuesFiles: pol.Helm.ValuesFiles, HelmParameters: pol.Helm.Parameters, Values: pol.Helm.Values,
		RepoRoot: root, RemoteHosts: p.settings.KustomizeRemoteHosts, ExtraImagePaths: p.settings.ExtraImagePaths,
		Directory: render.DirectoryOptions{Recurse: pol.Directory.Recurse, Include: pol.Directory.Include, Exclude: pol.Directory.Exclude},
	})
}

// substitutions adds to report one Substitution per image field a policy names,
// and returns the resolution requests of those not rendered from a pin, one per
// field in order: identical requests are grouped by the resolver
// (resolve.Resolver.ResolveBatch), not here.
func (p *Pipeline) substitutions(report *Report, pol *plugin.AppPolicy, uses []render.ImageUse) []resolve.Request {
	var reqs []resolve.Request
	// One request per distinct image and policy, however many fields use it: an
	// app of 5,000 Deployments of one image sends one, not 5,000 (each of which
	// the batch would key, join and answer).
	index := map[string]int{}
	for _, u := range uses {
		ip := pol.ForRepo(u.Image.Repo)
		if ip == nil {
			continue // not named by a policy: left as written
		}
		spec := ip.Spec
		spec.Platforms = resolve.PlatformStrings(p.requiredPlatforms(ip, u))
		req := resolve.Request{Image: ip.Written, Policy: spec}
		if held, ok := report.Held[ip.Alias]; ok && pol.PinMode == plugin.PinUse {
			// Rendered from git: no registry access.
			report.Substitutions = append(report.Substitutions, &Substitution{Use: u, Policy: ip, Request: req, FromPin: &held, pinFile: pol.Pins.Target.File(), reqIdx: -1})
			continue
		}
		key := req.Key()
		i, ok := index[key]
		if !ok {
			i, index[key] = len(reqs), len(reqs)
			reqs = append(reqs, req)
		}
		report.Substitutions = append(report.Substitutions, &Substitution{Use: u, Policy: ip, Request: req, reqIdx: i})
	}
	return reqs
}

// requiredPlatforms are the platforms a tag must have for the field u: the
// policy's, else the workload's own, else the operator's default.
func (p *Pipeline) requiredPlatforms(ip *plugin.ImagePolicy, u render.ImageUse) []resolve.Platform {
	switch {
	case len(ip.Policy.Platforms()) > 0:
		return ip.Policy.Platforms()
	case len(u.Platforms) > 0:
		return u.Platforms
	}
	return p.settings.DefaultPlatforms
}

// resolve sends reqs as one batch and sets each substitution's answer and new
// reference. Nothing is rewritten unless every request resolved: the failures are
// returned together, each once, naming every object that needed it.
func (p *Pipeline) resolve(ctx context.Context, app string, report *Report, reqs []resolve.Request) error {
	var answers []resolve.Answer
	if len(reqs) > 0 {
		var err error
		if answers, err = p.batch.ResolveBatch(ctx, app, reqs); err != nil {
			return err
		}
	}
	if len(answers) != len(reqs) {
		return fmt.Errorf("the resolver answered %d of %d image requests; nothing was rewritten", len(answers), len(reqs))
	}
	var failures resolveFailures
	for _, s := range report.Substitutions {
		if s.FromPin != nil {
			s.NewRef = pinnedReference(s.Use.Image.Written, *s.FromPin)
			continue
		}
		s.Answer = answers[s.reqIdx]
		if err := s.Answer.Err(); err != nil {
			failures.add(s, verifyErrorSource(err, s.Policy))
			continue
		}
		res := s.Answer.Result
		s.NewRef = res.ReferenceFor(s.Use.Image.Written)
		for _, st := range res.Stale {
			report.Stale = appendUnique(report.Stale, fmt.Sprintf("%s: %s", s.Policy.Alias, st))
		}
	}
	return failures.err()
}

// verifyErrorSource names, in an input error about a verify field (an app's
// requirement that conflicts with the operator's for the registry, found at
// resolution), where the app gave it: the parameter or the policy file key. An
// answer carries the error as its message ("verify-identity: invalid value ..."),
// so the field is relabelled in the text; the error stays an input error.
func verifyErrorSource(err error, ip *plugin.ImagePolicy) error {
	var ie *resolve.InputError
	if !errors.As(err, &ie) {
		return err
	}
	for field, key := range map[resolve.PolicyField]string{
		resolve.FieldVerifyIdentity: plugin.SourceVerifyIdentity,
		resolve.FieldVerifyIssuer:   plugin.SourceVerifyIssuer,
		resolve.FieldVerifyKey:      plugin.SourceVerifyKey,
	} {
		rest, ok := strings.CutPrefix(err.Error(), string(field)+": ")
		if src := ip.Source[key]; ok && src != "" {
			return &relabelled{msg: src + ": " + rest, err: err}
		}
	}
	return err
}

// relabelled is an error whose message names the user's spelling of a field.
type relabelled struct {
	msg string
	err error
}

func (e *relabelled) Error() string { return e.msg }
func (e *relabelled) Unwrap() error { return e.err }

// resolveFailures are a render's failed resolutions: one per alias and error,
// with every object that needed it.
type resolveFailures []*resolveFailure

type resolveFailure struct {
	alias   string
	err     error
	objects []string
}

func (fs *resolveFailures) add(s *Substitution, err error) {
	i := slices.IndexFunc(*fs, func(f *resolveFailure) bool { return f.alias == s.Policy.Alias && f.err.Error() == err.Error() })
	if i < 0 {
		*fs = append(*fs, &resolveFailure{alias: s.Policy.Alias, err: err})
		i = len(*fs) - 1
	}
	(*fs)[i].objects = appendUnique((*fs)[i].objects, s.Use.Object.String())
}

func (fs resolveFailures) err() error {
	var errs []error
	for _, f := range fs {
		errs = append(errs, fmt.Errorf("image %s (used by %s): %w", f.alias, strings.Join(f.objects, ", "), f.err))
	}
	return errors.Join(errs...)
}

// edits are the new references of subs' image fields, and the annotations of
// each rewritten object: what the render's objects get before they are written.
func edits(subs []*Substitution) render.Edits {
	type notes struct{ resolved, skipped, stale []string }
	byObj := map[int]*notes{}
	var order []int
	var e render.Edits
	for _, s := range subs {
		e.Images = append(e.Images, render.ImageEdit{Use: s.Use.Index, Ref: s.NewRef})
		n, ok := byObj[s.Use.ObjectIndex]
		if !ok {
			n = &notes{}
			byObj[s.Use.ObjectIndex] = n
			order = append(order, s.Use.ObjectIndex)
		}
		if s.FromPin != nil {
			n.resolved = appendUnique(n.resolved, fmt.Sprintf("%s=%s (pinned in %s)", s.Policy.Alias, s.NewRef, s.pinFile))
			continue
		}
		res := s.Answer.Result
		n.resolved = appendUnique(n.resolved, fmt.Sprintf("%s=%s (%s)", s.Policy.Alias, s.NewRef, Describe(s.Request, res)))
		for _, sk := range res.Skipped {
			n.skipped = appendUnique(n.skipped, fmt.Sprintf("%s=%s:%s: %s", s.Policy.Alias, s.Use.Image.Written, sk.Tag, sk.Reason))
		}
		if len(res.Stale) > 0 {
			n.stale = appendUnique(n.stale, s.Policy.Alias)
		}
	}
	for _, obj := range order {
		n := byObj[obj]
		for _, a := range []struct {
			key  string
			list []string
		}{{annotationResolved, n.resolved}, {annotationSkipped, n.skipped}, {annotationStale, n.stale}} {
			if len(a.list) > 0 {
				e.Annotations = append(e.Annotations, render.AnnotationEdit{Object: obj, Key: a.key, Value: strings.Join(a.list, "; ")})
			}
		}
	}
	return e
}

// Describe says briefly why a result was chosen: strategy, constraint, the tag
// filters that narrowed the choice (so that a 1.0.0 chosen under allow-tags does not
// read as if 1.1.0 did not exist), platforms, and who signed it when a signature
// was required ("signed by <identity> (issuer <issuer>)" or "signed by key <name>").
// It is part of the resolved annotation: it names nothing that changes between
// renders of the same resolution.
func Describe(req resolve.Request, res *resolve.Result) string {
	parts := []string{string(res.Strategy)}
	if c := req.Policy.Constraint; c != "" {
		parts[0] += " " + c
	}
	if a := strings.TrimSpace(req.Policy.AllowTags); a != "" && a != "any" {
		parts = append(parts, "allow-tags "+a)
	}
	if len(req.Policy.IgnoreTags) > 0 {
		parts = append(parts, "ignore-tags "+strings.Join(req.Policy.IgnoreTags, ","))
	}
	if len(res.Platforms) > 0 {
		parts = append(parts, "platforms "+strings.Join(res.Platforms, ","))
	}
	if res.Verified != nil {
		parts = append(parts, "signed by "+res.Verified.Describe())
	}
	return strings.Join(parts, "; ")
}

func unusedAliases(pol *plugin.AppPolicy, subs []*Substitution) []string {
	var unused []string
	for _, ip := range pol.Images {
		if !slices.ContainsFunc(subs, func(s *Substitution) bool { return s.Policy.Alias == ip.Alias }) {
			unused = append(unused, ip.Alias)
		}
	}
	return unused
}

func appendUnique(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}
