package resolve

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
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
	m, err := reg.Manifest(ctx, repo, tag)
	if err != nil {
		return nil, err
	}
	info := &TagInfo{Digest: m.Digest, MediaType: m.MediaType}
	if m.IsIndex() {
		idx, err := v1.ParseIndexManifest(bytes.NewReader(m.Raw))
		if err != nil {
			return nil, fmt.Errorf("parse index %s:%s: %w", repo, tag, err)
		}
		var child *v1.Descriptor
		for i := range idx.Manifests {
			d := &idx.Manifests[i]
			p := PlatformOf(d.Platform)
			if d.Platform == nil || p.IsUnknown() || !d.MediaType.IsImage() {
				continue // attestations, nested indexes
			}
			info.Platforms = append(info.Platforms, p)
			if child == nil || (!satisfiesAny(PlatformOf(child.Platform), prefer) && satisfiesAny(p, prefer)) {
				child = d
			}
		}
		info.Platforms = SortPlatforms(info.Platforms)
		info.Created = parseCreated(idx.Annotations)
		if !wantCreated || !info.Created.IsZero() || child == nil {
			return info, nil
		}
		cm, err := reg.Manifest(ctx, repo, child.Digest.String())
		if err != nil {
			return nil, err
		}
		_, created, err := imageDetails(ctx, reg, repo, tag, cm)
		if err != nil {
			return nil, err
		}
		info.Created = created
		return info, nil
	}
	if !m.MediaType.IsImage() {
		return nil, fmt.Errorf("%s:%s: unsupported manifest media type %q", repo, tag, m.MediaType)
	}
	p, created, err := imageDetails(ctx, reg, repo, tag, m)
	if err != nil {
		return nil, err
	}
	if !p.IsUnknown() && p.OS != "" {
		info.Platforms = []Platform{p}
	}
	info.Created = created
	return info, nil
}

// imageDetails reads an image manifest's config for its platform and build time.
func imageDetails(ctx context.Context, reg Registry, repo name.Repository, tag string, m *Manifest) (Platform, time.Time, error) {
	man, err := v1.ParseManifest(bytes.NewReader(m.Raw))
	if err != nil {
		return Platform{}, time.Time{}, fmt.Errorf("parse manifest %s:%s: %w", repo, tag, err)
	}
	created := parseCreated(man.Annotations)
	raw, err := reg.Blob(ctx, repo, man.Config.Digest)
	if err != nil {
		return Platform{}, time.Time{}, err
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return Platform{}, time.Time{}, fmt.Errorf("parse config of %s:%s: %w", repo, tag, err)
	}
	p := Platform{OS: cfg.OS, Arch: cfg.Architecture, Variant: cfg.Variant}.normalise()
	if created.IsZero() {
		created = cfg.Created.Time
	}
	return p, created, nil
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
