package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/argocd-image-resolver/argocd-image-resolver/notify"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

// signKey signs repo:tag of s with the signer's key ci, as a referrer.
func signKey(t *testing.T, s *rt.Server, signer *signtest.Signer, repo, tag string) {
	t.Helper()
	d, err := name.NewDigest(s.Ref(repo) + "@" + s.Digest(t, repo, tag))
	if err != nil {
		t.Fatal(err)
	}
	if err := signer.Sign(context.Background(), d, signtest.Referrers, signtest.Spec{Key: "ci"}, remote.WithTransport(s.Client().Transport)); err != nil {
		t.Fatal(err)
	}
}

// TestRefreshLoopSeesASignatureAddedLater: with the operator requiring a key
// signature for the registry, an app renders the newest signed tag, not the
// newer unsigned one; once that one is signed, the loop's next pass after the tag
// TTL sees it and refreshes the app, at the cost of one tag list and the new
// signature's referrers list, bundle manifest and bundle.
func TestRefreshLoopSeesASignatureAddedLater(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "web", "linux/amd64", "1.0.0", "1.1.0")
	signer, err := signtest.New()
	if err != nil {
		t.Fatal(err)
	}
	signKey(t, s, signer, "web", "1.0.0")
	pem, err := signer.PublicKeyPEM("ci")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "ci.pub")
	if err := os.WriteFile(keyFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig()
	cfg.TagTTL = time.Second // also how long a failed signature check is cached
	cfg.RefreshAhead = 0
	cfg.Trust.Keys = map[string]string{"ci": keyFile}
	cfg.Registries = []resolve.RegistryConfig{{Prefix: s.Host, Insecure: true, RequireSignature: &resolve.VerifySpec{Key: "ci"}}}
	n := &fakeNotifier{}
	clock := newFakeClock()
	d, _ := startDaemon(t, cfg, WithNotifier(n), WithRefreshEvery(time.Hour), withClock(clock))
	image := s.Ref("web")
	dir := appDir(t, image+":1.0.0")
	policy := map[string]string{"image-list": "web=" + image + ":~1", "web.platforms": "linux/amd64"}

	out := delegatedRender(t, d.cfg.Socket, dir, argoEnviron(t, "web", "0123abc", policy))
	if !strings.Contains(out, image+":1.0.0 (semver ~1; platforms linux/amd64; signed by key ci)") || !strings.Contains(out, "1.1.0: signature: unsigned") {
		t.Fatalf("render, want the signed 1.0.0, who signed it and why 1.1.0 was skipped:\n%s", out)
	}
	skips := d.Metrics.SignatureSkips.WithLabelValues(s.Host)
	if got := testutil.ToFloat64(skips); got != 1 {
		t.Errorf("signature_skips_total = %v after the render, want 1 (1.1.0)", got)
	}
	clock.Advance(cfg.TagTTL + 100*time.Millisecond)
	time.Sleep(cfg.TagTTL + 100*time.Millisecond) // the verdict cache keeps real time
	d.Refresher.Pass(context.Background())
	if c := n.count(); c != 0 {
		t.Fatalf("%d refreshes while 1.1.0 is unsigned", c)
	}

	signKey(t, s, signer, "web", "1.1.0")
	s.ResetCounts()
	clock.Advance(cfg.TagTTL + 100*time.Millisecond)
	time.Sleep(cfg.TagTTL + 100*time.Millisecond)
	d.Refresher.Pass(context.Background())
	if len(n.calls) != 1 || n.calls[0] != (notify.App{Namespace: "argocd", Name: "web"}) {
		t.Fatalf("refreshes %v, want [argocd/web] once 1.1.0 is signed", n.calls)
	}
	want := map[rt.Kind]int{rt.Tags: 1, rt.Referrers: 1, rt.ManifestGet: 1, rt.BlobGet: 1}
	if got := s.Counts(); !equalCounts(got, want) {
		t.Errorf("requests of the pass that found the signature: %v, want %v", got, want)
	}
	out = delegatedRender(t, d.cfg.Socket, dir, argoEnviron(t, "web", "0123abc", policy))
	if !strings.Contains(out, image+":1.1.0") {
		t.Errorf("render after the refresh, want 1.1.0:\n%s", out)
	}
	if got := testutil.ToFloat64(skips); got != 2 {
		t.Errorf("signature_skips_total = %v, want 2 (the render and the pass while 1.1.0 was unsigned)", got)
	}
}
