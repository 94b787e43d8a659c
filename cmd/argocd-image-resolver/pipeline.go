package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

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

// substitution is one image field and what it resolved to.
type substitution struct {
	use    render.ImageUse
	policy *plugin.ImagePolicy
	req    resolve.Request
	reqIdx int // index of req in the batch (identical requests are sent once)
	answer resolve.Answer
	newRef string
}

// renderReport is what a render did, for preview and stderr.
type renderReport struct {
	kind  render.SourceKind
	subs  []*substitution
	stale []string
	notes []string // warnings for stderr
}

// renderApp runs the whole CMP render: policy, source, image fields, resolution
// through batch, rewrite, output. The manifests are returned only if every image
// named by a policy resolved: a partial render is never printed.
func renderApp(ctx context.Context, dir string, env *plugin.Env, batch resolve.Batch) ([]byte, *renderReport, error) {
	pol, err := plugin.LoadPolicy(dir, env.Parameters)
	if err != nil {
		return nil, nil, err
	}
	root, _ := filepath.Abs(dir)
	if env.SourcePath != "" {
		root = repoRoot(root, env.SourcePath)
	}
	rendered, err := render.Render(ctx, dir, render.Options{
		AppName: env.AppName, Namespace: env.AppNamespace,
		KubeVersion: env.KubeVersion, APIVersions: env.KubeAPIVersions,
		ValuesFiles: pol.Helm.ValuesFiles, HelmParameters: pol.Helm.Parameters, Values: pol.Helm.Values,
		RepoRoot: root,
	})
	if err != nil {
		return nil, nil, err
	}
	extra, err := parseExtraPaths(os.Getenv(extraImagePathsEnv))
	if err != nil {
		return nil, nil, err
	}
	uses, err := render.FindImages(rendered.Objects, extra...)
	if err != nil {
		return nil, nil, err
	}
	report := &renderReport{kind: rendered.Kind, notes: pol.Warnings}
	defaults, err := resolve.ParsePlatforms(env.DefaultPlatforms...)
	if err != nil {
		return nil, nil, resolve.WithField(err, "IMAGE_RESOLVER_DEFAULT_PLATFORMS")
	}

	var reqs []resolve.Request
	index := map[string]int{} // request key -> index in reqs
	for _, u := range uses {
		ip := pol.ForRepo(u.Image.Repo)
		if ip == nil {
			continue // not named by a policy: left as written
		}
		spec := ip.Spec
		switch {
		case len(ip.Policy.Platforms()) > 0:
			spec.Platforms = resolve.PlatformStrings(ip.Policy.Platforms())
		case len(u.Platforms) > 0:
			spec.Platforms = resolve.PlatformStrings(u.Platforms)
		default:
			spec.Platforms = resolve.PlatformStrings(defaults)
		}
		req := resolve.Request{Image: ip.Written, Policy: spec}
		key := ip.Written + "\x00" + strings.Join(spec.Platforms, ",")
		i, ok := index[key]
		if !ok {
			i = len(reqs)
			index[key] = i
			reqs = append(reqs, req)
		}
		report.subs = append(report.subs, &substitution{use: u, policy: ip, req: req, reqIdx: i})
	}
	if unused := unusedAliases(pol, report.subs); len(unused) > 0 {
		report.notes = append(report.notes, fmt.Sprintf("no image field uses the repository of %s", strings.Join(unused, ", ")))
	}

	var answers []resolve.Answer
	if len(reqs) > 0 {
		if answers, err = batch.ResolveBatch(ctx, env.AppName, reqs); err != nil {
			return nil, report, err
		}
	}
	// One failed resolution is reported once, naming every object that needed it.
	type failure struct {
		alias   string
		err     error
		objects []string
	}
	var failures []*failure
	for _, s := range report.subs {
		s.answer = answers[s.reqIdx]
		if err := s.answer.Err(); err != nil {
			i := slices.IndexFunc(failures, func(f *failure) bool { return f.alias == s.policy.Alias && f.err.Error() == err.Error() })
			if i < 0 {
				failures = append(failures, &failure{alias: s.policy.Alias, err: err})
				i = len(failures) - 1
			}
			failures[i].objects = appendUnique(failures[i].objects, s.use.Object.String())
			continue
		}
		res := s.answer.Result
		s.newRef = s.use.Image.Written + strings.TrimPrefix(res.Reference, res.Image)
		for _, st := range res.Stale {
			report.stale = appendUnique(report.stale, fmt.Sprintf("%s: %s", s.policy.Alias, st))
		}
	}
	if len(failures) > 0 {
		var errs []error
		for _, f := range failures {
			errs = append(errs, fmt.Errorf("image %s (used by %s): %w", f.alias, strings.Join(f.objects, ", "), f.err))
		}
		return nil, report, errors.Join(errs...)
	}
	if err := rewrite(report.subs); err != nil {
		return nil, report, err
	}
	var out bytes.Buffer
	if err := render.Write(&out, rendered.Objects); err != nil {
		return nil, report, err
	}
	return out.Bytes(), report, nil
}

// rewrite sets the new references and annotates each rewritten object.
func rewrite(subs []*substitution) error {
	type notes struct{ resolved, skipped, stale []string }
	byObj := map[any]*notes{}
	var order []*substitution
	for _, s := range subs {
		if err := render.SetImage(s.use, s.newRef); err != nil {
			return err
		}
		obj := s.use.ObjectNode()
		n, ok := byObj[obj]
		if !ok {
			n = &notes{}
			byObj[obj] = n
			order = append(order, s)
		}
		res := s.answer.Result
		n.resolved = appendUnique(n.resolved, fmt.Sprintf("%s=%s (%s)", s.policy.Alias, s.newRef, describe(s.req, res)))
		for _, sk := range res.Skipped {
			n.skipped = appendUnique(n.skipped, fmt.Sprintf("%s=%s:%s: %s", s.policy.Alias, s.use.Image.Written, sk.Tag, sk.Reason))
		}
		if len(res.Stale) > 0 {
			n.stale = appendUnique(n.stale, s.policy.Alias)
		}
	}
	for _, s := range order {
		obj := s.use.ObjectNode()
		n := byObj[obj]
		set := map[string][]string{annotationResolved: n.resolved, annotationSkipped: n.skipped, annotationStale: n.stale}
		for _, key := range []string{annotationResolved, annotationSkipped, annotationStale} {
			if len(set[key]) == 0 {
				continue
			}
			if err := render.Annotate(obj, key, strings.Join(set[key], "; ")); err != nil {
				return fmt.Errorf("annotate %s: %w", s.use.Object, err)
			}
		}
	}
	return nil
}

// describe says briefly why a result was chosen: strategy, constraint, platforms.
func describe(req resolve.Request, res *resolve.Result) string {
	parts := []string{string(res.Strategy)}
	if c := req.Policy.Constraint; c != "" {
		parts[0] += " " + c
	}
	if len(res.Platforms) > 0 {
		parts = append(parts, "platforms "+strings.Join(res.Platforms, ","))
	}
	return strings.Join(parts, "; ")
}

func unusedAliases(pol *plugin.AppPolicy, subs []*substitution) []string {
	var unused []string
	for _, ip := range pol.Images {
		if !slices.ContainsFunc(subs, func(s *substitution) bool { return s.policy.Alias == ip.Alias }) {
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

// repoRoot finds the repository root from the app directory and the app's path in
// the repository (ARGOCD_APP_SOURCE_PATH): Argo CD extracts the whole repository and
// runs generate in <root>/<path>.
func repoRoot(appDir, sourcePath string) string {
	clean := filepath.Clean(sourcePath)
	if clean == "." || clean == "/" {
		return appDir
	}
	if strings.HasSuffix(appDir, string(os.PathSeparator)+clean) {
		return strings.TrimSuffix(appDir, string(os.PathSeparator)+clean)
	}
	return appDir
}

// extraImagePathsEnv names the operator's image fields of custom resources, set on
// the sidecar: Kind[.group]:path entries separated by ";", e.g.
// "Workflow.argoproj.io:spec.templates[].container.image;Memcached.cache.example.com:spec.image".
const extraImagePathsEnv = "IMAGE_RESOLVER_EXTRA_IMAGE_PATHS"

// parseExtraPaths parses extraImagePathsEnv's value.
func parseExtraPaths(v string) ([]render.ExtraPath, error) {
	const accepted = `Kind[.group]:path entries separated by ";", e.g. Workflow.argoproj.io:spec.templates[].container.image`
	var out []render.ExtraPath
	for _, item := range strings.Split(v, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		kindGroup, path, ok := strings.Cut(item, ":")
		kind, group, _ := strings.Cut(kindGroup, ".")
		if !ok || kind == "" || path == "" {
			return nil, &resolve.InputError{Field: extraImagePathsEnv, Value: item, Accepted: accepted}
		}
		p := render.ExtraPath{Group: group, Kind: kind, Path: path}
		if err := p.Validate(); err != nil {
			return nil, &resolve.InputError{Field: extraImagePathsEnv, Value: item, Accepted: accepted, Err: err}
		}
		out = append(out, p)
	}
	return out, nil
}
