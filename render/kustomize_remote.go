package render

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// remoteEntries checks the remote entries of a kustomization (or of a built-in
// plugin's configuration) read from path: with no allowed host each is refused;
// otherwise each is fetched and the returned file names it by the path where the
// fetched tree appears beside path, so that kustomize itself never reaches the
// network.
func (f *guardedFS) remoteEntries(path string, data []byte, kustomization bool) ([]byte, error) {
	var docs []*kyaml.RNode
	var refs []pathRef
	if kustomization {
		rn, err := kyaml.Parse(string(data))
		if err != nil || rn.YNode().Kind != kyaml.MappingNode {
			return data, nil // kustomize reports it
		}
		docs, refs = []*kyaml.RNode{rn}, kustomizationRefs(rn)
	} else {
		if !mayBePluginConfig(data) {
			return data, nil
		}
		var complete bool
		docs, complete = parseYAMLDocs(data)
		refs = pluginConfigRefs(docs)
		if !complete {
			docs = nil // not rewritten: a document that does not parse would be lost
		}
	}
	_, mount, fetchedTree := f.virtual(path)
	changed := false
	for _, r := range refs {
		if !looksRemote(r.ref) {
			if kustomization && fetchedTree && leavesTree(filepath.Dir(path), mount, r.ref) {
				// as kustomize keeps a cloned repository's kustomizations inside it
				return nil, fmt.Errorf("%s: %s entry %q: %w: it leaves the fetched repository", f.name(path), r.field, r.ref, ErrRemoteFetch)
			}
			continue
		}
		local, err := f.fetchEntry(path, r)
		if err != nil {
			return nil, fmt.Errorf("%s: %s entry %q: %w", f.name(path), r.field, redactRef(r.ref), err)
		}
		if docs == nil {
			return nil, fmt.Errorf("%s: %s entry %q: %w: the file does not parse as YAML", f.name(path), r.field, redactRef(r.ref), ErrRemoteFetch)
		}
		r.node.Value, r.node.Style, r.node.Tag = r.key+local, 0, "!!str"
		changed = true
	}
	if !changed {
		return data, nil
	}
	var out bytes.Buffer
	for i, d := range docs {
		if i > 0 {
			out.WriteString("---\n")
		}
		s, err := d.String()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name(path), err)
		}
		out.WriteString(s)
	}
	return out.Bytes(), nil
}

// leavesTree reports whether the local entry ref of a kustomization in dir, inside
// the fetched tree at mount, names a path outside that tree. Inline content (a
// generator's literal, YAML in a transformers entry) names no path.
func leavesTree(dir, mount, ref string) bool {
	ref = strings.TrimSpace(ref)
	if ref == "" || strings.Contains(ref, "\n") {
		return false
	}
	if filepath.IsAbs(ref) {
		return true
	}
	p := filepath.Join(dir, filepath.FromSlash(ref))
	return p != mount && !strings.HasPrefix(p, mount+string(filepath.Separator))
}

// fetchEntry fetches the remote entry r of the file at path and returns the path,
// relative to the file's directory, where kustomize finds it. Each entry appears
// at a directory of its own (remoteDirName/<id of the entry>), so the path of a
// file says which remote entries led to it: a git base that one of them is
// already (the same commit and directory, however its URL is spelled) is a
// cycle, refused at once with the chain of entries.
func (f *guardedFS) fetchEntry(path string, r pathRef) (string, error) {
	if f.remote == nil {
		return "", fmt.Errorf("%w (git or HTTP URLs: no network and no git in the sidecar unless the operator lists the host in kustomizeRemoteHosts); vendor it into the repository and refer to it by a relative path", ErrRemote)
	}
	t, err := f.remote.get(r.ref, r.role)
	if err != nil {
		return "", err
	}
	m := &mountedTree{remoteTree: t, entry: redactRef(r.ref)}
	if t.commit != "" {
		m.base = t.commit + "//" + t.sub
	}
	if err := f.checkCycle(path, m); err != nil {
		return "", err
	}
	dir := treeID(t.id + "//" + t.sub)
	mount := filepath.Join(filepath.Dir(path), remoteDirName, dir)
	f.mu.Lock()
	if f.mounts == nil {
		f.mounts = map[string]*mountedTree{}
	}
	f.mounts[mount] = m
	f.mu.Unlock()
	return filepath.ToSlash(filepath.Join(remoteDirName, dir, t.sub)), nil
}

// mountedTree is a fetched tree where kustomize sees it, for one remote entry.
type mountedTree struct {
	*remoteTree
	entry string // the entry as written, without a URL's password
	base  string // a git base: "<commit>//<directory>"; "" for a file
}

// checkCycle refuses m, an entry of the file at path, when it is a git base that
// led to path already.
func (f *guardedFS) checkCycle(path string, m *mountedTree) error {
	if m.base == "" {
		return nil
	}
	chain := f.entriesTo(path)
	for i, c := range chain {
		if c.base != m.base {
			continue
		}
		var names []string
		for _, e := range append(chain[i:], m) {
			names = append(names, e.entry)
		}
		same := ""
		if c.entry != m.entry {
			same = fmt.Sprintf("; %s is %s again", m.entry, c.entry)
		}
		return fmt.Errorf("%w: a cycle of remote bases: %s (commit %s, directory %q%s)",
			ErrRemoteFetch, strings.Join(names, " -> "), m.commit, "/"+m.sub, same)
	}
	return nil
}

// entriesTo are the remote entries that led to path, the outermost first.
func (f *guardedFS) entriesTo(path string) []*mountedTree {
	if !strings.Contains(path, remoteDirName) {
		return nil
	}
	p := filepath.Clean(path)
	f.mu.Lock()
	defer f.mu.Unlock()
	var dirs []string
	for d := range f.mounts {
		if strings.HasPrefix(p, d+string(filepath.Separator)) {
			dirs = append(dirs, d)
		}
	}
	slices.SortFunc(dirs, func(a, b string) int { return len(a) - len(b) })
	out := make([]*mountedTree, len(dirs))
	for i, d := range dirs {
		out[i] = f.mounts[d]
	}
	return out
}

// virtual returns where path is in the fetched trees' memory, when it is inside
// one of them, and the directory (mount) where that tree appears.
func (f *guardedFS) virtual(path string) (memPath, mount string, ok bool) {
	if f.remote == nil || !strings.Contains(path, remoteDirName) {
		return "", "", false
	}
	p := filepath.Clean(path)
	f.mu.Lock()
	defer f.mu.Unlock()
	// the deepest mount: a tree fetched from inside another appears inside it
	for m, t := range f.mounts {
		if len(m) <= len(mount) {
			continue
		}
		if p == m {
			memPath, mount = "/"+t.id, m
		} else if rest, ok := strings.CutPrefix(p, m+string(filepath.Separator)); ok {
			memPath, mount = "/"+t.id+"/"+filepath.ToSlash(rest), m
		}
	}
	return memPath, mount, mount != ""
}

// mountedPath maps a path of the fetched trees' memory back to where kustomize sees it,
// under the same mount, so that a kustomization's root and the files below it
// keep one spelling.
func mountedPath(mount, memPath string) string {
	_, rest, _ := strings.Cut(strings.TrimPrefix(memPath, "/"), "/")
	if rest == "" {
		return mount
	}
	return filepath.Join(mount, filepath.FromSlash(rest))
}

// name is path as errors show it: relative to the repository, or, inside a fetched
// tree, the URL it came from and the path inside it.
func (f *guardedFS) name(path string) string {
	if v, mount, ok := f.virtual(path); ok {
		_, rest, _ := strings.Cut(strings.TrimPrefix(v, "/"), "/")
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.mounts[mount].source + "//" + rest
	}
	return f.b.name(path)
}

// redactRef is a remote entry without the password of its URL.
func redactRef(ref string) string {
	prefix, s := "", ref
	if len(s) >= 5 && strings.EqualFold(s[:5], "git::") {
		prefix, s = s[:5], s[5:]
	}
	if spec, err := parseRemoteRef(s); err == nil && spec.url != nil && spec.url.User != nil {
		return prefix + redactedURL(spec.url)
	}
	return ref
}
