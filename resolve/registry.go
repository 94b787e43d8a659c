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

// ImageFacts is what inspect derives from an image manifest and its config: the
// platform the image runs on and its build time.
type ImageFacts struct {
	Platform Platform
	// Created is the build time, the manifest's created annotation else the
	// config's created; zero when neither says.
	Created time.Time
}

// ImageFactsCache is a Registry that keeps images' facts by manifest digest: a
// registry view holding many tags keeps these few fields per image rather than
// its manifest and config whole (a resolution reads nothing else of them).
// ImageFacts returns digest's facts, calling derive on a miss with a view that
// reads documents without keeping them. Concurrent misses of one digest share
// one derive; a failed derive is not kept.
type ImageFactsCache interface {
	ImageFacts(ctx context.Context, repo name.Repository, digest v1.Hash, derive func(context.Context, Registry) (ImageFacts, error)) (ImageFacts, error)
}
