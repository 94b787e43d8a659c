package render

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/strvals"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// renderHelm renders the chart in dir the way Argo CD runs
//
//	helm template . --name-template APP --namespace NS --kube-version V \
//	  --values F... --values <inline values> --set K=V... --api-versions A... --include-crds
//
// in-process with the Helm SDK (client-only dry-run install, as `helm template`), and
// keeps the order in which `helm template` prints: the manifest (CRDs first), then the
// hooks.
func renderHelm(ctx context.Context, dir string, b *boundary, opts Options) ([]*kyaml.RNode, error) {
	chrt, err := loadChart(dir, b)
	if err != nil {
		return nil, fmt.Errorf("load Helm chart: %w", err)
	}
	name := chrt.Name()
	switch chrt.Metadata.Type {
	case "", "application":
	default:
		return nil, fmt.Errorf("Helm chart %q: %s charts are not installable", name, chrt.Metadata.Type)
	}
	if req := chrt.Metadata.Dependencies; len(req) > 0 {
		if err := action.CheckDependencies(chrt, req); err != nil {
			var missing []string
			for _, d := range req {
				if !slices.ContainsFunc(chrt.Dependencies(), func(c *chart.Chart) bool { return c.Name() == d.Name }) {
					missing = append(missing, d.Name)
				}
			}
			return nil, fmt.Errorf("Helm chart %q: Chart.yaml declares dependencies that are not in charts/ (%s): %w: the sidecar does not download charts; vendor them: run `helm dependency build` and commit the charts/ directory", name, strings.Join(missing, ", "), ErrUnsupported)
		}
	}
	vals, err := helmValues(dir, b, opts)
	if err != nil {
		return nil, err
	}

	cfg := &action.Configuration{Log: func(string, ...interface{}) {}}
	inst := action.NewInstall(cfg)
	inst.DryRun = true
	inst.DryRunOption = "true"
	inst.ClientOnly = true
	inst.Replace = true
	inst.IncludeCRDs = true
	inst.ReleaseName = releaseName(opts.AppName, dir)
	inst.Namespace = opts.Namespace
	if inst.Namespace == "" {
		inst.Namespace = "default"
	}
	if opts.KubeVersion != "" {
		kv, err := chartutil.ParseKubeVersion(opts.KubeVersion)
		if err != nil {
			return nil, fmt.Errorf("kube version %q: %w (accepted: a Kubernetes version such as 1.31 or v1.31.2)", opts.KubeVersion, err)
		}
		inst.KubeVersion = kv
	}
	inst.APIVersions = chartutil.VersionSet(slices.Clone(opts.APIVersions))

	rel, err := bounded(ctx, func() (*release.Release, error) { return inst.RunWithContext(ctx, chrt, vals) })
	if err != nil {
		return nil, fmt.Errorf("helm template (chart %q): %w", name, err)
	}
	// Exactly what `helm template` prints (cmd/helm/template.go).
	var out bytes.Buffer
	fmt.Fprintln(&out, strings.TrimSpace(rel.Manifest))
	for _, h := range rel.Hooks {
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return parseYAML("helm template output", out.Bytes())
}

// releaseName is the Helm release name for an Argo CD application name.
func releaseName(app, dir string) string {
	if app == "" {
		return filepath.Base(dir)
	}
	// Argo CD names applications outside its control-plane namespace "ns_name";
	// neither part can hold "_".
	if _, name, ok := strings.Cut(app, "_"); ok && name != "" {
		return name
	}
	return app
}

// helmValues merges values as helm does for --values F... --set K=V...: files in order
// (the inline values last among them), then the parameters.
func helmValues(dir string, b *boundary, opts Options) (map[string]interface{}, error) {
	base := map[string]interface{}{}
	for _, f := range opts.ValuesFiles {
		p, err := valuesFilePath(dir, b, f)
		if err != nil {
			return nil, err
		}
		data, err := readRegular(p, fmt.Sprintf("values file %q", f))
		if err != nil {
			return nil, err
		}
		cur, err := chartutil.ReadValues(data)
		if err != nil {
			return nil, fmt.Errorf("values file %q: %w", f, err)
		}
		base = mergeMaps(base, cur)
	}
	if strings.TrimSpace(opts.Values) != "" {
		cur, err := chartutil.ReadValues([]byte(opts.Values))
		if err != nil {
			return nil, fmt.Errorf("values (inline YAML): %w", err)
		}
		base = mergeMaps(base, cur)
	}
	names := make([]string, 0, len(opts.HelmParameters))
	for k := range opts.HelmParameters {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("helm parameter with an empty name (value %q)", opts.HelmParameters[k])
		}
		if err := strvals.ParseInto(k+"="+escapeSetValue(opts.HelmParameters[k]), base); err != nil {
			return nil, fmt.Errorf("helm parameter %s=%q: %w", k, opts.HelmParameters[k], err)
		}
	}
	return base, nil
}

// valuesFilePath resolves a values file name relative to the chart directory and
// refuses names that leave the boundary (by "..", an absolute path or a symbolic
// link) and remote URLs.
func valuesFilePath(dir string, b *boundary, name string) (string, error) {
	boundary := b.root
	const accepted = "a path relative to the chart directory that stays inside the repository"
	if strings.Contains(name, "://") {
		return "", fmt.Errorf("values file %q: remote values files are not fetched by the sidecar (accepted: %s)", name, accepted)
	}
	if strings.TrimSpace(name) == "" || filepath.IsAbs(name) || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("values file %q: invalid path (accepted: %s)", name, accepted)
	}
	p := filepath.Join(dir, filepath.FromSlash(name))
	if !within(boundary, p) {
		return "", fmt.Errorf("values file %q: the path leaves the repository (accepted: %s)", name, accepted)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("values file %q: %w", name, err)
	}
	if !within(b.real, real) {
		return "", fmt.Errorf("values file %q: a symbolic link leads out of the repository (accepted: %s)", name, accepted)
	}
	return real, nil
}

// mergeMaps is helm's pkg/cli/values mergeMaps: b wins, maps merge recursively.
func mergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if v, ok := v.(map[string]interface{}); ok {
			if bv, ok := out[k]; ok {
				if bv, ok := bv.(map[string]interface{}); ok {
					out[k] = mergeMaps(bv, v)
					continue
				}
			}
		}
		out[k] = v
	}
	return out
}

// escapeSetValue escapes commas as Argo CD does before passing --set name=value, so
// a value such as "a,b" stays one value; "{a,b}" is a Helm list and is left alone.
func escapeSetValue(v string) string {
	if strings.HasPrefix(v, "{") && strings.HasSuffix(v, "}") {
		return v
	}
	var b strings.Builder
	var prev rune
	for _, r := range v {
		if r == ',' && prev != '\\' {
			b.WriteString(`\,`)
		} else {
			b.WriteRune(r)
		}
		prev = r
	}
	return b.String()
}
