package image

import (
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
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// Annotations of the layout's index entry: the tag (OCI) and the full name
// (containerd's import reads it).
const (
	AnnotationRefName        = "org.opencontainers.image.ref.name"
	AnnotationContainerdName = "io.containerd.image.name"
)

// WriteLayout writes img as the only image of an OCI image layout at dir, annotated
// with ref. A directory already there is replaced only if it is an OCI layout (or
// empty), so a mistyped path cannot delete other files.
func WriteLayout(dir string, img v1.Image, ref name.Tag) error {
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
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		AnnotationRefName:        ref.TagStr(),
		AnnotationContainerdName: ref.Name(),
	})); err != nil {
		return fmt.Errorf("image: writing OCI layout %s: %w", dir, err)
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

// WriteTarball writes img to path as a `docker save` tarball tagged ref, which
// `docker load` and `crane push` read.
func WriteTarball(path string, img v1.Image, ref name.Tag) error {
	tmp := path + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("image: writing tarball %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("image: writing tarball %s: %w", path, err)
	}
	return nil
}

// Verify reads back what WriteLayout (layoutDir) and WriteTarball (tarPath, tagged
// ref) wrote, either may be "", validates them with go-containerregistry's validate
// (every blob's digest and size, config and layers) and checks that each holds the
// image with digest want.
func Verify(layoutDir, tarPath string, ref name.Tag, want v1.Hash) error {
	if layoutDir != "" {
		idx, err := layout.ImageIndexFromPath(layoutDir)
		if err != nil {
			return fmt.Errorf("image: reading OCI layout %s: %w", layoutDir, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return fmt.Errorf("image: OCI layout %s: %w", layoutDir, err)
		}
		if len(im.Manifests) != 1 || im.Manifests[0].Digest != want {
			return fmt.Errorf("image: OCI layout %s holds %d images, want only %s", layoutDir, len(im.Manifests), want)
		}
		if got := im.Manifests[0].Annotations[AnnotationRefName]; got != ref.TagStr() {
			return fmt.Errorf("image: OCI layout %s names the image %q, want %q", layoutDir, got, ref.TagStr())
		}
		if err := validate.Index(idx); err != nil {
			return fmt.Errorf("image: OCI layout %s does not validate: %w", layoutDir, err)
		}
	}
	if tarPath != "" {
		img, err := tarball.ImageFromPath(tarPath, &ref)
		if err != nil {
			return fmt.Errorf("image: reading tarball %s as %s: %w", tarPath, ref, err)
		}
		got, err := img.Digest()
		if err != nil {
			return fmt.Errorf("image: tarball %s: %w", tarPath, err)
		}
		if got != want {
			return fmt.Errorf("image: tarball %s holds %s, want %s", tarPath, got, want)
		}
		if err := validate.Image(img); err != nil {
			return fmt.Errorf("image: tarball %s does not validate: %w", tarPath, err)
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
