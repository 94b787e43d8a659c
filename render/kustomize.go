package render

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// renderKustomize runs `kustomize build dir` in-process: load restrictor root-only,
// plugins disabled, no Helm, output order as the kustomize CLI prints it (legacy
// order unless the kustomization sets sortOptions).
//
// Files are read only inside the repository checkout b. When no repository root
// beyond the app directory is known (Options.RepoRoot empty or the app directory
// itself, as for a local run without ARGOCD_APP_SOURCE_PATH), the boundary is the
// git checkout around the app directory (the nearest directory holding .git), so
// overlays keep reaching their sibling bases; outside any checkout it stays the
// app directory.
func renderKustomize(ctx context.Context, dir string, b *boundary) ([]*kyaml.RNode, error) {
	if b.root == dir {
		if top := gitCheckoutRoot(dir); top != "" {
			wider, err := newBoundary(top, dir)
			if err != nil {
				return nil, err
			}
			b = wider
		}
	}
	fs := &guardedFS{FileSystem: filesys.MakeFsOnDisk(), root: dir, b: b}
	m, err := bounded(ctx, func() (resmap.ResMap, error) { return krusty.MakeKustomizer(kustomizeOptions()).Run(fs, dir) })
	if errors.Is(err, ErrDeadline) {
		return nil, fmt.Errorf("kustomize build: %w", err)
	}
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

// gitCheckoutRoot is the nearest directory at or above dir that holds .git, or "".
func gitCheckoutRoot(dir string) string {
	for d := dir; ; {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d
		}
		up := filepath.Dir(d)
		if up == d {
			return ""
		}
		d = up
	}
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

// guardedFS is kustomize's file system confined to the repository checkout: every
// path is checked after its symbolic links against the repository root, special files
// are refused before they are read, nothing is written. It refuses, with a clear
// error naming the file, a kustomization that inflates Helm charts or refers to a
// remote (git or HTTP) resource, when kustomize reads it: kustomize clones with the
// git program and fetches HTTP itself, outside any file system, so such references
// must be refused before kustomize sees them. The first refusal is kept, as kustomize
// wraps or replaces the errors of its file system.
type guardedFS struct {
	filesys.FileSystem
	root string // the app directory, to name files relative to it
	b    *boundary
	mu   sync.Mutex
	err  error
}

func (f *guardedFS) refuse(e error) error {
	f.mu.Lock()
	if f.err == nil {
		f.err = e
	}
	f.mu.Unlock()
	return e
}

// inside resolves path inside the repository, recording a refusal.
func (f *guardedFS) inside(path string) (string, error) {
	real, err := f.b.resolve(path)
	if err != nil && errors.Is(err, ErrOutsideRepository) {
		return "", f.refuse(fmt.Errorf("kustomize: %w", err))
	}
	return real, err
}

var errReadOnly = errors.New("the sidecar's kustomize build writes no files")

func (f *guardedFS) Create(string) (filesys.File, error) { return nil, errReadOnly }
func (f *guardedFS) Mkdir(string) error                  { return errReadOnly }
func (f *guardedFS) MkdirAll(string) error               { return errReadOnly }
func (f *guardedFS) RemoveAll(string) error              { return errReadOnly }
func (f *guardedFS) WriteFile(string, []byte) error      { return errReadOnly }

func (f *guardedFS) Open(path string) (filesys.File, error) {
	real, err := f.inside(path)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		return nil, f.refuse(fmt.Errorf("kustomize: %s: %w (%s), refused", f.b.name(path), ErrNotRegular, fileType(fi.Mode())))
	}
	return f.FileSystem.Open(real)
}

func (f *guardedFS) IsDir(path string) bool {
	real, err := f.b.resolve(path)
	return err == nil && f.FileSystem.IsDir(real)
}

func (f *guardedFS) Exists(path string) bool {
	real, err := f.b.resolve(path)
	return err == nil && f.FileSystem.Exists(real)
}

func (f *guardedFS) ReadDir(path string) ([]string, error) {
	real, err := f.inside(path)
	if err != nil {
		return nil, err
	}
	return f.FileSystem.ReadDir(real)
}

func (f *guardedFS) CleanedAbs(path string) (filesys.ConfirmedDir, string, error) {
	if _, err := f.inside(path); err != nil {
		return "", "", err
	}
	return f.FileSystem.CleanedAbs(path)
}

func (f *guardedFS) Glob(pattern string) ([]string, error) {
	all, err := f.FileSystem.Glob(pattern)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range all {
		if _, err := f.inside(p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func (f *guardedFS) Walk(path string, walkFn filepath.WalkFunc) error {
	if _, err := f.inside(path); err != nil {
		return err
	}
	return f.FileSystem.Walk(path, walkFn)
}

func (f *guardedFS) ReadFile(path string) ([]byte, error) {
	real, err := f.inside(path)
	if err != nil {
		return nil, err
	}
	data, err := readRegular(real, f.b.name(path))
	if err != nil {
		if errors.Is(err, ErrNotRegular) {
			return nil, f.refuse(fmt.Errorf("kustomize: %w", err))
		}
		return nil, err
	}
	if !isKustomizationName(filepath.Base(path)) {
		if err := remoteInPluginConfig(f.b.name(path), data); err != nil {
			return nil, f.refuse(err)
		}
		return data, nil
	}
	if err := remoteInKustomization(f.b.name(path), data); err != nil {
		return nil, f.refuse(err)
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
