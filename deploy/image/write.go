package image

import (
	"archive/tar"
	"bytes"
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
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// Annotations of the layout's index entry: the tag (OCI) and the full name
// (containerd's import reads it).
const (
	AnnotationRefName        = "org.opencontainers.image.ref.name"
	AnnotationContainerdName = "io.containerd.image.name"
)

// WriteLayout writes idx as an OCI image layout at dir: the image index, annotated with
// ref, and each platform's SBOM referrer (index.json lists them, as OCI 1.1 tools such
// as oras look for referrers in a layout). A directory already there is replaced only
// if it is an OCI layout (or empty), so a mistyped path cannot delete other files.
func WriteLayout(dir string, idx *Index, ref name.Tag) error {
	if err := replaceable(dir); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".tmp")
	if err != nil {
		return fmt.Errorf("image: writing OCI layout: %w", err)
	}
	defer os.RemoveAll(tmp)
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("image: writing OCI layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx.Index, layout.WithAnnotations(map[string]string{
		AnnotationRefName:        ref.TagStr(),
		AnnotationContainerdName: ref.Name(),
	})); err != nil {
		return fmt.Errorf("image: writing OCI layout %s: %w", dir, err)
	}
	for _, pl := range idx.Platforms {
		if err := p.AppendImage(pl.Referrer); err != nil {
			return fmt.Errorf("image: writing OCI layout %s: SBOM of %s: %w", dir, pl.Platform, err)
		}
	}
	// MkdirTemp made tmp 0700 and go-containerregistry writes blobs 0600 and
	// index.json 0755: a layout is data that other users' tools read.
	err = filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, 0o755)
		}
		return os.Chmod(p, 0o644)
	})
	if err != nil {
		return fmt.Errorf("image: writing OCI layout %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("image: replacing OCI layout %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("image: writing OCI layout %s: %w", dir, err)
	}
	return nil
}

// replaceable checks that dir is absent, empty or an OCI layout.
func replaceable(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("image: OCI layout %s: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("image: %s exists and is not an OCI layout (no oci-layout file); not replacing it: remove it or choose another path", dir)
	}
	return nil
}

// ReadLayout reads back what WriteLayout wrote: the index annotated with ref, each of
// its images and the SBOM referrer whose subject it is. Anything else in the layout,
// an image without an SBOM or an SBOM of no image of the index is an error.
func ReadLayout(dir string, ref name.Tag) (*Index, error) {
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("image: reading OCI layout %s: %w", dir, err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image: OCI layout %s: %w", dir, err)
	}
	var found []v1.Hash
	var others []string                 // tags of other indexes
	referrers := map[v1.Hash]v1.Image{} // by subject
	for _, d := range im.Manifests {
		switch {
		case d.MediaType.IsIndex() && d.Annotations[AnnotationRefName] == ref.TagStr():
			found = append(found, d.Digest)
		case d.MediaType.IsIndex():
			others = append(others, d.Annotations[AnnotationRefName])
		case d.ArtifactType == ArtifactTypeSPDX && d.MediaType.IsImage():
			r, err := top.Image(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("image: OCI layout %s: SBOM %s: %w", dir, d.Digest, err)
			}
			m, err := r.Manifest()
			if err != nil || m.Subject == nil {
				return nil, fmt.Errorf("image: OCI layout %s: SBOM %s has no subject (%v)", dir, d.Digest, err)
			}
			if _, dup := referrers[m.Subject.Digest]; dup {
				return nil, fmt.Errorf("image: OCI layout %s: two SBOMs of %s", dir, m.Subject.Digest)
			}
			referrers[m.Subject.Digest] = r
		default:
			return nil, fmt.Errorf("image: OCI layout %s: unexpected entry %s (%s, annotations %v): want the index tagged %q and its SBOMs", dir, d.Digest, d.MediaType, d.Annotations, ref.TagStr())
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("image: OCI layout %s holds %d image indexes tagged %q, want 1 (other tags: %q)", dir, len(found), ref.TagStr(), others)
	}
	ii, err := top.ImageIndex(found[0])
	if err != nil {
		return nil, fmt.Errorf("image: OCI layout %s: %w", dir, err)
	}
	children, err := ii.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image: OCI layout %s: %w", dir, err)
	}
	idx := &Index{Index: ii}
	for _, c := range children.Manifests {
		if c.Platform == nil {
			return nil, fmt.Errorf("image: OCI layout %s: index entry %s names no platform", dir, c.Digest)
		}
		img, err := ii.Image(c.Digest)
		if err != nil {
			return nil, fmt.Errorf("image: OCI layout %s: %s: %w", dir, c.Platform, err)
		}
		r, ok := referrers[c.Digest]
		if !ok {
			return nil, fmt.Errorf("image: OCI layout %s: the %s image %s has no SBOM", dir, c.Platform, c.Digest)
		}
		delete(referrers, c.Digest)
		doc, err := sbomOf(r)
		if err != nil {
			return nil, fmt.Errorf("image: OCI layout %s: SBOM of %s: %w", dir, c.Platform, err)
		}
		idx.Platforms = append(idx.Platforms, Platform{Platform: *c.Platform, Image: img, SBOM: doc, Referrer: r})
	}
	for sub := range referrers {
		return nil, fmt.Errorf("image: OCI layout %s: an SBOM of %s, which the index does not hold", dir, sub)
	}
	return idx, nil
}

// sbomOf reads the SBOM that referrer r carries, checking its digest.
func sbomOf(r v1.Image) ([]byte, error) {
	layers, err := r.Layers()
	if err != nil {
		return nil, err
	}
	if len(layers) != 1 {
		return nil, fmt.Errorf("%d layers, want the SBOM alone", len(layers))
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	doc, err := io.ReadAll(io.LimitReader(rc, 64<<20))
	if err != nil {
		return nil, err
	}
	want, err := layers[0].Digest()
	if err != nil {
		return nil, err
	}
	if got, _, err := v1.SHA256(bytes.NewReader(doc)); err != nil || got != want {
		return nil, fmt.Errorf("its content's digest is %s, its manifest says %s", got, want)
	}
	return doc, nil
}

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

// Push writes idx to the registry as ref: the index and its images, then each SBOM
// referrer by digest. go-containerregistry maintains the referrers tag (sha256-<hex>)
// for a registry without the OCI 1.1 referrers API, so remote.Referrers finds the
// SBOMs either way.
func Push(ref name.Tag, idx *Index, opts ...remote.Option) error {
	if err := remote.WriteIndex(ref, idx.Index, opts...); err != nil {
		return fmt.Errorf("image: pushing %s: %w", ref, err)
	}
	for _, p := range idx.Platforms {
		d, err := p.Referrer.Digest()
		if err != nil {
			return fmt.Errorf("image: SBOM of %s: %w", p.Platform, err)
		}
		if err := remote.Write(ref.Context().Digest(d.String()), p.Referrer, opts...); err != nil {
			return fmt.Errorf("image: pushing the SBOM of %s to %s: %w", p.Platform, ref.Context(), err)
		}
	}
	return nil
}

// WriteRootFS writes entries under dir (created if absent) with their modes, and
// their owners when running as root. The Dockerfile's build stage writes RootFS this
// way and copies it into the image, so both builds give the same files. Without root,
// an entry owned by someone else is an error.
func WriteRootFS(dir string, entries []Entry) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("image: root filesystem: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("image: root filesystem: %w", err)
	}
	defer root.Close()
	asRoot := os.Geteuid() == 0
	for _, e := range entries {
		p := filepath.FromSlash(e.Path)
		if e.Mode.IsDir() {
			err = root.Mkdir(p, 0o700)
			if errors.Is(err, fs.ErrExist) {
				err = nil
			}
		} else {
			err = root.WriteFile(p, e.Data, 0o600)
		}
		if err == nil {
			// After writing: the umask is not applied to chmod, and the sticky bit is kept.
			err = root.Chmod(p, e.Mode&(fs.ModePerm|fs.ModeSticky))
		}
		if err == nil && asRoot {
			err = root.Lchown(p, e.UID, e.GID)
		} else if err == nil && (e.UID != os.Geteuid() || e.GID != os.Getegid()) && (e.UID != 0 || e.GID != 0) {
			err = fmt.Errorf("owner %d:%d needs root (the Dockerfile's build stage runs as root)", e.UID, e.GID)
		}
		if err != nil {
			return fmt.Errorf("image: root filesystem %s: %s: %w", dir, e.Path, err)
		}
	}
	return nil
}

// Sizes returns what a registry stores of img (manifest, config and compressed
// layers) and the size of its uncompressed layers (what a node unpacks).
func Sizes(img v1.Image) (compressed, uncompressed int64, err error) {
	m, err := img.RawManifest()
	if err != nil {
		return 0, 0, fmt.Errorf("image: size: %w", err)
	}
	mf, err := img.Manifest()
	if err != nil {
		return 0, 0, fmt.Errorf("image: size: %w", err)
	}
	compressed = int64(len(m)) + mf.Config.Size
	layers, err := img.Layers()
	if err != nil {
		return 0, 0, fmt.Errorf("image: size: %w", err)
	}
	for _, l := range layers {
		c, err := l.Size()
		if err != nil {
			return 0, 0, fmt.Errorf("image: size: %w", err)
		}
		compressed += c
		rc, err := l.Uncompressed()
		if err != nil {
			return 0, 0, fmt.Errorf("image: size: %w", err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return 0, 0, fmt.Errorf("image: size: %w", err)
		}
		uncompressed += n
	}
	return compressed, uncompressed, nil
}
