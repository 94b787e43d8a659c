package cache

import (
	"context"
	"unique"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// The image layer keeps, per image manifest digest, the few fields resolutions
// read of an image (resolve.ImageFacts: its platform and build time) instead of
// its manifest and config whole. A cold newest-build over 10,000 tags reads an
// image manifest and a config per tag and nothing of them again; kept raw they
// were most of what the view held per tag (a real image's config, with its
// history and environment, is several KiB). The documents now pass through: Redis,
// when the daemons share it, still keeps them, so another daemon derives the same
// facts without a registry request; the facts themselves are memory only.

// imageFactsSize is what one entry's facts are accounted (a platform's three
// interned strings, a time); the LRU adds its key and bookkeeping.
const imageFactsSize = 72

var _ resolve.ImageFactsCache = (*Registry)(nil)

// imageFactsCodec marks the image layer memory only: lruGet does not share a
// layer whose codec cannot parse.
var imageFactsCodec = valueCodec[resolve.ImageFacts]{}

// ImageFacts implements resolve.ImageFactsCache: digest's facts from the image
// layer, else derived once through a view that reads the documents without
// keeping them in memory (passThrough).
func (r *Registry) ImageFacts(ctx context.Context, repo name.Repository, digest v1.Hash,
	derive func(context.Context, resolve.Registry) (resolve.ImageFacts, error)) (resolve.ImageFacts, error) {
	return lruGet(ctx, r, LayerImage, r.images, true, &r.sfImage, imageFactsCodec, digest.String(), resolve.RepoKey(repo),
		func(ctx context.Context) (resolve.ImageFacts, error) {
			f, err := derive(ctx, passThrough{r})
			if err != nil {
				return resolve.ImageFacts{}, err
			}
			f.Platform = internPlatform(f.Platform)
			return f, nil
		})
}

// internPlatform returns p with its strings shared by every fact of the same
// platform (a view holds few distinct ones).
func internPlatform(p resolve.Platform) resolve.Platform {
	in := func(s string) string { return unique.Make(s).Value() }
	return resolve.Platform{OS: in(p.OS), Arch: in(p.Arch), Variant: in(p.Variant)}
}

// passThrough is the registry view facts are derived through: it answers from
// what the cache holds, else from Redis and the registry, and keeps nothing it
// fetched in memory.
type passThrough struct{ *Registry }

// Manifest implements resolve.Registry.
func (p passThrough) Manifest(ctx context.Context, repo name.Repository, ref string) (*resolve.Manifest, error) {
	if h, err := v1.NewHash(ref); err == nil {
		return p.manifestByDigestKept(ctx, repo, h, false)
	}
	return p.Registry.Manifest(ctx, repo, ref)
}

// Blob implements resolve.Registry.
func (p passThrough) Blob(ctx context.Context, repo name.Repository, digest v1.Hash) ([]byte, error) {
	return p.blob(ctx, repo, digest, false)
}
