package render

import (
	"bytes"
	"context"
	"fmt"

	"path/filepath"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	commonutil "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"helm.sh/helm/v4/pkg/strvals"
	k8sversion "k8s.io/apimachinery/pkg/util/version"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// renderHelm renders the chart in dir the way Argo CD runs
//
//	helm template . --name-template APP --namespace NS --kube-version V \
//	  --values F... --values <inline values> --set K=V... --api-versions A... --include-crds
//
// in-process with the Helm 4 SDK (the Helm of Argo CD v3.5 and later), through chart
// loading and the template engine alone, as `helm template` renders (client only, no
// release storage), and keeps the order in which `helm template` prints: CRDs, the
// manifests in install order, then the hooks.
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
	if err := addLocalDependencies(chrt, dir, b); err != nil {
		return nil, fmt.Errorf("Helm chart %q: %w", name, err)
	}
	if missing := missingDependencies(chrt); len(missing) > 0 {
		return nil, fmt.Errorf("Helm chart %q: Chart.yaml declares dependencies that are not in charts/ (%s): %w: the sidecar does not download charts; vendor them: run `helm dependency build` and commit the charts/ directory (a file:// dependency inside the repository is built from its directory)", name, strings.Join(missing, ", "), ErrUnsupported)
	}
	vals, err := helmValues(dir, b, opts)
	if err != nil {
		return nil, err
	}
	caps, err := helmCapabilities(opts)
	if err != nil {
		return nil, err
	}
	release := common.ReleaseOptions{Name: releaseName(opts.AppName, dir), Namespace: opts.Namespace, Revision: 1, IsInstall: true}
	if release.Namespace == "" {
		release.Namespace = "default"
	}
	out, err := bounded(ctx, func() ([]byte, error) { return helmTemplate(ctx, chrt, vals, release, caps) })
	if err != nil {
		return nil, fmt.Errorf("helm template (chart %q): %w", name, err)
	}
	return parseYAML("helm template output", out)
}

// helmCapabilities are Helm's .Capabilities as Argo CD's `helm template --kube-version
// V --api-versions A...` sets them: Helm's defaults, the version as Argo CD normalises
// it, and the given API versions added to the built-in ones.
func helmCapabilities(opts Options) (*common.Capabilities, error) {
	caps := common.DefaultCapabilities.Copy()
	if opts.KubeVersion != "" {
		const accepted = "a Kubernetes version such as 1.31 or v1.31.2"
		// Argo CD v3.5 and later pass Helm and plugins the cluster's version as
		// util/version.ParseGeneric reads it (1.31.14, suffixes dropped); v2 passes
		// "1.31", which its Helm 3 printed as v1.31.0. Major.minor.patch, the patch 0
		// when not given, agrees with the native render on both.
		generic, err := k8sversion.ParseGeneric(opts.KubeVersion)
		if err != nil {
			return nil, fmt.Errorf("kube version %q: %w (accepted: %s)", opts.KubeVersion, err, accepted)
		}
		kv, err := common.ParseKubeVersion(fmt.Sprintf("%d.%d.%d", generic.Major(), generic.Minor(), generic.Patch()))
		if err != nil {
			return nil, fmt.Errorf("kube version %q: %w (accepted: %s)", opts.KubeVersion, err, accepted)
		}
		caps.KubeVersion = *kv
	}
	caps.APIVersions = append(slices.Clone(caps.APIVersions), opts.APIVersions...)
	return caps, nil
}

// helmTemplate is what `helm template --include-crds` prints for the chart (Helm 4.3's
// Install.RunWithContext and Configuration.renderResources with a client-only dry run,
// and cmd/template.go's printing): the CRDs of crds/ directories, the manifests sorted
// in install order, then the hooks, each after "---" and a "# Source:" line.
func helmTemplate(ctx context.Context, chrt *chart.Chart, vals map[string]any, release common.ReleaseOptions, caps *common.Capabilities) ([]byte, error) {
	if err := chartutil.ValidateReleaseName(release.Name); err != nil {
		return nil, fmt.Errorf("release name %q: %w", release.Name, err)
	}
	if err := chartutil.ProcessDependencies(chrt, vals); err != nil {
		return nil, fmt.Errorf("chart dependencies processing failed: %w", err)
	}
	if kv := chrt.Metadata.KubeVersion; kv != "" && !chartutil.IsCompatibleRange(kv, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", kv, caps.KubeVersion.Version)
	}
	top, err := commonutil.ToRenderValuesWithSchemaValidation(chrt, vals, release, caps, true)
	if err != nil {
		return nil, err
	}
	if err := validateSchemas(chrt, top["Values"].(common.Values)); err != nil {
		return nil, fmt.Errorf("values don't meet the specifications of the schema(s) in the following chart(s):\n%w", err)
	}
	files, err := engine.Engine{}.RenderWithContext(ctx, chrt, top)
	if err != nil {
		return nil, err
	}
	for k := range files {
		if strings.HasSuffix(k, "NOTES.txt") {
			delete(files, k)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	var doc bytes.Buffer
	for _, crd := range chrt.CRDObjects() {
		fmt.Fprintf(&doc, "---\n# Source: %s\n%s\n", crd.Filename, string(crd.File.Data))
	}
	for _, m := range manifests {
		fmt.Fprintf(&doc, "---\n# Source: %s\n%s\n", m.Name, m.Content)
	}
	var out bytes.Buffer
	fmt.Fprintln(&out, strings.TrimSpace(doc.String()))
	for _, h := range hooks {
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return out.Bytes(), nil
}

// missingDependencies names the dependencies Chart.yaml declares that are not among
// the chart's loaded subcharts (Helm's action.CheckDependencies).
func missingDependencies(chrt *chart.Chart) []string {
	var missing []string
	for _, d := range chrt.Metadata.Dependencies {
		if !slices.ContainsFunc(chrt.Dependencies(), func(c *chart.Chart) bool { return c.Name() == d.Name }) {
			missing = append(missing, d.Name)
		}
	}
	return missing
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
func helmValues(dir string, b *boundary, opts Options) (map[string]any, error) {
	base := map[string]any{}
	for _, f := range opts.ValuesFiles {
		p, err := valuesFilePath(dir, b, f)
		if err != nil {
			return nil, err
		}
		data, err := readRegular(p, fmt.Sprintf("values file %q", f))
		if err != nil {
			return nil, err
		}
		cur, err := common.ReadValues(data)
		if err != nil {
			return nil, fmt.Errorf("values file %q: %w", f, err)
		}
		base = mergeMaps(base, cur)
	}
	if strings.TrimSpace(opts.Values) != "" {
		cur, err := common.ReadValues([]byte(opts.Values))
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
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if v, ok := v.(map[string]any); ok {
			if bv, ok := out[k]; ok {
				if bv, ok := bv.(map[string]any); ok {
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
