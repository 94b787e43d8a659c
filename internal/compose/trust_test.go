package compose

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

const (
	ghIssuer = "https://token.actions.githubusercontent.com"
	release  = "https://github.com/org/web/.github/workflows/release.yml@refs/tags/v1"
)

// pushSigned pushes repo:tag to s and signs it keyless (identity release) with sg.
func pushSigned(t *testing.T, s *rt.Server, sg *signtest.Signer, repo, tag string) {
	t.Helper()
	img := rt.Image(time.Unix(0, 0), "linux/amd64", rt.WithSeed(tag))
	s.Push(t, repo, tag, img)
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewDigest(s.Ref(repo) + "@" + d.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := sg.Sign(context.Background(), ref, signtest.Referrers, signtest.Spec{Identity: release, Issuer: ghIssuer}, remote.WithAuth(authn.Anonymous)); err != nil {
		t.Fatal(err)
	}
}

func newSigner(t *testing.T) *signtest.Signer {
	t.Helper()
	sg, err := signtest.New()
	if err != nil {
		t.Fatal(err)
	}
	return sg
}

func writeTestFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// tufServer serves a TUF repository's directory, counting requests; down makes
// it answer 503.
type tufServer struct {
	*httptest.Server
	mu   sync.Mutex
	hits []string
	down bool
}

func newTUFServer(t *testing.T, dir string) *tufServer {
	ts := &tufServer{}
	files := http.FileServer(http.Dir(dir))
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		ts.hits = append(ts.hits, r.URL.Path)
		down := ts.down
		ts.mu.Unlock()
		if down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts
}

func (ts *tufServer) requests() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return slices.Clone(ts.hits)
}

// TestTrustedRootFromTUF: with trust.tufURL and trust.tufRoot, the resolver built
// from the configuration fetches nothing when built; at its first keyless
// verification it fetches the trusted root from the TUF repository (the next
// root version, timestamp, snapshot, targets, trusted_root.json: 5 requests) and
// checks signatures against it: the newest tag, signed by a Sigstore the root
// does not list, is skipped; the next, signed by the one it lists, wins. A second
// resolution fetches nothing. With trust.trustedRoot too, a repository that is
// down leaves the file's root in use.
func TestTrustedRootFromTUF(t *testing.T) {
	s := rt.New(t)
	sgA, sgB := newSigner(t), newSigner(t)
	pushSigned(t, s, sgA, "app", "1.0.0")
	pushSigned(t, s, sgB, "app", "2.0.0")
	repo, err := signtest.NewTUFRepo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rootA, err := sgA.TrustedRootJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Publish(signtest.TrustedRootTarget, rootA); err != nil {
		t.Fatal(err)
	}
	tufRoot, err := repo.RootJSON()
	if err != nil {
		t.Fatal(err)
	}
	ts := newTUFServer(t, repo.Dir)
	env := map[string]string{"IMAGE_RESOLVER_TRUST_TUF_URL": ts.URL, "IMAGE_RESOLVER_TRUST_TUF_ROOT": writeTestFile(t, "root.json", tufRoot),
		"IMAGE_RESOLVER_TRUST_REQUIRE_SCT": "false"}
	newResolver := func(env map[string]string) *resolve.Resolver {
		t.Helper()
		c, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewDirectResolver(c, nil, resolve.WithRetry(resolve.RetryPolicy{Attempts: 1}))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	check := func(r *resolve.Resolver) {
		t.Helper()
		req := resolve.Request{Image: s.Ref("app"), Policy: resolve.PolicySpec{Strategy: "semver", Verify: resolve.VerifySpec{Identity: release, Issuer: ghIssuer}}}
		answers, err := r.ResolveBatch(context.Background(), "", []resolve.Request{req})
		if err != nil {
			t.Fatal(err)
		}
		a := answers[0]
		if a.Error != "" || a.Result.Tag != "1.0.0" || a.Result.Verified == nil || a.Result.Verified.Identity != release {
			t.Fatalf("answer %+v", a)
		}
		if len(a.Result.Skipped) != 1 || a.Result.Skipped[0].Tag != "2.0.0" || !strings.Contains(a.Result.Skipped[0].Reason, "does not verify") {
			t.Errorf("skipped %+v", a.Result.Skipped)
		}
	}

	r := newResolver(env)
	if got := ts.requests(); len(got) != 0 {
		t.Fatalf("building the resolver fetched %v", got)
	}
	check(r)
	target := "/targets/" + filepath.Base(repo.CurrentTargetPath(signtest.TrustedRootTarget))
	want := []string{"/2.root.json", "/timestamp.json", "/1.snapshot.json", "/1.targets.json", target}
	if got := ts.requests(); !slices.Equal(got, want) {
		t.Errorf("TUF requests %v, want %v", got, want)
	}
	check(r)
	if got := ts.requests(); len(got) != len(want) {
		t.Errorf("a second resolution asked the TUF repository again: %v", got[len(want):])
	}

	ts.mu.Lock()
	ts.down = true
	ts.mu.Unlock()
	env["IMAGE_RESOLVER_TRUST_TRUSTED_ROOT"] = writeTestFile(t, "trusted_root.json", rootA)
	check(newResolver(env))
}

// TestPublicGoodTUFNeedsNoRoot: trust.tufURL of Sigstore's public-good
// repository builds a verifier with the root built in, fetching nothing yet.
func TestPublicGoodTUFNeedsNoRoot(t *testing.T) {
	env := map[string]string{"IMAGE_RESOLVER_TRUST_TUF_URL": signature.PublicGoodTUFURL}
	c, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if config.PublicGoodTUFURL != signature.PublicGoodTUFURL {
		t.Errorf("config's public-good TUF URL %s, sigstore-go's %s", config.PublicGoodTUFURL, signature.PublicGoodTUFURL)
	}
	reg, err := resolve.NewRemote()
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(c, reg, nil, nil)
	if err != nil || v == nil {
		t.Fatalf("verifier: %v", err)
	}
}
