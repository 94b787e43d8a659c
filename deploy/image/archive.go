package image

// The image as one tar (WriteArchive), and its check (Verify): the layout written by
// WriteLayout, with a docker manifest.json, in reproducible bytes.

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// manifestJSON is one entry of a `docker save` tarball's manifest.json.
type manifestJSON struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// WriteArchive writes the OCI layout at layoutDir (WriteLayout's, of ref) to path as
// one tar: the layout's files as they are, which OCI tools read as an archive of the
// layout (every platform and the SBOMs), and a `docker save` manifest.json naming the
// linux/loadArch image ref, which `docker load` and `crane push` read (one platform:
// a Docker engine's image store keeps one image per tag). Entries are sorted and
// dated 1970, so the same layout gives the same bytes.
func WriteArchive(path, layoutDir string, ref name.Tag, loadArch string) error {
	idx, err := ReadLayout(layoutDir, ref)
	if err != nil {
		return err
	}
	var load v1.Image
	var archs []string
	for _, p := range idx.Platforms {
		archs = append(archs, p.Platform.Architecture)
		if p.Platform.OS == "linux" && p.Platform.Architecture == loadArch {
			load = p.Image
		}
	}
	if load == nil {
		return fmt.Errorf("image: archive %s: the index has no linux/%s image for docker load (it has %v)", path, loadArch, archs)
	}
	m, err := load.Manifest()
	if err != nil {
		return fmt.Errorf("image: archive %s: %w", path, err)
	}
	entry := manifestJSON{Config: blobPath(m.Config.Digest), RepoTags: []string{ref.String()}}
	for _, l := range m.Layers {
		entry.Layers = append(entry.Layers, blobPath(l.Digest))
	}
	mj, err := json.Marshal([]manifestJSON{entry})
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := writeArchive(tmp, layoutDir, mj); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("image: writing archive %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("image: writing archive %s: %w", path, err)
	}
	return nil
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// writeArchive writes the files under layoutDir and manifest.json to the tar at path.
func writeArchive(path, layoutDir string, manifest []byte) error {
	type file struct {
		name string
		dir  bool
		data []byte // nil: read from layoutDir
	}
	files := []file{{name: "manifest.json", data: manifest}}
	err := filepath.WalkDir(layoutDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == layoutDir {
			return err
		}
		rel, err := filepath.Rel(layoutDir, p)
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		files = append(files, file{name: filepath.ToSlash(rel), dir: d.IsDir()})
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	epoch := time.Unix(0, 0)
	for _, fl := range files {
		if fl.dir {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: fl.name + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return err
			}
			continue
		}
		data := fl.data
		if data == nil {
			if data, err = os.ReadFile(filepath.Join(layoutDir, filepath.FromSlash(fl.name))); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fl.name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// Verify reads back what WriteLayout (layoutDir) and WriteArchive (tarPath) wrote of
// ref, either may be "", and checks that each holds the index with digest want:
// go-containerregistry's validate.Index over the layout's index (every blob's digest
// and size, each image's config and layers), an SBOM of each image whose content
// matches its digest; the archive's index.json naming want, and its docker
// manifest.json's image (as tarball.ImageFromPath reads it, which docker load and crane
// push use) one of the index's images, which validate.Image accepts.
func Verify(layoutDir, tarPath string, ref name.Tag, want v1.Hash) error {
	if layoutDir != "" {
		idx, err := ReadLayout(layoutDir, ref)
		if err != nil {
			return err
		}
		if got, err := idx.Index.Digest(); err != nil || got != want {
			return fmt.Errorf("image: OCI layout %s holds index %s (%v), want %s", layoutDir, got, err, want)
		}
		if err := validate.Index(idx.Index); err != nil {
			return fmt.Errorf("image: OCI layout %s does not validate: %w", layoutDir, err)
		}
	}
	if tarPath != "" {
		if err := verifyArchive(tarPath, ref, want); err != nil {
			return fmt.Errorf("image: archive %s: %w", tarPath, err)
		}
	}
	return nil
}

func verifyArchive(tarPath string, ref name.Tag, want v1.Hash) error {
	raw, err := tarFile(tarPath, "index.json")
	if err != nil {
		return err
	}
	var top v1.IndexManifest
	if err := json.Unmarshal(raw, &top); err != nil {
		return fmt.Errorf("index.json: %w", err)
	}
	var tagged []v1.Hash
	for _, d := range top.Manifests {
		if d.Annotations[AnnotationRefName] == ref.TagStr() {
			tagged = append(tagged, d.Digest)
		}
	}
	if len(tagged) != 1 || tagged[0] != want {
		return fmt.Errorf("index.json names %v %q, want only %s", tagged, ref.TagStr(), want)
	}
	raw, err = tarFile(tarPath, blobPath(want))
	if err != nil {
		return err
	}
	var im v1.IndexManifest
	if err := json.Unmarshal(raw, &im); err != nil {
		return fmt.Errorf("index %s: %w", want, err)
	}
	img, err := tarball.ImageFromPath(tarPath, &ref)
	if err != nil {
		return fmt.Errorf("reading it as docker load does (%s): %w", ref, err)
	}
	got, err := img.Digest()
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(im.Manifests, func(d v1.Descriptor) bool { return d.Digest == got }) {
		return fmt.Errorf("manifest.json's image %s is none of index %s's", got, want)
	}
	if err := validate.Image(img); err != nil {
		return fmt.Errorf("manifest.json's image does not validate: %w", err)
	}
	return nil
}

// tarFile reads the file called name from the tar at path.
func tarFile(path, name string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("no %s in it", name)
		}
		if err != nil {
			return nil, err
		}
		if h.Name == name {
			return io.ReadAll(tr)
		}
	}
}
