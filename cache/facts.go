package cache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
	"unique"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

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
// index has: keptFacts, and a keptChild per child (the LRU adds the key and its
// bookkeeping).
func factsSize(_ string, f keptFacts) int64 {
	return 72 + 40*int64(len(f.children))
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
			return f, nil
		})
}

// factsStore is the facts layer's LRU. It holds each manifest's facts as
// keptFacts, under the manifest's digest, and gives them back as
// resolve.ManifestFacts: a view of 10,000 two-platform indexes holds 20,000 of
// them, and resolve's form (a Platform of three strings per child, a digest
// string per child in a slice of its own, the entry's digest beside its key) was
// most of a cold newest-build's live heap. A hit builds the children again (a
// slice and a digest string each), as reading the index did.
type factsStore struct{ c *lru[keptFacts] }

// keptFacts is resolve.ManifestFacts less its digest (its key in the LRU is it,
// as bytes): platforms interned, children's digests as bytes.
type keptFacts struct {
	mediaType unique.Handle[types.MediaType]
	platform  unique.Handle[resolve.Platform]
	created   time.Time
	children  []keptChild
}

type keptChild struct {
	platform unique.Handle[resolve.Platform]
	digest   [sha256.Size]byte
}

// get implements memStore: the facts under key (a digest's text), and whether
// they are held.
func (s factsStore) get(key string) (resolve.ManifestFacts, bool) {
	bin, ok := binaryKey(key)
	if !ok {
		return resolve.ManifestFacts{}, false
	}
	k, ok := s.c.get(bin)
	if !ok {
		return resolve.ManifestFacts{}, false
	}
	// key is "sha256:<hex>": binaryKey accepted it.
	f := resolve.ManifestFacts{Digest: v1.Hash{Algorithm: "sha256", Hex: key[len("sha256:"):]},
		MediaType: k.mediaType.Value(), Platform: k.platform.Value(), Created: k.created}
	if len(k.children) > 0 {
		f.Children = make([]resolve.ChildFacts, len(k.children))
		for i, c := range k.children {
			f.Children[i] = resolve.ChildFacts{Platform: c.platform.Value(),
				Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(c.digest[:])}}
		}
	}
	return f, true
}

// add implements memStore. Facts it cannot hold exactly (a digest that is not
// sha256 in lower-case hex, which v1.Hash's parser never gives) are not kept.
func (s factsStore) add(key string, f resolve.ManifestFacts) int {
	bin, ok := binaryKey(key)
	if !ok {
		return 0
	}
	k := keptFacts{mediaType: unique.Make(f.MediaType), platform: unique.Make(f.Platform), created: f.Created}
	if len(f.Children) > 0 {
		k.children = make([]keptChild, len(f.Children))
		for i, c := range f.Children {
			if !sha256Bytes(c.Digest, &k.children[i].digest) {
				return 0
			}
			k.children[i].platform = unique.Make(c.Platform)
		}
	}
	return s.c.add(bin, k)
}

// stats is the underlying LRU's.
func (s factsStore) stats() (entries int, bytes int64) { return s.c.stats() }

// binaryKey is the entry's key in the LRU for key, a digest's text: its 32
// bytes, not its 71 characters.
func binaryKey(key string) (string, bool) {
	algorithm, hexDigits, _ := strings.Cut(key, ":")
	var b [sha256.Size]byte
	if !sha256Bytes(v1.Hash{Algorithm: algorithm, Hex: hexDigits}, &b) {
		return "", false
	}
	return string(b[:]), true
}

// sha256Bytes decodes h into out when it is a sha256 digest in lower-case hex,
// the only form in which its text comes back the same (without allocating: it
// runs on every lookup).
func sha256Bytes(h v1.Hash, out *[sha256.Size]byte) bool {
	if h.Algorithm != "sha256" || len(h.Hex) != 2*sha256.Size {
		return false
	}
	for i := range out {
		hi, okHi := lowerHexDigit(h.Hex[2*i])
		lo, okLo := lowerHexDigit(h.Hex[2*i+1])
		if !okHi || !okLo {
			return false
		}
		out[i] = hi<<4 | lo
	}
	return true
}

func lowerHexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
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
