package resolve

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// The manifest and blob reads of fetch.go must answer as go-containerregistry's
// Puller.Get and Puller.Layer answered, over the same transport: the same bytes,
// digest and media type, or the same error.

// ggcrBlob is how Remote.Blob read a blob before: a Puller layer's first
// maxConfigBytes+1 bytes.
func ggcrBlob(ctx context.Context, p *remote.Puller, ref name.Digest) ([]byte, error) {
	l, err := p.Layer(ctx, ref)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxConfigBytes {
		return nil, fmt.Errorf("blob larger than %d bytes; not an image config", maxConfigBytes)
	}
	return b, nil
}

func TestFetchAsGGCR(t *testing.T) {
	s := rt.New(t)
	s.PushIndex(t, "app", "1.0", rt.Index(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), []string{"linux/amd64", "linux/arm64"}, rt.WithSeed("1.0")))
	s.Push(t, "app", "single", rt.Image(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), "linux/amd64", rt.WithSeed("single"), rt.WithDockerMediaTypes()))
	r, repo := fetchTestRemote(t, s)
	ctx := context.Background()
	c := fetchTestClient(t, ctx, r, repo)
	index := s.Digest(t, "app", "1.0")
	m, err := r.Manifest(ctx, repo, index)
	if err != nil {
		t.Fatal(err)
	}
	child := string(m.Raw)[strings.Index(string(m.Raw), "sha256:"):][:71]
	cm, err := r.Manifest(ctx, repo, child)
	if err != nil {
		t.Fatal(err)
	}
	config := string(cm.Raw)[strings.Index(string(cm.Raw), "sha256:"):][:71]

	redirect := func(host string) http.Header {
		return http.Header{"Location": {"http://" + host + "/v2/app/blobs/" + config}}
	}
	_, port, _ := strings.Cut(s.Host, ":")
	// A redirect answers manifest reads only (to a blob, answered as usual):
	// go-containerregistry's redirect check replaces net/http's bound of 10
	// redirects, so a registry that redirects to itself is followed for ever,
	// by both.
	faults := []struct {
		name string
		f    *rt.Fault
	}{
		{"as served", nil},
		{"404", &rt.Fault{Status: http.StatusNotFound}},
		{"401", &rt.Fault{Status: http.StatusUnauthorized}},
		{"500 with a body", &rt.Fault{Status: http.StatusInternalServerError, Message: "boom"}},
		{"other bytes", &rt.Fault{Status: http.StatusOK, Body: []byte(`{"schemaVersion":2}`), Header: http.Header{"Content-Type": {"application/vnd.oci.image.manifest.v1+json"}}}},
		{"signed schema 1", &rt.Fault{Status: http.StatusOK, Body: []byte(`{"schemaVersion":1}`),
			Header: http.Header{"Content-Type": {"application/vnd.docker.distribution.manifest.v1+prettyjws"}, "Docker-Content-Digest": {index}}}},
		{"over 4 MiB", &rt.Fault{Status: http.StatusOK, Body: bytes.Repeat([]byte("x"), 5<<20)}},
		{"empty", &rt.Fault{Status: http.StatusOK, Body: []byte{}}},
		{"redirect to a private address", &rt.Fault{Status: http.StatusTemporaryRedirect, Body: []byte{}, Header: redirect("127.0.0.2:" + port)}},
		{"redirect to the same host", &rt.Fault{Status: http.StatusTemporaryRedirect, Body: []byte{}, Header: redirect("127.0.0.1:" + port)}},
		{"redirect to a closed port, with a signed URL", &rt.Fault{Status: http.StatusTemporaryRedirect, Body: []byte{},
			Header: http.Header{"Location": {"http://localhost:1/blob?X-Amz-Signature=secret&n=1"}}}},
	}
	refs := []name.Reference{repo.Tag("1.0"), repo.Tag("single"), repo.Tag("missing"), repo.Digest(index), repo.Digest(child),
		repo.Tag("we?ird"), repo.Tag("sp ace")}
	for _, tt := range faults {
		t.Run(tt.name, func(t *testing.T) {
			s.ClearFaults()
			if tt.f != nil {
				f := *tt.f
				f.Kind = rt.ManifestGet
				s.Inject(f)
				if f.Header.Get("Location") == "" {
					f.Kind = rt.BlobGet
					s.Inject(f)
				}
			}
			for _, ref := range refs {
				d, wantErr := c.puller.Get(ctx, ref)
				_, byDigest := ref.(name.Digest)
				raw, digest, mt, err := c.fetchManifest(ctx, ref.Identifier(), byDigest)
				if fmt.Sprint(err) != fmt.Sprint(wantErr) {
					t.Errorf("manifest %s: error %v, go-containerregistry's %v", ref, err, wantErr)
				} else if err == nil && (!bytes.Equal(raw, d.Manifest) || digest != d.Digest || mt != d.MediaType) {
					t.Errorf("manifest %s: %s %s (%d bytes), go-containerregistry's %s %s (%d bytes)", ref, digest, mt, len(raw), d.Digest, d.MediaType, len(d.Manifest))
				}
			}
			for _, ref := range []name.Digest{repo.Digest(config), repo.Digest(child), repo.Digest("sha256:" + strings.Repeat("0", 64))} {
				want, wantErr := ggcrBlob(ctx, c.puller, ref)
				got, err := c.fetchBlob(ctx, ref.Identifier(), maxConfigBytes)
				if fmt.Sprint(err) != fmt.Sprint(wantErr) {
					t.Errorf("blob %s: error %v, go-containerregistry's %v", ref, err, wantErr)
				} else if !bytes.Equal(got, want) {
					t.Errorf("blob %s: %d bytes, go-containerregistry's %d", ref, len(got), len(want))
				}
			}
		})
	}
}

// A read that gets no answer (the registry gone) fails as go-containerregistry's
// did through http.Client: the transport is called without it (fetch.go's get).
func TestFetchUnreachableAsGGCR(t *testing.T) {
	s := rt.New(t)
	s.Push(t, "app", "1.0", rt.Image(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), "linux/amd64", rt.WithSeed("1.0")))
	r, repo := fetchTestRemote(t, s)
	ctx := context.Background()
	c := fetchTestClient(t, ctx, r, repo)
	config := "sha256:" + strings.Repeat("0", 64)
	s.Close()
	for _, ref := range []name.Reference{repo.Tag("1.0"), repo.Digest(config)} {
		_, wantErr := c.puller.Get(ctx, ref)
		_, byDigest := ref.(name.Digest)
		_, _, _, err := c.fetchManifest(ctx, ref.Identifier(), byDigest)
		if err == nil || err.Error() != wantErr.Error() {
			t.Errorf("manifest %s: error %v, go-containerregistry's %v", ref, err, wantErr)
		}
	}
	want, wantErr := ggcrBlob(ctx, c.puller, repo.Digest(config))
	got, err := c.fetchBlob(ctx, config, maxConfigBytes)
	if err == nil || err.Error() != wantErr.Error() || got != nil || want != nil {
		t.Errorf("blob: %d bytes, error %v; go-containerregistry's %d bytes, %v", len(got), err, len(want), wantErr)
	}
}

// The URL of a manifest or blob is spelt as go-containerregistry spells it.
func TestFetchURL(t *testing.T) {
	repo, err := name.NewRepository("registry.test:5000/team/app")
	if err != nil {
		t.Fatal(err)
	}
	c := &repoClient{base: url.URL{Scheme: repo.Scheme(), Host: repo.RegistryStr(), Path: "/v2/" + repo.RepositoryStr() + "/"}}
	prefix := c.base.String()
	for _, id := range []string{"1.0", "v1.2.3-rc_1", "sha256:" + strings.Repeat("ab", 32), "a b", "a?b", "a%2Fb", "a/b", "ü", "a#b", "%"} {
		for _, kind := range []string{"manifests", "blobs"} {
			want := (&url.URL{Scheme: repo.Scheme(), Host: repo.RegistryStr(), Path: fmt.Sprintf("/v2/%s/%s/%s", repo.RepositoryStr(), kind, id)}).String()
			if got := c.url(prefix+kind+"/", kind+"/", id); got != want {
				t.Errorf("%s %q: %s, want %s", kind, id, got, want)
			}
		}
	}
}

// readAtMost reads what io.ReadAll(io.LimitReader(r, n)) reads, whatever the
// Content-Length says.
func TestReadAtMost(t *testing.T) {
	for _, body := range []string{"", "a", "hello world", strings.Repeat("x", 5000)} {
		for _, n := range []int64{0, 1, 5, 11, 12, 4999, 5000, 5001, 1 << 20} {
			for _, size := range []int64{-1, 0, 3, int64(len(body)), int64(len(body)) + 7, 2 << 20} {
				want, _ := io.ReadAll(io.LimitReader(strings.NewReader(body), n))
				got, err := readAtMost(iotest{strings.NewReader(body)}, n, size)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("body %d bytes, n %d, size %d: %d bytes, %v; want %d", len(body), n, size, len(got), err, len(want))
				}
			}
		}
	}
}

// iotest reads at most 3 bytes at a time.
type iotest struct{ r io.Reader }

func (r iotest) Read(p []byte) (int, error) { return r.r.Read(p[:min(len(p), 3)]) }

// A registry that redirects a read to itself is given up on after 10 redirects
// (go-containerregistry's own fetcher would follow it until the request timeout).
func TestFetchRedirectLoopStops(t *testing.T) {
	s := rt.New(t)
	s.Push(t, "app", "1.0", rt.Image(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), "linux/amd64", rt.WithSeed("1.0")))
	r, repo := fetchTestRemote(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := fetchTestClient(t, ctx, r, repo)
	self := "http://" + s.Host + "/v2/app/manifests/1.0"
	s.Inject(rt.Fault{Kind: rt.ManifestGet, Status: http.StatusTemporaryRedirect, Body: []byte{}, Header: http.Header{"Location": {self}}})
	before := s.Total()
	_, _, _, err := c.fetchManifest(ctx, "1.0", false)
	if err == nil || !strings.Contains(err.Error(), "stopped after 10 redirects") {
		t.Fatalf("error %v, want stopped after 10 redirects", err)
	}
	// The first request and 9 redirects followed: net/http's default bound.
	if n := s.Total() - before; n != maxRedirects {
		t.Errorf("%d requests, want %d", n, maxRedirects)
	}
}

// fetchTestRemote is a Remote without retries for s, and s's repository app.
func fetchTestRemote(t *testing.T, s *rt.Server) (*Remote, name.Repository) {
	t.Helper()
	r, err := NewRemote(WithRetry(RetryPolicy{Attempts: 1}), WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := name.NewRepository(s.Ref("app"))
	if err != nil {
		t.Fatal(err)
	}
	return r, repo
}

// fetchTestClient is r's authenticated client of repo, as a resolution gets it.
func fetchTestClient(t *testing.T, ctx context.Context, r *Remote, repo name.Repository) *repoClient {
	t.Helper()
	c, err := r.client(ctx, repo, clientKey{repo, pullerKey{pageSize: r.o.pageSize}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
