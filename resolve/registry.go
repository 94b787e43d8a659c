package resolve

import (
	"context"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Manifest is a manifest or index as the registry served it, addressed by digest.
type Manifest struct {
	Digest    v1.Hash
	MediaType types.MediaType
	Raw       []byte
}

// IsIndex reports whether the manifest is a multi-platform index.
func (m *Manifest) IsIndex() bool { return m.MediaType.IsIndex() }

// Registry is the resolver's view of registries: the four reads that strategies need.
// The network client (Remote) implements it; the daemon's cache wraps one to share
// answers between renders. Implementations must be safe for concurrent use.
type Registry interface {
	// ListTags returns every tag of the repository, following pagination.
	ListTags(ctx context.Context, repo name.Repository) ([]string, error)
	// Head returns the descriptor (digest, media type) a tag points at, without the
	// manifest body: the cheap way to see whether a tag moved.
	Head(ctx context.Context, repo name.Repository, tag string) (v1.Descriptor, error)
	// Manifest returns the manifest a tag or a digest ("sha256:...") points at.
	Manifest(ctx context.Context, repo name.Repository, ref string) (*Manifest, error)
	// Blob returns a blob (an image config) by digest.
	Blob(ctx context.Context, repo name.Repository, digest v1.Hash) ([]byte, error)
}

// TagInfo is what the resolver learns about a tag.
type TagInfo struct {
	Digest    v1.Hash
	MediaType types.MediaType
	// Platforms the tag has a runnable manifest for (attestations excluded); nil when
	// not inspected.
	Platforms []Platform
	// Created is the build time, when known.
	Created time.Time

	// listed: the digest came from a metadata API's list, not from the manifest's
	// bytes; a pin confirms it first.
	listed bool
}

// ManifestFacts is what inspect reads of a manifest: of an index its runnable
// children and created annotation, of an image (with its config) its platform
// and build time. A registry view holding many tags keeps these few fields per
// manifest rather than the manifest and the config whole (ManifestFactsCache).
type ManifestFacts struct {
	Digest    v1.Hash
	MediaType types.MediaType
	// Children are an index's runnable images (attestations and nested indexes
	// left out), in the index's order.
	Children []ChildFacts
	// Platform is an image's platform (from its config).
	Platform Platform
	// Created is an index's created annotation; an image's build time, its
	// created annotation else its config's created. Zero when unknown.
	Created time.Time
}

// ChildFacts is one runnable image of an index.
type ChildFacts struct {
	Platform Platform
	Digest   v1.Hash
}

// ManifestFactsCache is a Registry that keeps manifests' facts rather than the
// manifests: ManifestFacts returns the facts of the manifest ref (a tag or a
// digest) points at, calling derive on a miss with the manifest and a view that
// reads documents without keeping them. Concurrent misses of one manifest
// share one derive; a failed derive is not kept.
type ManifestFactsCache interface {
	ManifestFacts(ctx context.Context, repo name.Repository, ref string, derive DeriveFacts) (ManifestFacts, error)
}

// DeriveFacts derives a manifest's facts from the manifest, reading what else it
// needs (an image's config) through reg.
type DeriveFacts func(ctx context.Context, reg Registry, m *Manifest) (ManifestFacts, error)
