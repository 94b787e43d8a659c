package image

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Index is the multi-platform image: an OCI image index of one image per platform,
// and per platform an SBOM attached as an OCI 1.1 referrer (a manifest whose subject
// is that platform's image).
type Index struct {
	Index v1.ImageIndex
	// Platforms are the index's images in its order (by architecture).
	Platforms []Platform
}

// Platform is one image of an Index with its SBOM.
type Platform struct {
	Platform v1.Platform
	Image    v1.Image
	// SBOM is the SPDX 2.3 JSON document of Image (ArtifactTypeSPDX).
	SBOM []byte
	// Referrer is the manifest that attaches SBOM to Image: artifactType
	// ArtifactTypeSPDX, the SBOM as its one layer, subject Image's descriptor.
	Referrer v1.Image
}

// The OCI empty descriptor's media type and content: the config of an artifact
// manifest that has none (OCI image spec 1.1, "Guidance for an empty descriptor").
const mediaTypeEmpty types.MediaType = "application/vnd.oci.empty.v1+json"

var emptyJSON = []byte("{}")

// AnnotationTitle names a layer's file (the SBOM's file name).
const AnnotationTitle = "org.opencontainers.image.title"

// BuildIndex builds one image per directory of binDirs (each holding Binaries for one
// platform, as Options.BinDir for Build), their SBOMs, and the OCI image index of the
// images, annotated with the version, revision, source, licence and o.Created. The
// order of binDirs does not matter: the index lists the platforms by architecture,
// so the same binaries and options give the same index digest.
func BuildIndex(o Options, binDirs ...string) (*Index, error) {
	if o.BinDir != "" {
		return nil, fmt.Errorf("image: BuildIndex takes the binaries' directories as arguments, not Options.BinDir (%s)", o.BinDir)
	}
	if len(binDirs) == 0 {
		return nil, errors.New("image: BuildIndex: no binaries' directory: give one per platform (make image builds bin/linux_amd64 and bin/linux_arm64)")
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	var platforms []Platform
	from := map[string]string{} // architecture -> directory
	for _, dir := range binDirs {
		bins, arch, err := readBinaries(dir)
		if err != nil {
			return nil, err
		}
		if prev, dup := from[arch]; dup {
			return nil, fmt.Errorf("image: %s and %s both hold linux/%s binaries: give one directory per platform", prev, dir, arch)
		}
		from[arch] = dir
		p, err := buildPlatform(o, bins, arch)
		if err != nil {
			return nil, err
		}
		platforms = append(platforms, p)
	}
	sort.Slice(platforms, func(i, j int) bool { return platforms[i].Platform.Architecture < platforms[j].Platform.Architecture })

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		plat := p.Platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: p.Image, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	idx = mutate.Annotations(idx, map[string]string{
		AnnotationCreated: o.created().Format(time.RFC3339),
		LabelVersion:      o.Version,
		LabelRevision:     o.Revision,
		LabelSource:       Source,
		LabelTitle:        Title,
		LabelLicenses:     License,
	}).(v1.ImageIndex)
	if _, err := idx.Digest(); err != nil {
		return nil, fmt.Errorf("image: index: %w", err)
	}
	return &Index{Index: idx, Platforms: platforms}, nil
}

// buildPlatform builds the image of bins (for arch), its SBOM and the SBOM's referrer.
func buildPlatform(o Options, bins []Entry, arch string) (Platform, error) {
	img, err := buildImage(o, bins, arch)
	if err != nil {
		return Platform{}, err
	}
	desc, err := partial.Descriptor(img)
	if err != nil {
		return Platform{}, fmt.Errorf("image: linux/%s: %w", arch, err)
	}
	plat := v1.Platform{OS: "linux", Architecture: arch}
	doc, err := sbom(o, plat, desc.Digest, bins)
	if err != nil {
		return Platform{}, err
	}
	ref, err := Referrer(*desc, ArtifactTypeSPDX, doc, SBOMFileName(plat), o.created())
	if err != nil {
		return Platform{}, err
	}
	return Platform{Platform: plat, Image: img, SBOM: doc, Referrer: ref}, nil
}

// SBOMFileName is the name of a platform's SBOM file: linux_arm64.spdx.json.
func SBOMFileName(p v1.Platform) string { return p.OS + "_" + p.Architecture + ".spdx.json" }

// Referrer returns an OCI 1.1 artifact manifest attaching blob (of media type
// artifactType, named title) to subject: artifactType artifactType, the empty
// config, blob as its one layer, and the creation time created.
func Referrer(subject v1.Descriptor, artifactType string, blob []byte, title string, created time.Time) (v1.Image, error) {
	layer := static.NewLayer(blob, types.MediaType(artifactType))
	config := static.NewLayer(emptyJSON, mediaTypeEmpty)
	ld, err := partial.Descriptor(layer)
	if err != nil {
		return nil, err
	}
	ld.Annotations = map[string]string{AnnotationTitle: title}
	cd, err := partial.Descriptor(config)
	if err != nil {
		return nil, err
	}
	sub := v1.Descriptor{MediaType: subject.MediaType, Size: subject.Size, Digest: subject.Digest}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  artifactType,
		Config:        *cd,
		Layers:        []v1.Descriptor{*ld},
		Subject:       &sub,
		Annotations:   map[string]string{AnnotationCreated: created.UTC().Format(time.RFC3339)},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifact{manifest: raw, layers: []v1.Layer{config, layer}})
}

// artifact is an artifact manifest and its blobs, as go-containerregistry's partial
// package wants an image (whose "config" is the empty descriptor's {}).
type artifact struct {
	manifest []byte
	layers   []v1.Layer // the config's blob first
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return bytes.Clone(emptyJSON), nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }
func (a *artifact) ArtifactType() (string, error)       { return artifactTypeOf(a.manifest) }
func (a *artifact) ConfigLayer() (v1.Layer, error)      { return a.layers[0], nil }
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, l := range a.layers {
		if d, err := l.Digest(); err == nil && d == h {
			return l, nil
		}
	}
	return nil, fmt.Errorf("image: artifact has no blob %s", h)
}

func artifactTypeOf(manifest []byte) (string, error) {
	var m v1.Manifest
	if err := json.Unmarshal(manifest, &m); err != nil {
		return "", err
	}
	return m.ArtifactType, nil
}

// Sizes returns what a registry stores of idx (the index, each image's manifest and
// config, each distinct compressed layer once, the SBOM referrers) and, per platform,
// the size of its uncompressed layers (what a node of that platform unpacks).
func (idx *Index) Sizes() (stored int64, unpacked map[string]int64, err error) {
	raw, err := idx.Index.RawManifest()
	if err != nil {
		return 0, nil, fmt.Errorf("image: size: %w", err)
	}
	stored = int64(len(raw))
	unpacked = map[string]int64{}
	seen := map[v1.Hash]bool{}
	for _, p := range idx.Platforms {
		for _, img := range []v1.Image{p.Image, p.Referrer} {
			m, err := img.Manifest()
			if err != nil {
				return 0, nil, fmt.Errorf("image: size: %w", err)
			}
			rm, err := img.RawManifest()
			if err != nil {
				return 0, nil, fmt.Errorf("image: size: %w", err)
			}
			stored += int64(len(rm))
			for _, d := range append([]v1.Descriptor{m.Config}, m.Layers...) {
				if !seen[d.Digest] {
					seen[d.Digest] = true
					stored += d.Size
				}
			}
		}
		_, u, err := Sizes(p.Image)
		if err != nil {
			return 0, nil, err
		}
		unpacked[p.Platform.OS+"/"+p.Platform.Architecture] = u
	}
	return stored, unpacked, nil
}
