package cache

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// keepManifest readies m, read from the registry, to be kept in the manifests LRU
// under key, its digest's text, and returns key. The LRU holds a manifest per
// digest of the view (20,000 in a large one): m's digest is made to share key's
// bytes rather than hold its own copy of the 64 hex characters, its media type
// (a response header's) is interned, and its bytes lose the spare capacity of
// the read.
func keepManifest(m *resolve.Manifest, key string) string {
	m.Raw = compact(m.Raw)
	m.MediaType = resolve.InternMediaType(m.MediaType)
	m.Digest = digestSharing(m.Digest, key)
	return key
}

// digestSharing returns d with its strings sharing key's bytes when key is d's
// text, so an entry does not hold a second copy of its 64 hex characters.
func digestSharing(d v1.Hash, key string) v1.Hash {
	if n := len(d.Algorithm); len(key) == n+1+len(d.Hex) && key[:n] == d.Algorithm && key[n] == ':' && key[n+1:] == d.Hex {
		return v1.Hash{Algorithm: key[:n], Hex: key[n+1:]}
	}
	return d
}
