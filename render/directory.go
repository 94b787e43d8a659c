package render

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// Files of ours that live in the app directory and are never objects. They are
// hidden files and skipped as such; the names are kept for documentation and tests.
const (
	PolicyFileName = ".argocd-image-resolver.yaml"
	PinsFileName   = ".argocd-image-resolver.pins.yaml"
)

// renderDirectory reads every *.yaml, *.yml and *.json file under dir, recursively,
// in the order of a lexical walk (each directory's entries sorted by name, as Argo CD
// walks). Hidden files and directories are skipped; symbolic links are followed only
// to files inside dir.
func renderDirectory(ctx context.Context, dir string) ([]*kyaml.RNode, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !manifestExt(d.Name()) {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			ok, err := linkedFileInside(dir, p)
			if err != nil || !ok {
				return err
			}
		} else if !d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			return fmt.Errorf("%s: %w (%s), refused", filepath.ToSlash(rel), ErrNotRegular, fileType(d.Type()))
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read application directory: %w", err)
	}
	var out []*kyaml.RNode
	for _, p := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		data, err := readRegular(real, rel)
		if err != nil {
			return nil, err
		}
		var objs []*kyaml.RNode
		if strings.EqualFold(filepath.Ext(p), ".json") {
			objs, err = parseJSON(rel, data)
		} else {
			objs, err = parseYAML(rel, data)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

func manifestExt(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
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
