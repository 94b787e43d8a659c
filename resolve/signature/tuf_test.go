package signature_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

// tufEnv is a TUF repository served over HTTP, with the paths asked for.
type tufEnv struct {
	t    testing.TB
	repo *signtest.TUFRepo
	srv  *httptest.Server
	mu   sync.Mutex
	hits []string
	// override, when set, answers instead of the repository.
	override atomic.Pointer[http.HandlerFunc]
	log      *lockedBuffer
}

func newTUF(t testing.TB) *tufEnv {
	t.Helper()
	repo, err := signtest.NewTUFRepo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	te := &tufEnv{t: t, repo: repo, log: &lockedBuffer{}}
	files := http.FileServer(http.Dir(repo.Dir))
	te.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		te.mu.Lock()
		te.hits = append(te.hits, r.URL.Path)
		te.mu.Unlock()
		if h := te.override.Load(); h != nil {
			(*h)(w, r)
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(te.srv.Close)
	return te
}

// publish makes sg's virtual Sigstore the repository's trusted_root.json.
func (te *tufEnv) publish(sg *signtest.Signer) {
	te.t.Helper()
	b, err := sg.TrustedRootJSON()
	if err != nil {
		te.t.Fatal(err)
	}
	if err := te.repo.Publish(signtest.TrustedRootTarget, b); err != nil {
		te.t.Fatal(err)
	}
}

// take returns the paths asked for since the last take.
func (te *tufEnv) take() []string {
	te.mu.Lock()
	defer te.mu.Unlock()
	h := te.hits
	te.hits = nil
	return h
}

// fetched is what one refresh asks for when the repository is at snapshot and
// targets version n: the next root version (none), then the top-level
// metadata, then the trusted root by its hash.
func (te *tufEnv) fetched(n string) []string {
	target := "/targets/" + filepath.Base(te.repo.CurrentTargetPath(signtest.TrustedRootTarget))
	return []string{"/2.root.json", "/timestamp.json", "/" + n + ".snapshot.json", "/" + n + ".targets.json", target}
}

// root makes a TUFRoot on the repository, trusting its root.json.
func (te *tufEnv) root(o signature.TUFOptions) *signature.TUFRoot {
	te.t.Helper()
	rj, err := te.repo.RootJSON()
	if err != nil {
		te.t.Fatal(err)
	}
	o.URL, o.Root, o.Logger = te.srv.URL, rj, slog.New(slog.NewTextHandler(te.log, nil))
	tr, err := signature.NewTUFRoot(o)
	if err != nil {
		te.t.Fatal(err)
	}
	return tr
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// signedBy pushes repo:tag and signs it keyless (identity release) with sg.
func signedBy(e *env, sg *signtest.Signer, repo, tag string) v1.Hash {
	e.t.Helper()
	d := e.push(repo, tag)
	if err := sg.Sign(context.Background(), e.repo(repo).Digest(d.String()), signtest.Referrers, keyless(release), remote.WithAuth(authn.Anonymous)); err != nil {
		e.t.Fatal(err)
	}
	return d
}

var (
	secondSignerOnce sync.Once
	secondSigner     *signtest.Signer
	secondSignerErr  error
)

// signerB is a second virtual Sigstore: another CA, log and timestamp authority.
func signerB(t testing.TB) *signtest.Signer {
	t.Helper()
	secondSignerOnce.Do(func() { secondSigner, secondSignerErr = signtest.New() })
	if secondSignerErr != nil {
		t.Fatal(secondSignerErr)
	}
	return secondSigner
}

// verifies says whether repo@d verifies keyless under v (an error that is not
// an UnverifiedError fails the test).
func verifies(t testing.TB, e *env, v *signature.Verifier, repo string, d v1.Hash) bool {
	t.Helper()
	_, err := v.Verify(context.Background(), subject(e, repo, d, nil), trustKeyless(t, release, ghIssuer))
	var ue *resolve.UnverifiedError
	if err != nil && !errors.As(err, &ue) {
		t.Fatalf("verify %s@%s: %v", repo, d, err)
	}
	return err == nil
}

func rootID(t testing.TB, tr *signature.TUFRoot) string {
	t.Helper()
	_, id, err := tr.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestTUFRootRefresh: the trusted root comes from a TUF repository, verified; the
// first keyless verification fetches it (5 requests), the next ones do not; when
// the repository publishes a trusted root of another Sigstore, a refresh makes
// that Sigstore's signatures verify and, as the new root does not keep the old
// CA, the old one's no longer do (their cached verdicts included).
func TestTUFRootRefresh(t *testing.T) {
	e, te := newEnv(t), newTUF(t)
	sgA, sgB := e.sg, signerB(t)
	dA, dB := signedBy(e, sgA, "app", "a"), signedBy(e, sgB, "app", "b")
	te.publish(sgA)
	tr := te.root(signature.TUFOptions{})
	if hits := te.take(); len(hits) != 0 {
		t.Fatalf("NewTUFRoot fetched %v; the first use fetches", hits)
	}
	v := e.verifier(e.reg, signature.WithTrustedMaterial(tr))

	if !verifies(t, e, v, "app", dA) {
		t.Fatal("A's signature does not verify under A's root from TUF")
	}
	if got, want := te.take(), te.fetched("1"); !slices.Equal(got, want) {
		t.Errorf("first use fetched %v, want %v", got, want)
	}
	if verifies(t, e, v, "app", dB) {
		t.Error("B's signature verifies under A's root")
	}
	if hits := te.take(); len(hits) != 0 {
		t.Errorf("a second use fetched %v", hits)
	}

	te.publish(sgB)
	if verifies(t, e, v, "app", dB) {
		t.Error("B's signature verifies before the refresh")
	}
	if err := tr.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := te.take(), te.fetched("2"); !slices.Equal(got, want) {
		t.Errorf("refresh fetched %v, want %v", got, want)
	}
	if !verifies(t, e, v, "app", dB) {
		t.Error("B's signature does not verify after the refresh to B's root")
	}
	if verifies(t, e, v, "app", dA) {
		t.Error("A's signature still verifies under B's root (a cached verdict of the old root reused?)")
	}
	// a root listing both Sigstores: both verify
	both, err := signtest.TrustedRootJSON(sgA, sgB)
	if err != nil {
		t.Fatal(err)
	}
	if err := te.repo.Publish(signtest.TrustedRootTarget, both); err != nil {
		t.Fatal(err)
	}
	if err := tr.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !verifies(t, e, v, "app", dA) || !verifies(t, e, v, "app", dB) {
		t.Error("under a root listing both Sigstores, A's or B's signature does not verify")
	}
	if n := strings.Count(te.log.String(), "fetched through TUF"); n != 3 {
		t.Errorf("%d fetches logged, want 3:\n%s", n, te.log)
	}
}

// TestTUFRootRotation: a new TUF root (a new timestamp key) is verified by the
// old one and trusted from then on: the refresh after it starts from the new
// version (asks for 3.root.json, not 2.root.json again).
func TestTUFRootRotation(t *testing.T) {
	e, te := newEnv(t), newTUF(t)
	te.publish(e.sg)
	tr := te.root(signature.TUFOptions{})
	if err := tr.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	te.take()
	if err := te.repo.RotateTimestampKey(); err != nil {
		t.Fatal(err)
	}
	for i, first := range []string{"/2.root.json", "/3.root.json"} {
		if err := tr.Refresh(context.Background()); err != nil {
			t.Fatalf("refresh %d after the rotation: %v", i+1, err)
		}
		hits := te.take()
		if len(hits) == 0 || hits[0] != first {
			t.Errorf("refresh %d after the rotation asked for %v, want %s first", i+1, hits, first)
		}
	}
}

// TestTUFRefreshRefused: a repository that serves a tampered trusted root, an
// expired timestamp, older metadata than already seen or a 100 MiB timestamp is
// refused with an error naming trust.tufURL, logged, and the last good root is
// kept: verifications go on with it.
func TestTUFRefreshRefused(t *testing.T) {
	e := newEnv(t)
	sgA, sgB := e.sg, signerB(t)
	dA, dB := signedBy(e, sgA, "app", "a"), signedBy(e, sgB, "app", "b")
	huge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/timestamp.json" {
			http.NotFound(w, r)
			return
		}
		chunk := bytes.Repeat([]byte(" "), 1<<20)
		for range 100 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	tests := []struct {
		name  string
		spoil func(t *testing.T, te *tufEnv, tr *signature.TUFRoot)
		keptB bool // the last good root is B's (else A's)
		want  string
	}{
		{"tampered trusted root", func(t *testing.T, te *tufEnv, _ *signature.TUFRoot) {
			te.publish(sgB)
			p := te.repo.CurrentTargetPath(signtest.TrustedRootTarget)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 1 // same length, another hash
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, false, "hash verification failed"},
		{"expired timestamp", func(t *testing.T, te *tufEnv, _ *signature.TUFRoot) {
			te.publish(sgB)
			if err := te.repo.PublishTimestamp(time.Now().Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
		}, false, "timestamp.json is expired"},
		{"rollback", func(t *testing.T, te *tufEnv, tr *signature.TUFRoot) {
			old, err := os.ReadFile(filepath.Join(te.repo.Dir, "timestamp.json"))
			if err != nil {
				t.Fatal(err)
			}
			te.publish(sgB)
			if err := tr.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(te.repo.Dir, "timestamp.json"), old, 0o644); err != nil {
				t.Fatal(err)
			}
		}, true, "rollback refused: timestamp version 1 and snapshot version 1 are older than 2 and 2"},
		{"100 MiB timestamp", func(t *testing.T, te *tufEnv, _ *signature.TUFRoot) {
			te.override.Store(&huge)
		}, false, "larger than 16384 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			te := newTUF(t)
			te.publish(sgA)
			tr := te.root(signature.TUFOptions{})
			v := e.verifier(e.reg, signature.WithTrustedMaterial(tr))
			if !verifies(t, e, v, "app", dA) {
				t.Fatal("A's signature does not verify under A's root from TUF")
			}
			tc.spoil(t, te, tr)
			kept := rootID(t, tr)
			err := tr.Refresh(context.Background())
			if err == nil || !strings.Contains(err.Error(), "trust.tufURL "+te.srv.URL) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refresh: %v; want an error naming trust.tufURL %s and %q", err, te.srv.URL, tc.want)
			}
			if id := rootID(t, tr); id != kept {
				t.Errorf("root %s after a refused refresh, want the last good %s", id, kept)
			}
			if got := verifies(t, e, v, "app", dB); got != tc.keptB {
				t.Errorf("B verifies: %t, want %t (the last good root kept)", got, tc.keptB)
			}
			if got := verifies(t, e, v, "app", dA); got == tc.keptB {
				t.Errorf("A verifies: %t, want %t (the last good root kept)", got, !tc.keptB)
			}
			if l := te.log.String(); !strings.Contains(l, "keeping the last good root") || !strings.Contains(l, "kept="+kept) {
				t.Errorf("the refused refresh is not logged with the root kept:\n%s", l)
			}
		})
	}
}

// TestTUFHangingRepository: a repository that never answers costs one refresh
// its timeout, not a hang; with no root yet, keyless verification fails with an
// error naming trust.tufURL and the cause, and the next attempt waits (a minute,
// then doubling) instead of asking again at each verification.
func TestTUFHangingRepository(t *testing.T) {
	e, te := newEnv(t), newTUF(t)
	te.publish(e.sg)
	unblock := make(chan struct{})
	defer close(unblock)
	hang := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-unblock:
		}
	})
	te.override.Store(&hang)
	now := time.Now()
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	tr := te.root(signature.TUFOptions{Timeout: 200 * time.Millisecond, Now: func() time.Time { return *clock.Load() }})
	v := e.verifier(e.reg, signature.WithTrustedMaterial(tr))
	d := signedBy(e, e.sg, "app", "a")

	done := make(chan error, 1)
	go func() {
		_, err := v.Verify(context.Background(), subject(e, "app", d, nil), trustKeyless(t, release, ghIssuer))
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a hanging TUF repository hangs the verification past its 200ms timeout")
	}
	var ue *resolve.UnverifiedError
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "trust.tufURL "+te.srv.URL) || !strings.Contains(err.Error(), "context deadline exceeded") {
		t.Fatalf("verify with a hanging repository: %v; want an error (not a skip) naming trust.tufURL and the deadline", err)
	}
	if hits := te.take(); !slices.Equal(hits, []string{"/2.root.json"}) {
		t.Errorf("asked for %v, want the next root version once", hits)
	}
	// within the minute: no new attempt
	if _, _, err := tr.Current(context.Background()); err == nil || !strings.Contains(err.Error(), "context deadline exceeded") {
		t.Errorf("current within the retry wait: %v", err)
	}
	if hits := te.take(); len(hits) != 0 {
		t.Errorf("asked again within the retry wait: %v", hits)
	}
	// a minute later, the repository answers: the root is fetched and used
	later := now.Add(time.Minute)
	clock.Store(&later)
	te.override.Store(nil)
	if !verifies(t, e, v, "app", d) {
		t.Error("no verification after the repository came back")
	}
	if got, want := te.take(), te.fetched("1"); !slices.Equal(got, want) {
		t.Errorf("fetched %v, want %v", got, want)
	}
}

// TestTUFBackgroundRefresh: with a starting root (trust.trustedRoot), the first
// use verifies with it and fetches in the background; once that is done the
// fetched root is used. A refresh is due again after the refresh interval, not
// before, and runs in the background.
func TestTUFBackgroundRefresh(t *testing.T) {
	e, te := newEnv(t), newTUF(t)
	sgA, sgB := e.sg, signerB(t)
	dA, dB := signedBy(e, sgA, "app", "a"), signedBy(e, sgB, "app", "b")
	te.publish(sgB)
	now := time.Now()
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	tr := te.root(signature.TUFOptions{Initial: sgA.TrustedMaterial(), Refresh: time.Hour, Now: func() time.Time { return *clock.Load() }})
	v := e.verifier(e.reg, signature.WithTrustedMaterial(tr))

	if !verifies(t, e, v, "app", dA) {
		t.Error("A's signature does not verify under the starting root")
	}
	tr.WaitRefresh()
	if got, want := te.take(), te.fetched("1"); !slices.Equal(got, want) {
		t.Errorf("background fetch asked for %v, want %v", got, want)
	}
	if !verifies(t, e, v, "app", dB) || verifies(t, e, v, "app", dA) {
		t.Error("after the background fetch, B's root is not the one used")
	}
	for _, c := range []struct {
		after time.Duration
		want  []string
	}{{59 * time.Minute, nil}, {time.Hour, te.fetched("1")}} {
		at := now.Add(c.after)
		clock.Store(&at)
		if _, _, err := tr.Current(context.Background()); err != nil {
			t.Fatal(err)
		}
		tr.WaitRefresh()
		if got := te.take(); !slices.Equal(got, c.want) {
			t.Errorf("%s after the fetch: asked for %v, want %v", c.after, got, c.want)
		}
	}
}

// TestTUFRootOptions: a TUF root is required unless the URL is the public-good
// repository's, whose root sigstore-go embeds; bad URLs and roots are errors
// naming the setting.
func TestTUFRootOptions(t *testing.T) {
	te := newTUF(t)
	rj, err := te.repo.RootJSON()
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Replace(rj, []byte(`"version": 1`), []byte(`"version": 7`), 1)
	tests := []struct {
		name string
		o    signature.TUFOptions
		want string // "" for no error
	}{
		{"public good, embedded root", signature.TUFOptions{URL: signature.PublicGoodTUFURL}, ""},
		{"public good, trailing slash", signature.TUFOptions{URL: signature.PublicGoodTUFURL + "/"}, ""},
		{"repository with its root", signature.TUFOptions{URL: te.srv.URL, Root: rj}, ""},
		{"other repository without root", signature.TUFOptions{URL: "https://tuf.example.com"}, "trust.tufRoot: not set, and trust.tufURL https://tuf.example.com is not"},
		{"root not signed by itself", signature.TUFOptions{URL: te.srv.URL, Root: tampered}, "trust.tufRoot: not a TUF root.json signed by its own keys"},
		{"root not JSON", signature.TUFOptions{URL: te.srv.URL, Root: []byte("root")}, "trust.tufRoot: not a TUF root.json"},
		{"ftp", signature.TUFOptions{URL: "ftp://tuf.example.com", Root: rj}, `trust.tufURL: "ftp://tuf.example.com" (accepted: the base URL of a TUF repository, http or https`},
		{"credentials", signature.TUFOptions{URL: "https://u:s3cret@tuf.example.com", Root: rj}, `"https://u:xxxxx@tuf.example.com" (accepted: the base URL of a TUF repository, http or https, without credentials`},
		{"no host", signature.TUFOptions{URL: "https:///x", Root: rj}, `trust.tufURL: "https:///x"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := signature.NewTUFRoot(tc.o)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one with %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "s3cret"):
				t.Errorf("error shows the URL's password: %v", err)
			}
		})
	}
	if hits := te.take(); len(hits) != 0 {
		t.Errorf("checking options fetched %v", hits)
	}
}
