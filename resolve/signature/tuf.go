package signature

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sigstore/sigstore-go/pkg/root"
	sigtuf "github.com/sigstore/sigstore-go/pkg/tuf"
	"github.com/theupdateframework/go-tuf/v2/metadata"
	tufconfig "github.com/theupdateframework/go-tuf/v2/metadata/config"
	"github.com/theupdateframework/go-tuf/v2/metadata/trustedmetadata"
	"github.com/theupdateframework/go-tuf/v2/metadata/updater"
)

// TUF refresh defaults and bounds.
const (
	// DefaultTUFRefresh is how old a trusted root fetched through TUF may get
	// before a verification starts a refresh (trust.tufRefresh).
	DefaultTUFRefresh = 24 * time.Hour
	// DefaultTUFTimeout bounds one refresh: every request of it, root
	// rotations included.
	DefaultTUFTimeout = time.Minute
	// tufRetryMin is the first wait after a failed refresh; it doubles with each
	// failure in a row, up to the refresh interval.
	tufRetryMin = time.Minute
	// maxTUFFile bounds any one file of a refresh, whatever the metadata says
	// (the TUF client's own bounds are lower for metadata: root 512 KB, timestamp
	// 16 KiB, snapshot 2 MB, targets 5 MB).
	maxTUFFile = maxRootFile
	// trustedRootTarget is the TUF target of Sigstore's trusted root.
	trustedRootTarget = "trusted_root.json"
)

// PublicGoodTUFURL is the TUF repository of Sigstore's public-good instance
// (what `cosign sign` uses by default); the TUF root sigstore-go embeds is its
// default trust anchor.
const PublicGoodTUFURL = sigtuf.DefaultMirror

// TUFOptions configure a TUFRoot.
type TUFOptions struct {
	// URL is the TUF repository's base URL (trust.tufURL): its metadata at
	// URL/<version>.root.json, URL/timestamp.json, ..., its targets under
	// URL/targets/.
	URL string
	// Root is the TUF root.json trust starts from (trust.tufRoot); nil for the
	// public-good root sigstore-go embeds, accepted only when URL is
	// PublicGoodTUFURL.
	Root []byte
	// Initial is the trusted root used until the first refresh succeeds
	// (trust.trustedRoot); nil: none, and keyless verifications fail, saying
	// why, until then.
	Initial root.TrustedMaterial
	// Refresh is how old the trusted root may get before a verification starts a
	// refresh in the background (default DefaultTUFRefresh).
	Refresh time.Duration
	// Timeout bounds one refresh (default DefaultTUFTimeout).
	Timeout time.Duration
	// Client makes the requests (default: a client of its own with the
	// environment's proxy settings).
	Client *http.Client
	// Logger reports refreshes (default slog.Default()).
	Logger *slog.Logger
	// Now replaces time.Now for when a refresh is due (tests).
	Now func() time.Time
}

// TUFRoot is a Sigstore trusted root (trusted_root.json) fetched from a TUF
// repository and verified by its metadata (go-tuf's client workflow: root
// rotations, then timestamp, snapshot and targets, each signed by its role's
// keys and not expired, then the target's length and hashes). It is refreshed
// when used and older than TUFOptions.Refresh: a refresh runs in the
// background, bounded by TUFOptions.Timeout, while verifications go on with the
// root they have; a refresh that fails keeps the last good root and is logged,
// and the next is tried after a minute, doubling up to the refresh interval.
// No goroutine runs between refreshes, so there is nothing to stop.
//
// Between refreshes it keeps, in memory, the newest TUF root it verified (a
// rotated root is trusted from then on) and the newest timestamp and snapshot
// versions: a repository that serves older ones (a rollback) is refused.
//
// It is a root.TrustedMaterial (the current root); Current also gives an ID that
// changes with the root, so that verdicts are cached per root.
type TUFRoot struct {
	o   TUFOptions
	cur atomic.Pointer[rootState]
	// next is when a refresh is due (UnixNano).
	next atomic.Int64
	// busy is set while a background refresh runs.
	busy atomic.Bool
	wg   sync.WaitGroup

	mu      sync.Mutex // serializes refreshes; guards the fields below
	tufRoot []byte     // the newest verified TUF root.json
	tsVer   int64      // the newest timestamp version accepted
	snapVer int64      // the newest snapshot version accepted
	fails   int        // refreshes failed in a row
	lastErr error
}

// rootState is one trusted root and its ID.
type rootState struct {
	tm root.TrustedMaterial
	id string
}

var _ root.TrustedMaterial = (*TUFRoot)(nil)

// NewTUFRoot checks the options (the URL and the TUF root, whose signatures must
// meet its own threshold) and returns a TUFRoot that fetches nothing yet: the
// first use fetches (in the background when there is an Initial root).
func NewTUFRoot(o TUFOptions) (*TUFRoot, error) {
	if o.Refresh <= 0 {
		o.Refresh = DefaultTUFRefresh
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTUFTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if err := checkTUFURL(o.URL); err != nil {
		return nil, err
	}
	if len(o.Root) == 0 {
		if strings.TrimSuffix(o.URL, "/") != PublicGoodTUFURL {
			return nil, fmt.Errorf("trust.tufRoot: not set, and trust.tufURL %s is not Sigstore's public-good repository (%s), whose root sigstore-go embeds: give the TUF root.json of %s", o.URL, PublicGoodTUFURL, o.URL)
		}
		o.Root = sigtuf.DefaultRoot()
	}
	if _, err := trustedmetadata.New(o.Root); err != nil {
		return nil, fmt.Errorf("trust.tufRoot: not a TUF root.json signed by its own keys: %w", err)
	}
	t := &TUFRoot{o: o, tufRoot: o.Root}
	if o.Initial != nil {
		t.cur.Store(&rootState{tm: o.Initial, id: "file"})
	}
	return t, nil
}

// checkTUFURL accepts an http or https URL with a host and nothing else.
func checkTUFURL(u string) error {
	const accepted = "the base URL of a TUF repository, http or https, without credentials, query or fragment"
	pu, err := url.Parse(u)
	if err != nil {
		return fmt.Errorf("trust.tufURL: not a URL (accepted: %s)", accepted) // the text may hold a password
	}
	if (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" || pu.User != nil || pu.RawQuery != "" || pu.Fragment != "" {
		return fmt.Errorf("trust.tufURL: %q (accepted: %s)", pu.Redacted(), accepted)
	}
	return nil
}

// Current is the trusted root to verify with now and its ID, starting a
// refresh when one is due: in the background when there is a root, else now
// (bounded by ctx and the timeout). An error says why there is no root yet.
func (t *TUFRoot) Current(ctx context.Context) (root.TrustedMaterial, string, error) {
	s := t.cur.Load()
	if t.due() {
		if s == nil {
			_ = t.refresh(ctx, false) // logged; the error below says why
			s = t.cur.Load()
		} else if t.busy.CompareAndSwap(false, true) {
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				defer t.busy.Store(false)
				_ = t.refresh(context.Background(), false) // logged
			}()
		}
	}
	if s != nil {
		return s.tm, s.id, nil
	}
	t.mu.Lock()
	err := t.lastErr
	t.mu.Unlock()
	if err == nil {
		err = fmt.Errorf("trust.tufURL %s: not fetched yet", t.o.URL)
	}
	return nil, "", fmt.Errorf("keyless verification needs a Sigstore trusted root, and none could be fetched yet: %w", err)
}

// Refresh fetches and verifies the trusted root now, bounded by ctx and the
// timeout. On success it is used from then on; on failure the last good root is
// kept and the error (naming trust.tufURL and the repository) is returned and
// logged.
func (t *TUFRoot) Refresh(ctx context.Context) error { return t.refresh(ctx, true) }

func (t *TUFRoot) due() bool { return t.o.Now().UnixNano() >= t.next.Load() }

// refresh fetches unless another refresh made it not due (force: fetch anyway).
func (t *TUFRoot) refresh(ctx context.Context, force bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !force && !t.due() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, t.o.Timeout)
	defer cancel()
	st, err := t.fetch(ctx)
	if err != nil {
		t.fails++
		wait := min(t.o.Refresh, tufRetryMin<<min(t.fails-1, 16))
		t.next.Store(t.o.Now().Add(wait).UnixNano())
		t.lastErr = fmt.Errorf("trust.tufURL %s: %w", t.o.URL, err)
		kept := "none"
		if s := t.cur.Load(); s != nil {
			kept = s.id
		}
		t.o.Logger.Warn("sigstore trusted root: TUF refresh failed, keeping the last good root",
			"tufURL", t.o.URL, "kept", kept, "retryIn", wait.String(), "error", err.Error())
		return t.lastErr
	}
	t.fails, t.lastErr = 0, nil
	t.next.Store(t.o.Now().Add(t.o.Refresh).UnixNano())
	if old := t.cur.Swap(st); old == nil || old.id != st.id {
		t.o.Logger.Info("sigstore trusted root: fetched through TUF", "tufURL", t.o.URL, "root", st.id,
			"timestampVersion", t.tsVer, "snapshotVersion", t.snapVer)
	}
	return nil
}

// fetch runs the TUF client workflow from the newest verified TUF root and
// returns the verified trusted root; t.mu is held.
func (t *TUFRoot) fetch(ctx context.Context) (*rootState, error) {
	cfg, err := tufconfig.New(t.o.URL, t.tufRoot)
	if err != nil {
		return nil, err
	}
	cfg.DisableLocalCache = true
	// Without a cache the client still looks for <dir>/timestamp.json etc. on
	// disk (then verifies what it finds); a directory that cannot exist makes
	// sure it never reads the working directory's files.
	cfg.LocalMetadataDir = filepath.Join(os.DevNull, "no-tuf-cache")
	f := &tufFetcher{ctx: ctx, client: t.o.Client, roots: map[int64][]byte{}}
	cfg.Fetcher = f
	up, err := updater.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := up.Refresh(); err != nil {
		return nil, err
	}
	md := up.GetTrustedMetadataSet()
	ts, snap := md.Timestamp.Signed.Version, md.Snapshot.Signed.Version
	if ts < t.tsVer || snap < t.snapVer {
		return nil, fmt.Errorf("rollback refused: timestamp version %d and snapshot version %d are older than %d and %d already seen", ts, snap, t.tsVer, t.snapVer)
	}
	ti, err := up.GetTargetInfo(trustedRootTarget)
	if err != nil {
		return nil, err
	}
	_, b, err := up.DownloadTarget(ti, "", "")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", trustedRootTarget, err)
	}
	tr, err := root.NewTrustedRootFromJSON(b)
	if err != nil {
		return nil, fmt.Errorf("%s: not a Sigstore trusted root: %w", trustedRootTarget, err)
	}
	if v := md.Root.Signed.Version; f.roots[v] != nil {
		t.tufRoot = f.roots[v] // a rotation: trusted from now on
	}
	t.tsVer, t.snapVer = ts, snap
	sum := sha256.Sum256(b)
	return &rootState{tm: tr, id: hex.EncodeToString(sum[:8])}, nil
}

// tufFetcher is go-tuf's Fetcher over one refresh's context: each file bounded
// by what the metadata allows and by maxTUFFile.
type tufFetcher struct {
	ctx    context.Context
	client *http.Client
	roots  map[int64][]byte // <version>.root.json files downloaded, by version
}

// DownloadFile implements fetcher.Fetcher.
func (f *tufFetcher) DownloadFile(u string, maxLength int64, _ time.Duration) ([]byte, error) {
	maxLength = min(maxLength, maxTUFFile)
	req, err := http.NewRequestWithContext(f.ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// the client tells a missing next root version (404) by this type
		return nil, &metadata.ErrDownloadHTTP{StatusCode: resp.StatusCode, URL: u}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxLength+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	if int64(len(b)) > maxLength {
		return nil, &metadata.ErrDownloadLengthMismatch{Msg: fmt.Sprintf("%s: larger than %d bytes", u, maxLength)}
	}
	var v int64
	if n, _ := fmt.Sscanf(path.Base(req.URL.Path), "%d.root.json", &v); n == 1 && path.Base(req.URL.Path) == fmt.Sprintf("%d.root.json", v) {
		f.roots[v] = b
	}
	return b, nil
}

// current is the root now, without starting a refresh.
func (t *TUFRoot) current() root.TrustedMaterial {
	if s := t.cur.Load(); s != nil {
		return s.tm
	}
	return &root.BaseTrustedMaterial{}
}

// TimestampingAuthorities implements root.TrustedMaterial with the current root.
func (t *TUFRoot) TimestampingAuthorities() []root.TimestampingAuthority {
	return t.current().TimestampingAuthorities()
}

// FulcioCertificateAuthorities implements root.TrustedMaterial with the current root.
func (t *TUFRoot) FulcioCertificateAuthorities() []root.CertificateAuthority {
	return t.current().FulcioCertificateAuthorities()
}

// RekorLogs implements root.TrustedMaterial with the current root.
func (t *TUFRoot) RekorLogs() map[string]*root.TransparencyLog { return t.current().RekorLogs() }

// CTLogs implements root.TrustedMaterial with the current root.
func (t *TUFRoot) CTLogs() map[string]*root.TransparencyLog { return t.current().CTLogs() }

// PublicKeyVerifier implements root.TrustedMaterial with the current root.
func (t *TUFRoot) PublicKeyVerifier(keyID string) (root.TimeConstrainedVerifier, error) {
	return t.current().PublicKeyVerifier(keyID)
}
