package resolve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// createdAnnotation is the OCI annotation for an image's build time.
const createdAnnotation = "org.opencontainers.image.created"

// inspect reads what a tag points at: its digest, the platforms it runs on and, when
// wantCreated, its build time. An index gives its platforms without further requests;
// a single image needs its config for os/arch. For the build time of an index the
// config of one child is read: the first child that satisfies a required platform,
// else the first runnable child.
//
// Cost, cold: 1 request for an index (2 more if its build time is needed and not
// annotated), 2 for a single image.
func inspect(ctx context.Context, reg Registry, repo name.Repository, tag string, wantCreated bool, prefer []Platform) (*TagInfo, error) {
	f, err := manifestFacts(ctx, reg, repo, tag, func(ctx context.Context, reg Registry, m *Manifest) (ManifestFacts, error) {
		return tagFacts(ctx, reg, repo, tag, m)
	})
	if err != nil {
		return nil, err
	}
	info := &TagInfo{Digest: f.Digest, MediaType: f.MediaType, Created: f.Created}
	if !f.MediaType.IsIndex() {
		if p := f.Platform; !p.IsUnknown() && p.OS != "" {
			info.Platforms = []Platform{p}
		}
		return info, nil
	}
	var child *ChildFacts
	info.Platforms = make([]Platform, 0, len(f.Children))
	for i := range f.Children {
		c := &f.Children[i]
		info.Platforms = append(info.Platforms, c.Platform)
		if child == nil || (!satisfiesAny(child.Platform, prefer) && satisfiesAny(c.Platform, prefer)) {
			child = c
		}
	}
	info.Platforms = SortPlatforms(info.Platforms)
	if !wantCreated || !info.Created.IsZero() || child == nil {
		return info, nil
	}
	cf, err := manifestFacts(ctx, reg, repo, child.Digest.String(), func(ctx context.Context, reg Registry, m *Manifest) (ManifestFacts, error) {
		return imageFacts(ctx, reg, repo, tag, m)
	})
	if err != nil {
		return nil, err
	}
	info.Created = cf.Created
	return info, nil
}

// manifestFacts returns the facts of the manifest ref points at: from the
// registry view when it keeps them (ManifestFactsCache), else derived from the
// manifest read now.
func manifestFacts(ctx context.Context, reg Registry, repo name.Repository, ref string, derive DeriveFacts) (ManifestFacts, error) {
	if fc, ok := reg.(ManifestFactsCache); ok {
		return fc.ManifestFacts(ctx, repo, ref, derive)
	}
	m, err := reg.Manifest(ctx, repo, ref)
	if err != nil {
		return ManifestFacts{}, err
	}
	return derive(ctx, reg, m)
}

// tagFacts derives the facts of the manifest tag points at: an index's runnable
// children and created annotation, or an image's platform and build time.
func tagFacts(ctx context.Context, reg Registry, repo name.Repository, tag string, m *Manifest) (ManifestFacts, error) {
	if !m.IsIndex() {
		if !m.MediaType.IsImage() {
			return ManifestFacts{}, fmt.Errorf("%s:%s: unsupported manifest media type %q", repo, tag, m.MediaType)
		}
		return imageFacts(ctx, reg, repo, tag, m)
	}
	idx, err := decodeFields[indexFields](m.Raw)
	if err != nil {
		return ManifestFacts{}, fmt.Errorf("parse index %s:%s: %w", repo, tag, err)
	}
	f := ManifestFacts{Digest: m.Digest, MediaType: m.MediaType, Created: parseCreated(idx.Annotations)}
	for _, d := range idx.Manifests {
		p := PlatformOf(d.Platform)
		if d.Platform == nil || p.IsUnknown() || !d.MediaType.IsImage() {
			continue // attestations, nested indexes
		}
		f.Children = append(f.Children, ChildFacts{Platform: p, Digest: d.Digest})
	}
	return f, nil
}

// imageFacts derives an image manifest's facts: its config's platform, and its
// build time.
func imageFacts(ctx context.Context, reg Registry, repo name.Repository, tag string, m *Manifest) (ManifestFacts, error) {
	p, created, err := imageDetails(ctx, reg, repo, tag, m)
	if err != nil {
		return ManifestFacts{}, err
	}
	return ManifestFacts{Digest: m.Digest, MediaType: m.MediaType, Platform: p, Created: created}, nil
}

// imageDetails reads an image manifest's config for its platform and build time.
func imageDetails(ctx context.Context, reg Registry, repo name.Repository, tag string, m *Manifest) (Platform, time.Time, error) {
	man, err := decodeFields[manifestFields](m.Raw)
	if err != nil {
		return Platform{}, time.Time{}, fmt.Errorf("parse manifest %s:%s: %w", repo, tag, err)
	}
	created := parseCreated(man.Annotations)
	raw, err := reg.Blob(ctx, repo, man.Config.Digest)
	if err != nil {
		return Platform{}, time.Time{}, err
	}
	cfg, err := decodeFields[configFields](raw)
	if err != nil {
		return Platform{}, time.Time{}, fmt.Errorf("parse config of %s:%s: %w", repo, tag, err)
	}
	p := Platform{OS: cfg.OS, Arch: cfg.Architecture, Variant: cfg.Variant}.normalise()
	if created.IsZero() {
		created = cfg.Created.Time
	}
	return p, created, nil
}

// An index, a manifest and a config are decoded with encoding/json into the
// fields inspect uses of them, not whole: the fields below are those of
// v1.IndexManifest, v1.Manifest and v1.ConfigFile, with the same names, types
// and decoding. A resolution decodes three documents per tag, and
// go-containerregistry's types build every layer, history entry and environment
// variable of them; most of a cold resolution's decoding time went there. A
// document that is not JSON fails as before; a field inspect does not read is
// no longer type-checked (inspect_decode_test.go checks the fields it reads
// against go-containerregistry's).

type indexFields struct {
	Manifests   []descriptorFields `json:"manifests"`
	Annotations map[string]string  `json:"annotations,omitempty"`
}

type descriptorFields struct {
	MediaType types.MediaType `json:"mediaType"`
	Digest    v1.Hash         `json:"digest"`
	Platform  *v1.Platform    `json:"platform,omitempty"`
}

type manifestFields struct {
	Config struct {
		Digest v1.Hash `json:"digest"`
	} `json:"config"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type configFields struct {
	Architecture string  `json:"architecture"`
	Created      v1.Time `json:"created,omitempty"`
	OS           string  `json:"os"`
	Variant      string  `json:"variant,omitempty"`
}

// decodeFields decodes the first JSON value of raw, as go-containerregistry's
// Parse functions do with a json.Decoder: what follows the value is not read.
// A whole document that is one value, the common case, is decoded in place with
// json.Unmarshal (no copy into a Decoder's buffer); any other is decoded again,
// from scratch, by a Decoder, whose answer (value or error) is the one given.
func decodeFields[T any](raw []byte) (T, error) {
	var v T
	if json.Unmarshal(raw, &v) == nil {
		return v, nil
	}
	var w T
	err := json.NewDecoder(bytes.NewReader(raw)).Decode(&w)
	return w, err
}

func parseCreated(annotations map[string]string) time.Time {
	if v, ok := annotations[createdAnnotation]; ok {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}

func satisfiesAny(p Platform, required []Platform) bool {
	return slices.ContainsFunc(required, p.Satisfies)
}
