package resolve

import (
	"context"
	"errors"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Registries' own metadata APIs (Docker Hub's tags API, Harbor's artifacts,
// Artifact Registry's dockerImages, ECR's DescribeImages, ACR's manifests, Quay's
// tags) list a repository's tags a page of 100 or more at a time with what the
// OCI protocol needs a request per tag for: the digest, the platforms, the push
// time and sometimes the build time. The resolver reads them when a registry
// offers one (registries config metadataAPI; package resolve/metadata), and
// stays exact: what the API does not say is read through the OCI protocol.

// Metadata API names: the values of a registries entry's metadataAPI.
const (
	MetadataDockerHub = "dockerhub"
	MetadataHarbor    = "harbor"
	MetadataGAR       = "gar"
	MetadataECR       = "ecr"
	MetadataACR       = "acr"
	MetadataQuay      = "quay"
	MetadataNone      = "none"
)

// MetadataAPIs are the accepted values of metadataAPI.
var MetadataAPIs = []string{MetadataDockerHub, MetadataHarbor, MetadataGAR, MetadataECR, MetadataACR, MetadataQuay, MetadataNone}

// TagRecord is what a metadata API says of one tag. Fields it does not give
// are zero: the resolver then reads them through the OCI protocol.
type TagRecord struct {
	Tag string
	// Digest and MediaType are of the manifest or index the tag points at.
	Digest    v1.Hash
	MediaType types.MediaType
	// Platforms are the runnable platforms of the tag (attestations left out);
	// nil when the API does not list them.
	Platforms []Platform
	// PlatformManifests are, in the order of Platforms, the digests of each
	// platform's image manifest, when the API gives them (else nil).
	PlatformManifests []v1.Hash
	// Created is the build time (the image config's created, or its platform's
	// for the required platform); zero when the API does not give it.
	Created time.Time
	// Pushed is when the tag was pushed (its last update); zero when unknown. A
	// tag's build time is never later than its push time (allowing the clock
	// skew of MetadataOptions), which lets newest-build stop reading configs.
	Pushed time.Time
}

// MetadataAPI is one registry's metadata API for a repository's tags.
type MetadataAPI interface {
	// Name is the API's name (MetadataDockerHub, ...), for --explain, metrics
	// and resolve -o json.
	Name() string
	// ListTagRecords returns every tag of repo with what the API knows of it,
	// following its pagination, bounded as tag lists are. An error means the API
	// cannot answer (not offered, 404, auth refused, rate limited, malformed):
	// the resolver then uses the OCI protocol for that resolution.
	ListTagRecords(ctx context.Context, repo name.Repository) ([]TagRecord, error)
}

// BuildTimer is a MetadataAPI that gives one tag's build time with a request
// of its own (Harbor's artifact by digest), cheaper than the OCI protocol's
// manifest and config. It must answer what inspect computes: the index's
// created annotation, else that of the image manifest of the first runnable
// platform satisfying one of prefer (else the first runnable one), else that
// image's config created. ok is false when it cannot tell exactly (the
// resolver then reads the tag through the OCI protocol).
type BuildTimer interface {
	BuildTime(ctx context.Context, repo name.Repository, rec TagRecord, prefer []Platform) (created time.Time, ok bool, err error)
}

// MetadataAPIFor returns the metadata API to use for a repository, or nil for
// none (the OCI protocol only).
type MetadataAPIFor func(repo name.Repository) MetadataAPI

// ErrMetadataPaused is the error of a metadata API paused after a failure
// (compose pauses a registry's API for a while rather than failing at every
// resolution): the resolver uses the OCI protocol without counting a new
// fallback.
var ErrMetadataPaused = errors.New("metadata API paused after a failure")

// DefaultClockSkew is how much later than its push time a tag's build time may
// be and still be taken as at most its push time (build machines' clocks).
const DefaultClockSkew = 5 * time.Minute
