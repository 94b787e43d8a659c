package daemon

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
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

// fakeClock is the clock of a daemon's registry cache in tests: a TTL passes when
// the test says so, not while it sleeps.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// withClock runs the daemon's registry cache on c.
func withClock(c *fakeClock) Option { return withCacheOptions(cache.WithClock(c.Now)) }

// pinFlushes is told each time the daemon's pin writer is done with a batch
// (written, or failed and queued again or dropped).
type pinFlushes chan struct{}

// watchPinWrites returns the daemon Option that tells the returned pinFlushes.
func watchPinWrites() (pinFlushes, Option) {
	f := make(pinFlushes, 1)
	return f, withPinWriterOptions(pin.WithAfterFlush(func() {
		select {
		case f <- struct{}{}:
		default: // a wake-up is pending already: the waiter looks at Pending again
		}
	}))
}

// waitWritten waits until d's pin writer has written, or given up on, every pin
// submitted so far (a render's pins are submitted before its answer, a pass's
// before Pass returns): after it, no commit of theirs can still land.
func (f pinFlushes) waitWritten(t *testing.T, d *Daemon) {
	t.Helper()
	w := d.pins.(*pin.Writer)
	guard := time.After(time.Minute)
	for w.Pending() > 0 {
		select {
		case <-f:
		case <-guard:
			t.Fatalf("%d pins still not written after a minute", w.Pending())
		}
	}
}
