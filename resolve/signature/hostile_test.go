package signature_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

var indexHeader = http.Header{"Content-Type": {string(types.OCIImageIndex)}}

// referrersBody is a referrers list of n bundle entries (digests of "n").
func referrersBody(entries ...v1.Descriptor) []byte {
	b, _ := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: entries})
	return b
}

func bundleEntry(d v1.Hash) v1.Descriptor {
	return v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: d, Size: 500, ArtifactType: signtest.BundleArtifactType}
}

func hashOf(b []byte) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sha256.Sum256(b))}
}

// countingBody counts the bytes the client reads of referrers answers.
type countingTransport struct {
	next http.RoundTripper
	read *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil && strings.Contains(r.URL.Path, "/referrers/") {
		resp.Body = countingBody{resp.Body, c.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// A hostile referrers endpoint is bounded: in entries, in bytes read, and a
// list or manifest that lies is a skip, never a loop or a wrong answer.
func TestHostileReferrers(t *testing.T) {
	many := make([]v1.Descriptor, 10_000)
	for i := range many {
		many[i] = bundleEntry(hashOf([]byte(fmt.Sprint(i))))
	}
	lie := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[]}`)
	lieDigest := hashOf([]byte("what the list claims"))
	cases := []struct {
		name   string
		faults func(e *env, d v1.Hash) []rt.Fault
		reason string
		want   map[rt.Kind]int
		// maxRead bounds the bytes read of referrers answers (0: not checked).
		maxRead int64
	}{
		{"10,000 entries", func(e *env, d v1.Hash) []rt.Fault {
			return []rt.Fault{{Kind: rt.Referrers, Body: referrersBody(many...), Header: indexHeader}}
		}, "over the cap of 128 referrers (trust.maxReferrers): 10000 signatures listed",
			map[rt.Kind]int{rt.Ping: 1, rt.Referrers: 1, rt.ManifestGet: 1}, 0},
		{"100 MiB", func(e *env, d v1.Hash) []rt.Fault {
			return []rt.Fault{{Kind: rt.Referrers, Body: bytes.Repeat([]byte(" "), 100<<20), Header: indexHeader}}
		}, "the referrers list is over the cap of 4194304 bytes (trust.maxSignatureBytes)",
			map[rt.Kind]int{rt.Ping: 1, rt.Referrers: 1, rt.ManifestGet: 1}, 4<<20 + 1},
		{"lists the image itself", func(e *env, d v1.Hash) []rt.Fault {
			return []rt.Fault{{Kind: rt.Referrers, Body: referrersBody(bundleEntry(d)), Header: indexHeader}}
		}, "the referrers list names the image itself as a signature",
			map[rt.Kind]int{rt.Ping: 1, rt.Referrers: 1, rt.ManifestGet: 1}, 0},
		{"a manifest that does not hash to its digest", func(e *env, d v1.Hash) []rt.Fault {
			return []rt.Fault{
				{Kind: rt.Referrers, Body: referrersBody(bundleEntry(lieDigest)), Header: indexHeader},
				{Kind: rt.ManifestGet, PathContains: lieDigest.Hex, Body: lie, Header: http.Header{"Content-Type": {string(types.OCIManifestSchema1)}}},
			}
		}, "the registry served a signature manifest whose bytes do not hash to its digest",
			map[rt.Kind]int{rt.Ping: 1, rt.Referrers: 1, rt.ManifestGet: 2}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			var read atomic.Int64
			reg, err := resolve.NewRemote(resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain()),
				resolve.WithSignatureLimits(4<<20),
				resolve.WithTransportWrapper(func(next http.RoundTripper) http.RoundTripper { return countingTransport{next, &read} }))
			if err != nil {
				t.Fatal(err)
			}
			d := e.push("app", "1.0.0")
			for _, f := range c.faults(e, d) {
				e.s.Inject(f)
			}
			got := unverified(t, e.verifier(reg), subject(e, "app", d, nil), kl(t))
			if got != c.reason {
				t.Errorf("reason %q, want %q", got, c.reason)
			}
			// Besides: the .sig tag asked for (404).
			assertCounts(t, e.s, c.want)
			if c.maxRead > 0 && read.Load() > c.maxRead {
				t.Errorf("read %d bytes of the referrers answer; the cap is %d", read.Load(), c.maxRead-1)
			}
		})
	}
}
