package render

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// renderKustomize runs `kustomize build dir` in-process: load restrictor root-only,
// plugins disabled, no Helm, output order as the kustomize CLI prints it (legacy
// order unless the kustomization sets sortOptions).
func renderKustomize(ctx context.Context, dir string) ([]*kyaml.RNode, error) {
	fs := &guardedFS{FileSystem: filesys.MakeFsOnDisk(), root: dir}
	m, err := krusty.MakeKustomizer(kustomizeOptions()).Run(fs, dir)
	if ferr := fs.refused(); ferr != nil {
		return nil, ferr
	}
	if err != nil {
		msg := err.Error()
		switch {
		case types.IsErrOnlyBuiltinPluginsAllowed(err) || strings.Contains(msg, "external plugins disabled"):
			return nil, fmt.Errorf("kustomize build: %w: the kustomization uses a generator, transformer or validator plugin (exec, Go or KRM function); plugins are disabled in the sidecar, use built-in transformers: %v", ErrUnsupported, err)
		case strings.Contains(msg, "--enable-helm"):
			return nil, fmt.Errorf("kustomize build: %w: the kustomization inflates Helm charts (helmCharts); the sidecar does not run Helm inside Kustomize, point the application at the chart instead: %v", ErrUnsupported, err)
		}
		return nil, fmt.Errorf("kustomize build: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []*kyaml.RNode
	for i, res := range m.ToRNodeSlice() {
		objs, err := printedObjects(res)
		if err != nil {
			return nil, fmt.Errorf("kustomize build: resource %d (%s): %w", i+1, objectRef(res), err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// printedObjects returns res as `kustomize build` prints it (printedForm), with a
// List flattened as parseYAML flattens one in the printed stream.
func printedObjects(res *kyaml.RNode) ([]*kyaml.RNode, error) {
	quoteEmptyInFlow(res.YNode(), false)
	v, err := res.Map()
	if err != nil {
		return nil, err
	}
	n, err := printedForm(v)
	if err != nil {
		return nil, err
	}
	return documentObjects(n)
}

// kustomizeOptions are those of the sidecar's `kustomize build`.
func kustomizeOptions() *krusty.Options {
	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = types.LoadRestrictionsRootOnly
	opts.PluginConfig = types.DisabledPluginConfig()
	opts.Reorder = krusty.ReorderOptionUnspecified // what `kustomize build` passes by default
	return opts
}

// guardedFS refuses, with a clear error, a kustomization that inflates Helm charts,
// when kustomize reads it, so the message names the file.
type guardedFS struct {
	filesys.FileSystem
	root string // the app directory, to name files relative to it
	mu   sync.Mutex
	err  error
}

func (f *guardedFS) ReadFile(path string) ([]byte, error) {
	data, err := f.FileSystem.ReadFile(path)
	if err != nil || !isKustomizationName(filepath.Base(path)) {
		return data, err
	}
	if rn, perr := kyaml.Parse(string(data)); perr == nil && rn.YNode().Kind == kyaml.MappingNode {
		for _, field := range []string{"helmCharts", "helmChartInflationGenerator"} {
			if v := rn.Field(field); v != nil && !isNull(v.Value.YNode()) {
				name := path
				if rel, err := filepath.Rel(f.root, path); err == nil {
					name = filepath.ToSlash(rel)
				}
				e := fmt.Errorf("%s: %w: the kustomization uses %s; the sidecar does not run Helm inside Kustomize (no --enable-helm), point the application at the chart directory instead", name, ErrUnsupported, field)
				f.mu.Lock()
				if f.err == nil {
					f.err = e
				}
				f.mu.Unlock()
				return nil, e
			}
		}
	}
	return data, nil
}

func (f *guardedFS) refused() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func isKustomizationName(base string) bool {
	for _, n := range kustomizationNames {
		if base == n {
			return true
		}
	}
	return false
}
