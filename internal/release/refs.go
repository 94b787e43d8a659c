package release

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/deploy/image"
)

// Ref is one place that names the version users install: the image tag of a manifest
// or a doc (ghcr.io/argocd-image-resolver/argocd-image-resolver:TAG), or the ?ref= of a
// remote Kustomize component or base of this repository.
type Ref struct {
	File string // relative to the module's root, slash-separated
	Line int
	Kind string // "image" or "ref"
	// Version is the tag or ref as written.
	Version string
}

func (r Ref) String() string {
	what := image.Repository + ":" + r.Version
	if r.Kind == "ref" {
		what = "?ref=" + r.Version
	}
	return fmt.Sprintf("%s:%d: %s", r.File, r.Line, what)
}

var (
	imageRefRE     = regexp.MustCompile(regexp.QuoteMeta(image.Repository) + `:([A-Za-z0-9_][A-Za-z0-9_.-]*)`)
	kustomizeRefRE = regexp.MustCompile(regexp.QuoteMeta(strings.TrimPrefix(image.Source, "https://")) + `//[^\s?"'` + "`" + `]*\?(?:[^\s"'#` + "`" + `]*&)?ref=([A-Za-z0-9_][A-Za-z0-9_./-]*)`)
)

// RefFiles are where FindRefs looks, relative to the module's root: the manifests and
// their README (deploy/, not the image's Go code), the docs and the README.
var RefFiles = []string{"deploy", "docs", "README.md"}

// FindRefs lists every Ref in RefFiles under root (YAML, JSON and Markdown files), by
// file and line.
func FindRefs(root string) ([]Ref, error) {
	var refs []Ref
	for _, top := range RefFiles {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			if d.IsDir() {
				if rel == "deploy/image" || d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			switch filepath.Ext(p) {
			case ".yaml", ".yml", ".json", ".md":
			default:
				return nil
			}
			found, err := refsIn(p, rel)
			refs = append(refs, found...)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("release: looking for the version in %s: %w", top, err)
		}
	}
	sort.SliceStable(refs, func(i, j int) bool {
		if refs[i].File != refs[j].File {
			return refs[i].File < refs[j].File
		}
		return refs[i].Line < refs[j].Line
	})
	return refs, nil
}

func refsIn(path, rel string) ([]Ref, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var refs []Ref
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		for _, m := range imageRefRE.FindAllStringSubmatch(sc.Text(), -1) {
			refs = append(refs, Ref{File: rel, Line: n, Kind: "image", Version: m[1]})
		}
		for _, m := range kustomizeRefRE.FindAllStringSubmatch(sc.Text(), -1) {
			refs = append(refs, Ref{File: rel, Line: n, Kind: "ref", Version: m[1]})
		}
	}
	return refs, sc.Err()
}

// CheckVersions checks that every Ref under root names want (vX.Y.Z): the manifests'
// image tag, the docs' ref=. It fails naming each file:line that names another
// version, and if no manifest names the image or no doc a ref= (then it would check
// nothing).
func CheckVersions(root string, want Version) error {
	refs, err := FindRefs(root)
	if err != nil {
		return err
	}
	var bad []string
	kinds := map[string]int{}
	for _, r := range refs {
		kinds[r.Kind]++
		if r.Version != want.String() {
			bad = append(bad, "  "+r.String())
		}
	}
	if len(bad) > 0 {
		places := "places name"
		if len(bad) == 1 {
			places = "place names"
		}
		return fmt.Errorf("release: %d %s another version than %s:\n%s\nmake them name %s, the version of the release", len(bad), places, want, strings.Join(bad, "\n"), want)
	}
	if kinds["image"] == 0 || kinds["ref"] == 0 {
		return errors.New("release: found " + fmt.Sprint(kinds["image"]) + " image tags (" + image.Repository + ":TAG) and " +
			fmt.Sprint(kinds["ref"]) + " ?ref= of this repository in " + strings.Join(RefFiles, ", ") + "; want at least one of each to check")
	}
	return nil
}
