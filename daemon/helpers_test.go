package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/google/go-containerregistry/pkg/authn"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func day(n int) time.Time { return t0.Add(time.Duration(n) * 24 * time.Hour) }

// fastRetry keeps retry tests quick while still exercising the waits.
var fastRetry = resolve.RetryPolicy{Attempts: 2, Backoff: 5 * time.Millisecond, MaxWait: 5 * time.Second}

// pushTags pushes single-platform images, one per tag, built on successive days.
func pushTags(t testing.TB, s *rt.Server, repo, platform string, tags ...string) {
	t.Helper()
	for i, tag := range tags {
		s.Push(t, repo, tag, rt.Image(day(i), platform, rt.WithSeed(repo+tag)))
	}
}

// shortTempDir returns a directory short enough for unix socket paths.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cir")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func socketPath(t testing.TB) string { return filepath.Join(shortTempDir(t), "d.sock") }

// basicKeychain answers every registry with the same credentials.
type basicKeychain struct{ user, pass string }

func (k basicKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return &authn.Basic{Username: k.user, Password: k.pass}, nil
}
