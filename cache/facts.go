package cache

import (
	"context"
	"slices"
	"unique"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// The facts layer keeps, per manifest digest, the few fields resolutions read
// of a manifest (resolve.ManifestFacts: an index's runnable children and created
// annotation, an image's platform and build time from its config) instead of
// the manifest and the config whole. A cold newest-build over 10,000 tags reads
// an index, an image manifest and a config per tag; kept raw they were most of
// what the view held per tag (a real image's config, with its history and
// environment, is several KiB). The documents now pass through: Redis, when the
// daemons share it, still keeps them, so another daemon derives the same facts
// without a registry request; the facts themselves are memory only. Manifest
// and Blob, which other readers (signatures, digest checks) use, keep what they
// read as before.

// factsSize is what one entry's facts are accounted, by how many children an
// index has: the struct, and per child its platform and digest (the LRU adds
// the key and its bookkeeping).
func factsSize(_ string, f resolve.ManifestFacts) int64 {
	return 144 + 144*int64(len(f.Children))
}

var _ resolve.ManifestFactsCache = (*Registry)(nil)

// factsCodec marks the facts layer memory only: lruGet does not share a layer
// whose codec cannot parse.
var factsCodec = valueCodec[resolve.ManifestFacts]{}

// ManifestFacts implements resolve.ManifestFactsCache. For a tag: its cached
// descriptor (a HEAD when expired, as Manifest), then the facts of its digest;
// cold, the GET by tag derives them, so a tag costs the requests it did when its
// manifest was kept.
func (r *Registry) ManifestFacts(ctx context.Context, repo name.Repository, ref string, derive resolve.DeriveFacts) (resolve.ManifestFacts, error) {
	if h, err := v1.NewHash(ref); err == nil {
		return r.factsByDigest(ctx, repo, h, nil, derive)
	}
	key := resolve.RepoKey(repo) + ":" + ref
	var got *resolve.Manifest // set when this caller's fetch read the manifest, with what it derived
	var gotFacts resolve.ManifestFacts
	var gotErr error
	hv, err := r.heads.get(ctx, key, resolve.RepoKey(repo), "digest of "+key, func(ctx context.Context, old *entry[headVal]) (headVal, error) {
		m, hv, err := r.headOrGet(ctx, repo, ref, old)
		if err != nil || m == nil {
			return hv, err
		}
		r.shareManifest(ctx, m)
		// Derived before the descriptor is published, so a render that joined
		// this fetch finds the facts, as it found the manifest kept.
		f, ferr := r.factsByDigest(ctx, repo, m.Digest, m, derive)
		if old == nil {
			got, gotFacts, gotErr = m, f, ferr
		}
		return hv, nil
	})
	if err != nil {
		return resolve.ManifestFacts{}, err
	}
	if got != nil && got.Digest == hv.digest() {
		r.m.CacheMisses.WithLabelValues(LayerManifest).Inc()
		return gotFacts, gotErr
	}
	return r.factsByDigest(ctx, repo, hv.digest(), nil, derive)
}

// factsByDigest returns the facts of the manifest h from the facts layer, else
// derives them from m (read by digest, not kept, when nil).
func (r *Registry) factsByDigest(ctx context.Context, repo name.Repository, h v1.Hash, m *resolve.Manifest, derive resolve.DeriveFacts) (resolve.ManifestFacts, error) {
	key := h.String()
	return lruGet(ctx, r, LayerFacts, r.facts, true, &r.sfFacts, factsCodec, key, resolve.RepoKey(repo),
		func(ctx context.Context) (resolve.ManifestFacts, error) {
			if m == nil {
				var err error
				if m, err = r.manifestByDigestKept(ctx, repo, h, false); err != nil {
					return resolve.ManifestFacts{}, err
				}
			}
			f, err := derive(ctx, passThrough{r}, m)
			if err != nil {
				// The manifest is kept instead, as before the facts layer, so the
				// next read of a tag that fails (a config the registry refuses,
				// content no resolution can read) costs no request for it.
				if _, held := r.manifests.get(key); !held { // else m is the one held, shared
					keepIn(r, LayerManifest, r.manifests, keepManifest(m, key), m)
				}
				return resolve.ManifestFacts{}, err
			}
			return compactFacts(f, key), nil
		})
}

// compactFacts readies f to be kept under key, its digest's text: its digest
// shares key's bytes, its media type and platforms are interned (a view holds
// few distinct ones), its children lose spare capacity.
func compactFacts(f resolve.ManifestFacts, key string) resolve.ManifestFacts {
	f.Digest, f.MediaType = digestSharing(f.Digest, key), internMediaType(f.MediaType)
	f.Platform = internPlatform(f.Platform)
	f.Children = slices.Clip(f.Children)
	for i := range f.Children {
		f.Children[i].Platform = internPlatform(f.Children[i].Platform)
	}
	return f
}

// internPlatform returns p with its strings shared by every fact of the same
// platform.
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
