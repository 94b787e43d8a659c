package render

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/argoglob"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/yamlnode"
)

// Files of ours that live in the app directory and are never objects: a directory
// render skips them by name, wherever they are.
const (
	PolicyFileName = ".argocd-image-resolver.yaml"
	PinsFileName   = ".argocd-image-resolver.pins.yaml"
)

// skipRenderingMarker anywhere in a file makes Argo CD (3.x) leave the file out of a
// directory app (skipFileRenderingMarker, reposerver/repository/repository.go).
const skipRenderingMarker = "+argocd:skip-file-rendering"

// manifestName is the file names Argo CD's directory source reads (manifestFile,
// reposerver/repository/repository.go): case-sensitive, hidden files included.
var manifestName = regexp.MustCompile(`^.*\.(yaml|yml|json|jsonnet)$`).MatchString

// renderDirectory reads the manifests of dir as Argo CD's directory source does
// (findManifests, reposerver/repository/repository.go): the files named *.yaml,
// *.yml, *.json (and *.jsonnet, refused) of dir, of its subdirectories too with
// opts.Recurse, hidden ones included, that opts.Exclude does not match and
// opts.Include (when set) does; in the order of a lexical walk (each directory's
// entries sorted by name, a subdirectory's files where its name sorts). Symbolic
// links are followed only to regular files inside dir; a YAML file that is no
// manifest at all (a values file) is skipped, as Argo CD skips it.
func renderDirectory(ctx context.Context, dir string, opts DirectoryOptions) ([]*kyaml.RNode, error) {
	files, err := manifestFiles(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("read application directory: %w", err)
	}
	var out []*kyaml.RNode
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		objs, err := readManifestFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// manifestFile is a file a directory render reads: its path, and its path
// relative to the app directory with "/" between the parts (what the include and
// exclude patterns match, and what errors name).
type manifestFile struct{ path, rel string }

// manifestFiles walks dir as Argo CD's getPotentiallyValidManifests does: a
// subdirectory only with opts.Recurse; per file the name, then links and special
// files (so a link out of dir is an error even when excluded, as there), then the
// patterns, exclude first.
func manifestFiles(dir string, opts DirectoryOptions) ([]manifestFile, error) {
	filter, err := newDirFilter(opts)
	if err != nil {
		return nil, err
	}
	var files []manifestFile
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && !opts.Recurse {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		ok, err := candidate(dir, p, rel, d)
		if err != nil || !ok || !filter.selects(rel) {
			return err
		}
		files = append(files, manifestFile{path: p, rel: rel})
		return nil
	})
	return files, err
}

// candidate reports whether the walk's entry d (not a directory) is a file to read,
// before the patterns: a manifest name and not one of ours; a regular file, or a
// symbolic link to one inside dir. A special file is an error.
func candidate(dir, p, rel string, d fs.DirEntry) (bool, error) {
	if name := d.Name(); !manifestName(name) || name == PolicyFileName || name == PinsFileName {
		return false, nil
	}
	if d.Type()&fs.ModeSymlink != 0 {
		return linkedFileInside(dir, p)
	}
	if !d.Type().IsRegular() {
		return false, fmt.Errorf("%s: %w (%s), refused", rel, ErrNotRegular, fileType(d.Type()))
	}
	return true, nil
}

// dirFilter is the include and exclude patterns, compiled; nil when not set.
type dirFilter struct{ include, exclude *argoglob.Pattern }

func newDirFilter(opts DirectoryOptions) (dirFilter, error) {
	var f dirFilter
	var err error
	if opts.Include != "" {
		if f.include, err = argoglob.Compile(opts.Include); err != nil {
			return f, fmt.Errorf("directory include pattern %q: %w", opts.Include, err)
		}
	}
	if opts.Exclude != "" {
		if f.exclude, err = argoglob.Compile(opts.Exclude); err != nil {
			return f, fmt.Errorf("directory exclude pattern %q: %w", opts.Exclude, err)
		}
	}
	return f, nil
}

// selects reports whether the file at rel is read: not excluded, and included when
// an include pattern is set.
func (f dirFilter) selects(rel string) bool {
	if f.exclude != nil && f.exclude.Match(rel) {
		return false
	}
	return f.include == nil || f.include.Match(rel)
}

// readManifestFile reads the objects of one file: none when it holds Argo CD's
// skip marker; a .json file as one JSON object, a .jsonnet file refused, any other
// as YAML documents.
func readManifestFile(f manifestFile) ([]*kyaml.RNode, error) {
	real, err := filepath.EvalSymlinks(f.path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.rel, err)
	}
	data, err := readRegular(real, f.rel)
	if err != nil {
		return nil, err
	}
	if bytes.Contains(data, []byte(skipRenderingMarker)) {
		return nil, nil
	}
	switch {
	case strings.HasSuffix(f.rel, ".jsonnet"):
		return nil, fmt.Errorf("%s: %w: Jsonnet is not evaluated (Argo CD evaluates it in a directory app); leave the file out with an exclude pattern (parameter directory-exclude) or mark it %s", f.rel, ErrUnsupported, skipRenderingMarker)
	case strings.HasSuffix(f.rel, ".json"):
		return parseJSONManifest(f.rel, data)
	}
	return parseYAMLManifest(f.rel, data)
}

// parseYAMLManifest reads the YAML documents of a manifest file as Argo CD does
// (getObjsFromYAMLOrJSON): empty documents are dropped. At the first document that
// does not parse or is no object (a mapping with a kind) the file is an error if a
// document before it was an object or if the file looks like a manifest (it holds
// "apiVersion:", "kind:" and "metadata:"), and is skipped whole otherwise.
func parseYAMLManifest(rel string, data []byte) ([]*kyaml.RNode, error) {
	dec := kyaml.NewDecoder(bytes.NewReader(data))
	var out []*kyaml.RNode
	decoded := false
	for doc := 1; ; doc++ {
		var n kyaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		top := documentContent(&n)
		if err == nil && top != nil {
			_, err = object(top)
		}
		if err != nil {
			if !decoded && !looksLikeManifest(data) {
				return nil, nil
			}
			return nil, fmt.Errorf("%s: document %d: %w", rel, doc, err)
		}
		objs, err := documentObjects(&n)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", rel, doc, err)
		}
		decoded = decoded || top != nil
		out = append(out, objs...)
	}
}

// documentContent is the content of a decoded document; nil for an empty one
// (nothing, only comments, null).
func documentContent(n *kyaml.Node) *kyaml.Node {
	if n.Kind == kyaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	if yamlnode.IsNull(n) {
		return nil
	}
	return n
}

// looksLikeManifest is Argo CD's test of a YAML file whose first document is no
// object: an error if it names all three keys, else not a manifest.
func looksLikeManifest(data []byte) bool {
	for _, k := range []string{"apiVersion:", "kind:", "metadata:"} {
		if !bytes.Contains(data, []byte(k)) {
			return false
		}
	}
	return true
}

// parseJSONManifest reads a .json manifest file as Argo CD does: one JSON object
// (a kind: List is flattened); nothing, null, or anything after the object is an
// error ("Only single objects are allowed in JSON files").
func parseJSONManifest(rel string, data []byte) ([]*kyaml.RNode, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s: no JSON object in the file", rel)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := jsonNode(dec)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		_, err = object(n)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: JSON value 1: %w", rel, err)
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) > 0 {
		return nil, fmt.Errorf("%s: more than one JSON value; a JSON file holds one object, as Argo CD reads it (several objects: a kind: List, or a YAML file)", rel)
	}
	objs, err := documentObjects(n)
	if err != nil {
		return nil, fmt.Errorf("%s: JSON value 1: %w", rel, err)
	}
	return objs, nil
}

// linkedFileInside reports whether the symbolic link p points at a regular file
// inside dir. Links to directories are not followed (as a walk does not), links that
// leave dir are an error, links to special files (named pipes, devices) are an
// error, dangling links are skipped.
func linkedFileInside(dir, p string) (bool, error) {
	target, err := filepath.EvalSymlinks(p)
	if err != nil {
		return false, nil
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false, err
	}
	if !within(realDir, target) {
		rel, _ := filepath.Rel(dir, p)
		return false, fmt.Errorf("%s: symbolic link points outside the application directory", filepath.ToSlash(rel))
	}
	fi, err := os.Stat(target)
	if err != nil || fi.IsDir() {
		return false, nil
	}
	if !fi.Mode().IsRegular() {
		rel, _ := filepath.Rel(dir, p)
		return false, fmt.Errorf("%s: %w (%s), refused", filepath.ToSlash(rel), ErrNotRegular, fileType(fi.Mode()))
	}
	return true, nil
}

// within reports whether path p is root or below it (both cleaned, absolute).
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
