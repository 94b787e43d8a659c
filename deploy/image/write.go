package image

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
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
