package resolve_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// boundedResolve resolves with a context that ends the test's wait should the
// resolver not bound itself (the behaviour before the caps: it looped or hung).
func boundedResolve(t *testing.T, r *resolve.Resolver, s *rt.Server, repo string, spec resolve.PolicySpec) (*resolve.Result, error) {
	t.Helper()
	p, err := spec.Compile()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewRepository(s.Ref(repo))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.Resolve(ctx, ref, s.Ref(repo), p)
}

// tagBytes counts the tags/list body bytes the client read, after the base
// transport's decompression (it wraps the base transport).
type tagBytes struct{ n atomic.Int64 }

func (c *tagBytes) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTrip(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil && strings.HasSuffix(req.URL.Path, "/tags/list") {
			resp.Body = &countBody{ReadCloser: resp.Body, n: &c.n}
		}
		return resp, err
	})
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type countBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func TestTagListBounds(t *testing.T) {
	manyTags := make([]string, 300_000) // about 3.3 MB of JSON
	for i := range manyTags {
		manyTags[i] = fmt.Sprintf("1.0.%d", i)
	}
	huge := rt.TagsBody("app", manyTags...)
	bomb := rt.GzipBomb("app", 64<<20)
	t.Logf("huge page %d bytes; gzip bomb %d bytes compressed, 64 MiB expanded", len(huge), len(bomb))

	tests := []struct {
		name     string
		opts     []resolve.RemoteOption
		fault    *rt.Fault
		want     string // in the error
		maxPages int    // tags/list requests at most
		maxRead  int64  // tags/list bytes read at most (0: not checked)
		maxAlloc uint64 // bytes allocated at most during the resolution (0: not checked)
	}{{
		name: "link to the page itself",
		fault: &rt.Fault{Kind: rt.Tags, PathContains: "last=t01", PassThrough: true,
			Header: http.Header{"Link": {`</v2/app/tags/list?last=t01&n=2>; rel="next"`}}},
		want:     "tag list links back to a page already read (\"/v2/app/tags/list?last=t01&n=2\")",
		maxPages: 2,
	}, {
		name: "link back to an earlier page, parameters reordered",
		fault: &rt.Fault{Kind: rt.Tags, PathContains: "last=t03", PassThrough: true,
			Header: http.Header{"Link": {`</v2/app/tags/list?n=2&last=t01>; rel="next"`}}},
		want:     "tag list links back to a page already read (\"/v2/app/tags/list?n=2&last=t01\")",
		maxPages: 3,
	}, {
		name: "link back to the first page",
		fault: &rt.Fault{Kind: rt.Tags, PathContains: "last=t03", PassThrough: true,
			Header: http.Header{"Link": {`<http://HOST/v2/app/tags/list?n=1000>; rel="next"`}}},
		want:     "tag list links back to a page already read (\"/v2/app/tags/list?n=1000\")",
		maxPages: 3,
	}, {
		name:     "pages over the cap",
		opts:     []resolve.RemoteOption{resolve.WithTagListLimits(3, 0, 0)},
		want:     "tag list is over the cap of 3 pages (setting tagListMaxPages); no tag chosen",
		maxPages: 3,
	}, {
		name:     "tags over the cap",
		opts:     []resolve.RemoteOption{resolve.WithTagListLimits(0, 5, 0)},
		want:     "tag list is over the cap of 5 tags (setting tagListMaxTags); no tag chosen",
		maxPages: 3,
	}, {
		name:     "huge page",
		opts:     []resolve.RemoteOption{resolve.WithTagListLimits(0, 0, 64<<10)},
		fault:    &rt.Fault{Kind: rt.Tags, Body: huge},
		want:     "a tag list page is over the cap of 65536 bytes (after decompression; setting tagListMaxPageSize); no tag chosen",
		maxPages: 1,
		maxRead:  64<<10 + 1,
	}, {
		name: "gzip bomb",
		opts: []resolve.RemoteOption{resolve.WithTagListLimits(0, 0, 1<<20)},
		fault: &rt.Fault{Kind: rt.Tags, Body: bomb,
			Header: http.Header{"Content-Encoding": {"gzip"}}},
		want:     "a tag list page is over the cap of 1048576 bytes (after decompression; setting tagListMaxPageSize); no tag chosen",
		maxPages: 1,
		maxRead:  1<<20 + 1,
		maxAlloc: 12 << 20,
	}, {
		name:     "default caps: a gzip bomb stops at 4 MiB",
		fault:    &rt.Fault{Kind: rt.Tags, Body: bomb, Header: http.Header{"Content-Encoding": {"gzip"}}},
		want:     "a tag list page is over the cap of 4194304 bytes",
		maxPages: 1,
		maxRead:  4<<20 + 1,
		maxAlloc: 32 << 20,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := rt.New(t, rt.WithPageSize(2))
			for i := range 10 {
				s.Push(t, "app", fmt.Sprintf("t%02d", i), rt.Image(day(i), "linux/amd64", rt.WithSeed(fmt.Sprint(i))))
			}
			if tt.fault != nil {
				f := *tt.fault
				if l := f.Header.Get("Link"); l != "" {
					f.Header = http.Header{"Link": {strings.ReplaceAll(l, "HOST", s.Host)}}
				}
				s.Inject(f)
			}
			var read tagBytes
			r := newResolver(t, append([]resolve.RemoteOption{resolve.WithTransportWrapper(read.wrap)}, tt.opts...)...)
			s.ResetCounts()

			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			res, err := boundedResolve(t, r, s, "app", resolve.PolicySpec{Strategy: "alphabetical"})
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("took %v, allocated %d bytes, read %d tags/list bytes in %d pages; error: %v",
				took, alloc, read.n.Load(), s.Count(rt.Tags), err)

			if err == nil {
				t.Fatalf("resolved to %q; want the error %q", res.Tag, tt.want)
			}
			var le *resolve.TagListLimitError
			if !errors.As(err, &le) {
				t.Errorf("error %v (%T) is no *TagListLimitError", err, err)
			}
			// The message names the registry, the repository and the cap.
			if !strings.Contains(err.Error(), tt.want) ||
				!strings.Contains(err.Error(), "registry "+s.Host+", repository app:") {
				t.Errorf("error = %q\nwant it to name registry %s, repository app and %q", err, s.Host, tt.want)
			}
			if n := s.Count(rt.Tags); n > tt.maxPages {
				t.Errorf("tags/list requests = %d, want at most %d", n, tt.maxPages)
			}
			if tt.maxRead > 0 && read.n.Load() > tt.maxRead {
				t.Errorf("read %d bytes of tags/list, want at most the cap + 1 = %d", read.n.Load(), tt.maxRead)
			}
			if tt.maxAlloc > 0 && alloc > tt.maxAlloc {
				t.Errorf("allocated %d bytes, want at most %d", alloc, tt.maxAlloc)
			}
		})
	}
}

// A list within the caps, over many pages, still resolves.
func TestTagListWithinBounds(t *testing.T) {
	s := rt.New(t, rt.WithPageSize(2))
	pushTags(t, s, "app", "1.0.0", "1.1.0", "1.2.0", "2.0.0", "2.1.0")
	r := newResolver(t, resolve.WithTagListLimits(3, 6, 1<<10))
	res, err := boundedResolve(t, r, s, "app", resolve.PolicySpec{})
	if err != nil || res.Tag != "2.1.0" {
		t.Fatalf("Resolve = %+v, %v; want 2.1.0 (3 pages, 5 tags: within the caps)", res, err)
	}
}

func TestInvalidRegistryTagsSkipped(t *testing.T) {
	long := strings.Repeat("9", 129)
	bad := []string{"9.9.9+evil", "10.0.0\n", "1.0.2/../../x", "-1", ".hidden", "", long,
		"zz\x1b[31mred", "zz<script>", "zz\u00e9", "z z"}
	tests := []struct {
		name     string
		strategy string
		want     string
	}{
		{"semver", "semver", "7"}, // "7" is 7.0.0; "9.9.9+evil" would win
		{"alphabetical", "alphabetical", "zz"},
		{"numeric", "numeric", "7"},
		{"newest-build", "newest-build", "zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := rt.New(t)
			pushTags(t, s, "app", "1.0.0", "7", "1.1.0", "zz")
			listed := append([]string{"1.0.0", "7", "1.1.0", "zz"}, bad...)
			s.Inject(rt.Fault{Kind: rt.Tags, Body: rt.TagsBody("app", listed...)})
			res, err := boundedResolve(t, newResolver(t), s, "app", resolve.PolicySpec{Strategy: tt.strategy})
			if err != nil {
				t.Fatalf("Resolve: %v; want %s (the invalid tags skipped)", err, tt.want)
			}
			if res.Tag != tt.want {
				t.Errorf("tag = %q, want %q", res.Tag, tt.want)
			}
			if res.InvalidTags != len(bad) {
				t.Errorf("InvalidTags = %d, want %d", res.InvalidTags, len(bad))
			}
			for _, rj := range res.Rejected {
				for _, b := range bad {
					if rj.Tag == b {
						t.Errorf("invalid tag %q reached a filter or strategy (rejected: %s)", b, rj.Reason)
					}
				}
			}
			warn := strings.Join(res.Warnings, "\n")
			if !strings.Contains(warn, fmt.Sprintf("the registry listed %d tags that are not valid OCI tags, skipped", len(bad))) {
				t.Errorf("warnings = %q, want the count of invalid tags", res.Warnings)
			}
			if strings.ContainsAny(warn, "\x1b\r<") || strings.Contains(warn, "\n\n") || len(warn) > 200 {
				t.Errorf("warning prints a tag raw or long: %q", warn)
			}
			t.Logf("warning: %s", warn)
		})
	}
}

func TestPinnedDigestIsVerified(t *testing.T) {
	lie := "sha256:" + strings.Repeat("a", 64)
	headLies := rt.Fault{Kind: rt.ManifestHead, PassThrough: true, Header: http.Header{"Docker-Content-Digest": {lie}}}
	tests := []struct {
		name    string
		spec    resolve.PolicySpec
		faults  []rt.Fault
		wantErr string // "" : resolves to the true digest
	}{{
		name:    "digest strategy, HEAD lies",
		spec:    resolve.PolicySpec{Strategy: "digest", Constraint: "1.1.0"},
		faults:  []rt.Fault{headLies},
		wantErr: "the registry's Docker-Content-Digest " + lie + " is not confirmed by the manifest's bytes; not pinning an unverified digest: ",
	}, {
		name:    "semver pin-digest, HEAD lies",
		spec:    resolve.PolicySpec{PinDigest: true},
		faults:  []rt.Fault{headLies},
		wantErr: "the registry's Docker-Content-Digest " + lie + " is not confirmed by the manifest's bytes",
	}, {
		name: "HEAD lies and GET by that digest serves other bytes",
		spec: resolve.PolicySpec{Strategy: "digest", Constraint: "1.1.0"},
		faults: []rt.Fault{headLies, {Kind: rt.ManifestGet, PathContains: lie, Body: []byte(`{"schemaVersion":2}`),
			Header: http.Header{"Content-Type": {"application/vnd.oci.image.manifest.v1+json"}, "Docker-Content-Digest": {lie}}}},
		wantErr: "does not match requested digest",
	}, {
		name:   "pin-digest with platforms: the digest is the body's, GET header ignored",
		spec:   resolve.PolicySpec{PinDigest: true, Platforms: []string{"linux/amd64"}},
		faults: []rt.Fault{{Kind: rt.ManifestGet, PassThrough: true, Header: http.Header{"Docker-Content-Digest": {lie}}}},
	}, {
		name: "honest registry",
		spec: resolve.PolicySpec{Strategy: "digest", Constraint: "1.1.0"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := rt.New(t)
			pushTags(t, s, "app", "1.0.0", "1.1.0")
			for _, f := range tt.faults {
				s.Inject(f)
			}
			res, err := boundedResolve(t, newResolver(t), s, "app", tt.spec)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if want := s.Digest(t, "app", "1.1.0"); res.Digest != want || !strings.HasSuffix(res.Reference, "@"+want) {
					t.Errorf("digest %s, reference %s; want %s", res.Digest, res.Reference, want)
				}
				return
			}
			if err == nil {
				t.Fatalf("pinned %s (true digest %s); want the error %q", res.Reference, s.Digest(t, "app", "1.1.0"), tt.wantErr)
			}
			var dm *resolve.DigestMismatchError
			if !errors.As(err, &dm) || !strings.Contains(err.Error(), tt.wantErr) ||
				!strings.Contains(err.Error(), s.Ref("app")+":1.1.0") {
				t.Errorf("error = %v (%T); want a *DigestMismatchError naming %s:1.1.0 with %q", err, err, s.Ref("app"), tt.wantErr)
			}
			t.Logf("error: %v", err)
		})
	}
}

func TestRequestTimeouts(t *testing.T) {
	const header, overall = 200 * time.Millisecond, 700 * time.Millisecond
	tests := []struct {
		name  string
		fault rt.Fault
		spec  resolve.PolicySpec
		want  string
	}{
		{"ping hangs", rt.Fault{Kind: rt.Ping, Hang: true}, resolve.PolicySpec{},
			"no response header within 200ms"},
		{"tag list hangs", rt.Fault{Kind: rt.Tags, Hang: true}, resolve.PolicySpec{},
			"no response header within 200ms"},
		{"manifest HEAD hangs", rt.Fault{Kind: rt.ManifestHead, Hang: true},
			resolve.PolicySpec{Strategy: "digest", Constraint: "1.0.0"}, "no response header within 200ms"},
		{"tag list body never comes", rt.Fault{Kind: rt.Tags, Body: rt.TagsBody("app", "1.0.0"), HangBody: true},
			resolve.PolicySpec{}, "request not finished within 700ms"},
		{"manifest body never comes", rt.Fault{Kind: rt.ManifestGet, PassThrough: true, HangBody: true},
			resolve.PolicySpec{Platforms: []string{"linux/amd64"}}, "request not finished within 700ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := rt.New(t)
			pushTags(t, s, "app", "1.0.0")
			s.Inject(tt.fault)
			r := newResolver(t, resolve.WithRequestTimeouts(header, overall))
			start := time.Now()
			_, err := boundedResolve(t, r, s, "app", tt.spec)
			took := time.Since(start)
			t.Logf("took %v: %v", took, err)
			// Cut off by the request's own timeout (the error names it), not by the
			// caller's 10s deadline...
			var te *resolve.TimeoutError
			if err == nil || !errors.As(err, &te) || !strings.Contains(err.Error(), "registry "+s.Host+": "+tt.want) {
				t.Fatalf("error = %v (%T), want a *TimeoutError %q", err, err, tt.want)
			}
			// ...once: a request cut off is not tried again, so the resolution
			// waits one request timeout, not one per retry attempt.
			hung := 0
			for _, r := range s.Requests() {
				if r.Fault {
					hung++
				}
			}
			if hung != 1 {
				t.Errorf("the hanging request was made %d times (%v), want once", hung, s.Counts())
			}
		})
	}
}

// Confirming a HEAD's digest costs one GET by digest, only when pinning.
func TestPinnedDigestConfirmationCost(t *testing.T) {
	for _, tt := range []struct {
		spec         resolve.PolicySpec
		heads, gets  int
		wantPinnedTo bool
	}{
		{resolve.PolicySpec{}, 1, 0, false},
		{resolve.PolicySpec{PinDigest: true}, 1, 1, true},
		{resolve.PolicySpec{Strategy: "digest", Constraint: "1.1.0"}, 1, 1, true},
	} {
		s := rt.New(t)
		pushTags(t, s, "app", "1.0.0", "1.1.0")
		s.ResetCounts()
		res, err := boundedResolve(t, newResolver(t), s, "app", tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		c := s.Counts()
		if c[rt.ManifestHead] != tt.heads || c[rt.ManifestGet] != tt.gets || res.Pinned != tt.wantPinnedTo {
			t.Errorf("%+v: counts %v, pinned %v; want %d HEAD, %d GET", tt.spec, c, res.Pinned, tt.heads, tt.gets)
		}
		if res.Digest != s.Digest(t, "app", "1.1.0") {
			t.Errorf("%+v: digest %s", tt.spec, res.Digest)
		}
	}
}

// The daemon's path: the same checks hold behind the cache (cache.Registry over
// a Remote without memo).
func TestBoundsBehindTheCache(t *testing.T) {
	newCached := func(t *testing.T, opts ...resolve.RemoteOption) *resolve.Resolver {
		reg, err := resolve.NewRemote(append([]resolve.RemoteOption{resolve.WithRetry(fastRetry),
			resolve.WithKeychain(authn.NewMultiKeychain()), resolve.WithoutMemo()}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return resolve.NewResolver(cache.NewRegistry(reg))
	}
	t.Run("lying HEAD", func(t *testing.T) {
		s := rt.New(t)
		pushTags(t, s, "app", "1.0.0", "1.1.0")
		s.Inject(rt.Fault{Kind: rt.ManifestHead, PassThrough: true,
			Header: http.Header{"Docker-Content-Digest": {"sha256:" + strings.Repeat("b", 64)}}})
		_, err := boundedResolve(t, newCached(t), s, "app", resolve.PolicySpec{PinDigest: true})
		var dm *resolve.DigestMismatchError
		if !errors.As(err, &dm) {
			t.Fatalf("error = %v (%T), want a *DigestMismatchError", err, err)
		}
	})
	t.Run("gzip bomb", func(t *testing.T) {
		s := rt.New(t)
		s.Inject(rt.Fault{Kind: rt.Tags, Body: rt.GzipBomb("app", 16<<20), Header: http.Header{"Content-Encoding": {"gzip"}}})
		_, err := boundedResolve(t, newCached(t, resolve.WithTagListLimits(0, 0, 1<<20)), s, "app", resolve.PolicySpec{})
		var le *resolve.TagListLimitError
		if !errors.As(err, &le) || le.Limit != "bytes per page" {
			t.Fatalf("error = %v (%T), want a *TagListLimitError on bytes per page", err, err)
		}
	})
	t.Run("invalid tags", func(t *testing.T) {
		s := rt.New(t)
		pushTags(t, s, "app", "1.0.0")
		s.Inject(rt.Fault{Kind: rt.Tags, Body: rt.TagsBody("app", "1.0.0", "9.9.9+x")})
		res, err := boundedResolve(t, newCached(t), s, "app", resolve.PolicySpec{})
		if err != nil || res.Tag != "1.0.0" || res.InvalidTags != 1 {
			t.Fatalf("Resolve = %+v, %v; want 1.0.0 with 1 invalid tag", res, err)
		}
	})
}

// An error answer's body is read up to 64 KiB, whatever its size, and the error
// still says the registry's status (go-containerregistry alone fails with "body
// exceeds 65536 byte limit", losing the 502).
func TestErrorBodyBounded(t *testing.T) {
	s := rt.New(t)
	big := []byte(`{"errors":[{"code":"UNKNOWN","message":"` + strings.Repeat("x", 32<<20) + `"}]}`)
	s.Inject(rt.Fault{Kind: rt.Tags, Status: http.StatusBadGateway, Body: big})
	var read tagBytes
	r := newResolver(t, resolve.WithTransportWrapper(read.wrap))
	_, err := boundedResolve(t, r, s, "app", resolve.PolicySpec{})
	t.Logf("read %d bytes of %d-byte error bodies over %d tries; message %d bytes: %.200v", read.n.Load(), len(big), s.Count(rt.Tags), len(fmt.Sprint(err)), err)
	if err == nil || !strings.Contains(err.Error(), "502") {
		t.Fatalf("error = %v, want the 502", err)
	}
	if max := int64(s.Count(rt.Tags)) * (64<<10 + 4096); read.n.Load() > max {
		t.Errorf("read %d bytes of error bodies, want at most %d (64 KiB per try)", read.n.Load(), max)
	}
}

// manifestBytes counts the manifest body bytes the client read.
type manifestBytes struct{ n atomic.Int64 }

func (c *manifestBytes) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTrip(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil && strings.Contains(req.URL.Path, "/manifests/") {
			resp.Body = &countBody{ReadCloser: resp.Body, n: &c.n}
		}
		return resp, err
	})
}

// TestManifestBodyBounded: a registry that answers a manifest GET with 64 MiB is
// read no further than the OCI spec's 4 MiB, and the resolution fails saying so.
func TestManifestBodyBounded(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "app", "1.0.0")
	big := append([]byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[`), bytes.Repeat([]byte(" "), 64<<20)...)
	s.Inject(rt.Fault{Kind: rt.ManifestGet, Status: http.StatusOK, Body: big,
		Header: http.Header{"Content-Type": {"application/vnd.oci.image.index.v1+json"}}})
	var read manifestBytes
	r := newResolver(t, resolve.WithTransportWrapper(read.wrap))
	_, err := resolveIn(t, r, s, "app", resolve.PolicySpec{Platforms: []string{"linux/amd64"}})
	if err == nil || !strings.Contains(err.Error(), "manifest over 4194304 bytes") {
		t.Fatalf("error = %v, want the manifest cap named", err)
	}
	if max := int64(s.Count(rt.ManifestGet)) * (resolve.MaxManifestBytes + 64<<10); read.n.Load() > max {
		t.Errorf("read %d bytes of manifests over %d tries, want at most %d", read.n.Load(), s.Count(rt.ManifestGet), max)
	}
}
