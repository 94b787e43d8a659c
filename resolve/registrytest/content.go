package registrytest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotation and media type names used by the generated content.
const (
	AnnotationCreated       = "org.opencontainers.image.created"
	AnnotationReferenceType = "vnd.docker.reference.type"
	AnnotationReferenceDig  = "vnd.docker.reference.digest"
	AttestationManifest     = "attestation-manifest"
	LabelVersion            = "org.opencontainers.image.version"
	inTotoMediaType         = types.MediaType("application/vnd.in-toto+json")
	predicateSLSA02         = "https://slsa.dev/provenance/v0.2"
)

type imageSpec struct {
	seed              string
	docker            bool
	createdAnnotation bool
	labels            map[string]string
	layers            *layerCache // optional, shares gzipped layer bytes by seed
}

// layerCache memoises seedLayer's bytes while a scenario is built.
type layerCache struct {
	mu sync.Mutex
	m  map[string]v1.Layer
}

type indexSpec struct {
	imageSpec
	attestation bool
}

// ImageOption configures Image.
type ImageOption interface{ applyImage(*imageSpec) }

// IndexOption configures Index.
type IndexOption interface{ applyIndex(*indexSpec) }

// ContentOption configures both Image and Index.
type ContentOption struct {
	img func(*imageSpec)
	idx func(*indexSpec)
}

func (o ContentOption) applyImage(s *imageSpec) {
	if o.img != nil {
		o.img(s)
	}
}

func (o ContentOption) applyIndex(s *indexSpec) {
	if o.idx != nil {
		o.idx(s)
	} else if o.img != nil {
		o.img(&s.imageSpec)
	}
}

type indexOnly func(*indexSpec)

func (f indexOnly) applyIndex(s *indexSpec) { f(s) }

// WithSeed makes the content deterministic: the layer bytes derive from seed
// (for an Index, from seed and each platform). Without it they are random.
func WithSeed(seed string) ContentOption {
	return ContentOption{img: func(s *imageSpec) { s.seed = seed }}
}

// WithLabels sets config labels on the image (on every image of an Index).
func WithLabels(labels map[string]string) ContentOption {
	return ContentOption{img: func(s *imageSpec) {
		if s.labels == nil {
			s.labels = map[string]string{}
		}
		for k, v := range labels {
			s.labels[k] = v
		}
	}}
}

// WithDockerMediaTypes uses Docker schema 2 media types (manifest list,
// manifest, config, layer) instead of OCI ones.
func WithDockerMediaTypes() ContentOption {
	return ContentOption{img: func(s *imageSpec) { s.docker = true }}
}

// WithCreatedAnnotation sets the OCI annotation org.opencontainers.image.created
// (RFC 3339, UTC) on the manifest: the index manifest for an Index, the image
// manifest for an Image.
func WithCreatedAnnotation() ContentOption {
	return ContentOption{
		img: func(s *imageSpec) { s.createdAnnotation = true },
		idx: func(s *indexSpec) { s.createdAnnotation = true },
	}
}

// WithAttestation adds, for every platform image, a docker buildx-style
// attestation manifest: platform unknown/unknown, annotations
// vnd.docker.reference.type=attestation-manifest and
// vnd.docker.reference.digest=<the image's digest>.
func WithAttestation() IndexOption {
	return indexOnly(func(s *indexSpec) { s.attestation = true })
}

// ParsePlatform parses "os/arch[/variant]" and requires os and arch.
func ParsePlatform(s string) (*v1.Platform, error) {
	p, err := v1.ParsePlatform(s)
	if err != nil {
		return nil, err
	}
	if p.OS == "" || p.Architecture == "" {
		return nil, fmt.Errorf("platform %q: want os/arch[/variant]", s)
	}
	return p, nil
}

// Image returns a tiny image: one small layer and a config with the OS,
// Architecture and Variant of platform ("os/arch[/variant]") and Created.
// It panics on a bad platform; NewImage returns the error instead.
func Image(created time.Time, platform string, opts ...ImageOption) v1.Image {
	img, err := NewImage(created, platform, opts...)
	if err != nil {
		panic(err)
	}
	return img
}

// NewImage is Image returning an error.
func NewImage(created time.Time, platform string, opts ...ImageOption) (v1.Image, error) {
	var spec imageSpec
	for _, o := range opts {
		o.applyImage(&spec)
	}
	return newImage(created, platform, spec)
}

func newImage(created time.Time, platform string, spec imageSpec) (v1.Image, error) {
	p, err := ParsePlatform(platform)
	if err != nil {
		return nil, err
	}
	seed := spec.seed
	if seed == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		seed = hex.EncodeToString(b[:])
	}
	manifestMT, configMT, layerMT := types.OCIManifestSchema1, types.OCIConfigJSON, types.OCILayer
	if spec.docker {
		manifestMT, configMT, layerMT = types.DockerManifestSchema2, types.DockerConfigJSON, types.DockerLayer
	}
	layer, err := seedLayer(seed, layerMT, spec.layers)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, manifestMT), configMT)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created.UTC()},
			CreatedBy: "registrytest",
		},
		MediaType: layerMT,
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant, cf.OSVersion = p.OS, p.Architecture, p.Variant, p.OSVersion
	cf.Created = v1.Time{Time: created.UTC()}
	if len(spec.labels) > 0 {
		cf.Config.Labels = map[string]string{}
		for k, v := range spec.labels {
			cf.Config.Labels[k] = v
		}
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	if spec.createdAnnotation {
		img = mutate.Annotations(img, map[string]string{AnnotationCreated: created.UTC().Format(time.RFC3339)}).(v1.Image)
	}
	return img, nil
}

// seedLayer returns a gzipped tar layer holding one file whose content is
// seed. The bytes depend on seed only (stored gzip blocks, fixed headers).
func seedLayer(seed string, mt types.MediaType, cache *layerCache) (v1.Layer, error) {
	key := seed + "\x00" + string(mt)
	if cache != nil {
		cache.mu.Lock()
		l, ok := cache.m[key]
		cache.mu.Unlock()
		if ok {
			return l, nil
		}
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	if err := tw.WriteHeader(&tar.Header{
		Name:     "registrytest/seed",
		Typeflag: tar.TypeReg,
		Mode:     0o644,
		Size:     int64(len(seed)),
		ModTime:  time.Unix(0, 0).UTC(),
		Format:   tar.FormatUSTAR,
	}); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(tw, seed); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	var gb bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gb, gzip.NoCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(tb.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	gz := gb.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(mt))
	if err != nil {
		return nil, err
	}
	if cache != nil {
		cache.mu.Lock()
		if cache.m == nil {
			cache.m = map[string]v1.Layer{}
		}
		cache.m[key] = l
		cache.mu.Unlock()
	}
	return l, nil
}

// Index returns an image index with one Image per platform, each descriptor
// carrying its Platform. It panics on a bad platform; NewIndex returns the
// error instead.
func Index(created time.Time, platforms []string, opts ...IndexOption) v1.ImageIndex {
	idx, err := NewIndex(created, platforms, opts...)
	if err != nil {
		panic(err)
	}
	return idx
}

// NewIndex is Index returning an error.
func NewIndex(created time.Time, platforms []string, opts ...IndexOption) (v1.ImageIndex, error) {
	var spec indexSpec
	for _, o := range opts {
		o.applyIndex(&spec)
	}
	if len(platforms) == 0 {
		return nil, fmt.Errorf("index: no platforms")
	}
	seed := spec.seed
	if seed == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		seed = hex.EncodeToString(b[:])
	}
	indexMT := types.OCIImageIndex
	if spec.docker {
		indexMT = types.DockerManifestList
	}
	var adds, atts []mutate.IndexAddendum
	for _, plat := range platforms {
		p, err := ParsePlatform(plat)
		if err != nil {
			return nil, err
		}
		ispec := imageSpec{seed: seed + "|" + plat, docker: spec.docker, labels: spec.labels, layers: spec.layers}
		img, err := newImage(created, plat, ispec)
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
		if spec.attestation {
			att, desc, err := attestation(img)
			if err != nil {
				return nil, err
			}
			atts = append(atts, mutate.IndexAddendum{Add: att, Descriptor: desc})
		}
	}
	idx := mutate.IndexMediaType(empty.Index, indexMT)
	idx = mutate.AppendManifests(idx, append(adds, atts...)...)
	if spec.createdAnnotation {
		idx = mutate.Annotations(idx, map[string]string{AnnotationCreated: created.UTC().Format(time.RFC3339)}).(v1.ImageIndex)
	}
	return idx, nil
}

// attestation builds a buildx-style attestation manifest for img.
func attestation(img v1.Image) (v1.Image, v1.Descriptor, error) {
	d, err := img.Digest()
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	stmt, err := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v0.1",
		"predicateType": predicateSLSA02,
		"subject":       []any{map[string]any{"name": "_", "digest": map[string]string{d.Algorithm: d.Hex}}},
		"predicate":     map[string]any{"buildType": "https://mobyproject.org/buildkit@v1"},
	})
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	att := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	att, err = mutate.Append(att, mutate.Addendum{
		Layer:       static.NewLayer(stmt, inTotoMediaType),
		Annotations: map[string]string{"in-toto.io/predicate-type": predicateSLSA02},
	})
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	cf, err := att.ConfigFile()
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "unknown", "unknown"
	cf.History = nil
	if att, err = mutate.ConfigFile(att, cf); err != nil {
		return nil, v1.Descriptor{}, err
	}
	return att, v1.Descriptor{
		Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"},
		Annotations: map[string]string{
			AnnotationReferenceDig:  d.String(),
			AnnotationReferenceType: AttestationManifest,
		},
	}, nil
}
