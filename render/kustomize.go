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

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/yamlnode"
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
//
// Remote resources and bases are refused unless their host is in hosts
// (kustomizeRemoteHosts); then they are fetched by the render itself, bounded, and
// kustomize reads them from memory (see remoteFetcher).
func renderKustomize(ctx context.Context, dir string, b *boundary, hosts []RemoteHost) ([]*kyaml.RNode, []RemoteInput, error) {
	if b.root == dir {
		if top := gitCheckoutRoot(dir); top != "" {
			wider, err := newBoundary(top, dir)
			if err != nil {
				return nil, nil, err
			}
			b = wider
		}
	}
	fetcher := newRemoteFetcher(ctx, hosts)
	defer fetcher.close()
	fs := &guardedFS{FileSystem: filesys.MakeFsOnDisk(), root: dir, b: b, remote: fetcher}
	m, err := bounded(ctx, func() (resmap.ResMap, error) { return krusty.MakeKustomizer(kustomizeOptions()).Run(fs, dir) })
	if errors.Is(err, ErrDeadline) {
		return nil, nil, fmt.Errorf("kustomize build: %w", err)
	}
	if ferr := fs.refused(); ferr != nil {
		return nil, nil, ferr
	}
	if err != nil {
		msg := err.Error()
		switch {
		case types.IsErrOnlyBuiltinPluginsAllowed(err) || strings.Contains(msg, "external plugins disabled"):
			return nil, nil, fmt.Errorf("kustomize build: %w: the kustomization uses a generator, transformer or validator plugin (exec, Go or KRM function); plugins are disabled in the sidecar, use built-in transformers: %v", ErrUnsupported, err)
		case strings.Contains(msg, "--enable-helm"):
			return nil, nil, fmt.Errorf("kustomize build: %w: the kustomization inflates Helm charts (helmCharts); the sidecar does not run Helm inside Kustomize, point the application at the chart instead: %v", ErrUnsupported, err)
		}
		return nil, nil, fmt.Errorf("kustomize build: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	var out []*kyaml.RNode
	for i, res := range m.ToRNodeSlice() {
		objs, err := printedObjects(res)
		if err != nil {
			return nil, nil, fmt.Errorf("kustomize build: resource %d (%s): %w", i+1, objectRef(res), err)
		}
		out = append(out, objs...)
	}
	return out, fetcher.inputs(), nil
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
// must be refused before kustomize sees them. A remote entry on an allowed host is
// fetched instead (remoteFetcher) and the kustomization kustomize reads names it by
// a path under remoteDirName beside it, which this file system serves from memory.
// The first refusal is kept, as kustomize wraps or replaces the errors of its file
// system.
type guardedFS struct {
	filesys.FileSystem
	root   string // the app directory, to name files relative to it
	b      *boundary
	remote *remoteFetcher // nil: no remote host allowed
	mu     sync.Mutex
	err    error
	mounts map[string]*mountedTree // fetched trees by the directory they appear at
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
	if v, _, ok := f.virtual(path); ok {
		return f.remote.mem.Open(v)
	}
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
	if v, _, ok := f.virtual(path); ok {
		return f.remote.mem.IsDir(v)
	}
	real, err := f.b.resolve(path)
	return err == nil && f.FileSystem.IsDir(real)
}

func (f *guardedFS) Exists(path string) bool {
	if v, _, ok := f.virtual(path); ok {
		return f.remote.mem.Exists(v)
	}
	real, err := f.b.resolve(path)
	return err == nil && f.FileSystem.Exists(real)
}

func (f *guardedFS) ReadDir(path string) ([]string, error) {
	if v, _, ok := f.virtual(path); ok {
		return f.remote.mem.ReadDir(v)
	}
	real, err := f.inside(path)
	if err != nil {
		return nil, err
	}
	return f.FileSystem.ReadDir(real)
}

func (f *guardedFS) CleanedAbs(path string) (filesys.ConfirmedDir, string, error) {
	if v, mount, ok := f.virtual(path); ok {
		d, name, err := f.remote.mem.CleanedAbs(v)
		if err != nil {
			return "", "", err
		}
		return filesys.ConfirmedDir(mountedPath(mount, string(d))), name, nil
	}
	if _, err := f.inside(path); err != nil {
		return "", "", err
	}
	return f.FileSystem.CleanedAbs(path)
}

func (f *guardedFS) Glob(pattern string) ([]string, error) {
	if v, mount, ok := f.virtual(pattern); ok {
		all, err := f.remote.mem.Glob(v)
		for i := range all {
			all[i] = mountedPath(mount, all[i])
		}
		return all, err
	}
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
	if v, mount, ok := f.virtual(path); ok {
		return f.remote.mem.Walk(v, func(p string, info os.FileInfo, err error) error {
			return walkFn(mountedPath(mount, p), info, err)
		})
	}
	if _, err := f.inside(path); err != nil {
		return err
	}
	return f.FileSystem.Walk(path, walkFn)
}

func (f *guardedFS) ReadFile(path string) ([]byte, error) {
	var data []byte
	if v, _, ok := f.virtual(path); ok {
		d, err := f.remote.mem.ReadFile(v)
		if err != nil {
			return nil, err
		}
		data = d
	} else {
		real, err := f.inside(path)
		if err != nil {
			return nil, err
		}
		if data, err = readRegular(real, f.b.name(path)); err != nil {
			if errors.Is(err, ErrNotRegular) {
				return nil, f.refuse(fmt.Errorf("kustomize: %w", err))
			}
			return nil, err
		}
	}
	kustomization := isKustomizationName(filepath.Base(path))
	data, err := f.remoteEntries(path, data, kustomization)
	if err != nil {
		return nil, f.refuse(err)
	}
	if !kustomization {
		return data, nil
	}
	if rn, perr := kyaml.Parse(string(data)); perr == nil && rn.YNode().Kind == kyaml.MappingNode {
		for _, field := range []string{"helmCharts", "helmChartInflationGenerator"} {
			if v := rn.Field(field); v != nil && !yamlnode.IsNull(v.Value.YNode()) {
				name := f.name(path)
				if _, _, virtual := f.virtual(path); !virtual {
					if rel, err := filepath.Rel(f.root, path); err == nil {
						name = filepath.ToSlash(rel) // relative to the app, as the app's owner reads it
					}
				}
				return nil, f.refuse(fmt.Errorf("%s: %w: the kustomization uses %s; the sidecar does not run Helm inside Kustomize (no --enable-helm), point the application at the chart directory instead", name, ErrUnsupported, field))
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
