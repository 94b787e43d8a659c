package signature

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"
	sigsig "github.com/sigstore/sigstore/pkg/signature"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Defaults of a Verifier.
const (
	DefaultMaxReferrers = 128
	DefaultMaxBytes     = resolve.DefaultMaxSignatureBytes
	DefaultSuccessTTL   = 24 * time.Hour
	// DefaultFailureTTL is short: a signature added to a skipped tag is seen by
	// the next refresh after it.
	DefaultFailureTTL = 2 * time.Minute
	// noReferrersTTL is how long a registry host is remembered to have no
	// referrers API.
	noReferrersTTL = 10 * time.Minute
)

// Limits bound what one candidate's signatures may make the verifier read.
type Limits struct {
	// MaxReferrers caps the signature entries of one referrers list and the
	// layers of one .sig manifest (setting trust.maxReferrers).
	MaxReferrers int
	// MaxBytes caps each signature manifest, layer and bundle read (setting
	// trust.maxSignatureBytes; give the registry client the same cap for
	// referrers lists, resolve.WithSignatureLimits).
	MaxBytes int64
}

type options struct {
	keys        map[string]crypto.PublicKey
	trusted     root.TrustedMaterial
	requireTlog *bool
	requireSCT  bool
	cache       resolve.VerdictCache
	okTTL       time.Duration
	failTTL     time.Duration
	limits      Limits
	log         *slog.Logger
	now         func() time.Time
}

// Option configures a Verifier.
type Option func(*options)

// WithPublicKeys sets the operator's named public keys (trust.keys), what a
// requirement's Key names.
func WithPublicKeys(keys map[string]crypto.PublicKey) Option {
	return func(o *options) { o.keys = keys }
}

// WithTrustedMaterial sets the Sigstore trust root (trust.trustedRoot, see
// LoadTrustedRoot) that keyless signatures chain to: Fulcio CAs, Rekor logs, CT
// logs, timestamp authorities. Without it keyless requirements fail with an
// error naming the setting.
func WithTrustedMaterial(tm root.TrustedMaterial) Option {
	return func(o *options) { o.trusted = tm }
}

// WithRequireTlog sets whether a transparency-log entry is required
// (trust.requireTlog). Unset: required for keyless signatures, not for keys.
func WithRequireTlog(require bool) Option {
	return func(o *options) { o.requireTlog = &require }
}

// WithRequireSCT sets whether a keyless certificate must carry a signed
// certificate timestamp (trust.requireSCT; default true, as cosign).
func WithRequireSCT(require bool) Option { return func(o *options) { o.requireSCT = require } }

// WithVerdictCache sets where verdicts are kept (default: an in-memory cache of
// this Verifier).
func WithVerdictCache(c resolve.VerdictCache) Option { return func(o *options) { o.cache = c } }

// WithVerdictTTL sets how long a success and a failure are cached (defaults
// DefaultSuccessTTL, DefaultFailureTTL). The failure TTL bounds how long a
// signature added to a skipped tag goes unseen. A value <= 0 keeps the default.
func WithVerdictTTL(success, failure time.Duration) Option {
	return func(o *options) {
		if success > 0 {
			o.okTTL = success
		}
		if failure > 0 {
			o.failTTL = failure
		}
	}
}

// WithLimits bounds the reads per candidate; a field <= 0 keeps its default
// (DefaultMaxReferrers, DefaultMaxBytes).
func WithLimits(l Limits) Option {
	return func(o *options) {
		if l.MaxReferrers > 0 {
			o.limits.MaxReferrers = l.MaxReferrers
		}
		if l.MaxBytes > 0 {
			o.limits.MaxBytes = l.MaxBytes
		}
	}
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithClock replaces time.Now for the in-memory verdict cache and the memory of
// registries without a referrers API (tests).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// Verifier is the resolver's resolve.SignatureVerifier. It is safe for
// concurrent use.
type Verifier struct {
	reg  resolve.Registry
	o    options
	keys map[string]keyCheck // by key name

	keylessMu sync.Mutex
	keyless   *verify.Verifier // for the root of ID keylessID
	keylessID string

	noReferrers sync.Map // registry host -> time.Time until which it has no referrers API
}

var _ resolve.SignatureVerifier = (*Verifier)(nil)

// keyCheck is one operator key: its sigstore-go verifier and fingerprint.
type keyCheck struct {
	v           *verify.Verifier
	err         error // why the key cannot verify (a configuration error)
	fingerprint string
}

// New returns a Verifier reading signatures from reg. It fails when a public key
// cannot be used.
func New(reg resolve.Registry, opts ...Option) (*Verifier, error) {
	o := options{
		requireSCT: true,
		okTTL:      DefaultSuccessTTL,
		failTTL:    DefaultFailureTTL,
		limits:     Limits{MaxReferrers: DefaultMaxReferrers, MaxBytes: DefaultMaxBytes},
		log:        slog.Default(),
		now:        time.Now,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if reg == nil {
		return nil, errors.New("signature verifier: no registry")
	}
	if o.cache == nil {
		o.cache = NewMemoryCache(o.now)
	}
	v := &Verifier{reg: reg, o: o, keys: map[string]keyCheck{}}
	for name, pub := range o.keys {
		kc, err := v.keyVerifier(name, pub)
		if err != nil {
			return nil, fmt.Errorf("signature verifier: key %s: %w", name, err)
		}
		v.keys[name] = kc
	}
	return v, nil
}

// keyVerifier builds the sigstore-go verifier of one named key.
func (v *Verifier) keyVerifier(name string, pub crypto.PublicKey) (keyCheck, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return keyCheck{}, fmt.Errorf("not a usable public key: %w", err)
	}
	sv, err := sigsig.LoadDefaultVerifier(pub)
	if err != nil {
		return keyCheck{}, fmt.Errorf("not a usable public key: %w", err)
	}
	sum := sha256.Sum256(der)
	kc := keyCheck{fingerprint: fmt.Sprintf("%x", sum[:8])}
	key := root.NewExpiringKey(sv, time.Time{}, time.Time{})
	material := root.TrustedMaterialCollection{
		root.NewTrustedPublicKeyMaterial(func(string) (root.TimeConstrainedVerifier, error) { return key, nil }),
	}
	var vopts []verify.VerifierOption
	if v.requireTlog(false) {
		if v.o.trusted == nil {
			kc.err = fmt.Errorf("a transparency-log entry is required (trust.requireTlog) but no Sigstore trusted root (trust.trustedRoot or trust.tufURL) gives the log's key")
			return kc, nil
		}
		material = append(material, v.o.trusted)
		vopts = append(vopts, verify.WithTransparencyLog(1), verify.WithIntegratedTimestamps(1))
	} else {
		vopts = append(vopts, verify.WithNoObserverTimestamps())
	}
	kc.v, err = verify.NewVerifier(material, append(vopts, verify.WithoutStatementPredicate())...)
	return kc, err
}

// requireTlog is whether a log entry is required, keyless or not.
func (v *Verifier) requireTlog(keyless bool) bool {
	if v.o.requireTlog != nil {
		return *v.o.requireTlog
	}
	return keyless
}

// liveRoot is trusted material that changes while the verifier runs (TUFRoot):
// Current is the material to verify with now and an ID that changes with it.
type liveRoot interface {
	Current(ctx context.Context) (root.TrustedMaterial, string, error)
}

// trustedNow is the trust root to verify with now and its ID ("" for a root
// that does not change), or an error when there is none.
func (v *Verifier) trustedNow(ctx context.Context) (root.TrustedMaterial, string, error) {
	if lr, ok := v.o.trusted.(liveRoot); ok {
		return lr.Current(ctx)
	}
	if v.o.trusted == nil {
		return nil, "", errors.New("keyless verification needs a Sigstore trusted root (setting trust.trustedRoot or trust.tufURL)")
	}
	return v.o.trusted, "", nil
}

// keylessVerifier is the sigstore-go verifier of keyless signatures against the
// trust root now, and the root's ID.
func (v *Verifier) keylessVerifier(ctx context.Context) (*verify.Verifier, string, error) {
	tm, id, err := v.trustedNow(ctx)
	if err != nil {
		return nil, "", err
	}
	v.keylessMu.Lock()
	defer v.keylessMu.Unlock()
	if v.keyless != nil && v.keylessID == id {
		return v.keyless, id, nil
	}
	vopts := []verify.VerifierOption{verify.WithObserverTimestamps(1), verify.WithoutStatementPredicate()}
	if v.requireTlog(true) {
		vopts = append(vopts, verify.WithTransparencyLog(1))
	}
	if v.o.requireSCT {
		vopts = append(vopts, verify.WithSignedCertificateTimestamps(1))
	}
	sv, err := verify.NewVerifier(tm, vopts...)
	if err != nil {
		return nil, "", err
	}
	v.keyless, v.keylessID = sv, id
	return sv, id, nil
}

// check is how one requirement's signatures are verified.
type check struct {
	t      *resolve.Trust
	sv     *verify.Verifier
	policy verify.PolicyOption
	// mode distinguishes cached verdicts of differently configured verifiers.
	mode string
}

func (v *Verifier) checkFor(ctx context.Context, t *resolve.Trust) (*check, error) {
	if t.Keyless() {
		sv, id, err := v.keylessVerifier(ctx)
		if err != nil {
			return nil, err
		}
		return &check{t: t, sv: sv, policy: verify.WithoutIdentitiesUnsafe(),
			mode: fmt.Sprintf("tlog=%t,sct=%t", v.requireTlog(true), v.o.requireSCT) + rootMode(id)}, nil
	}
	kc, ok := v.keys[t.Key]
	if !ok {
		names := make([]string, 0, len(v.keys))
		for n := range v.keys {
			names = append(names, n)
		}
		sort.Strings(names)
		have := "none is configured"
		if len(names) > 0 {
			have = "configured: " + strings.Join(names, ", ")
		}
		// The app's to fix, not the operator's: an input error (exit 2, not an alert).
		return nil, &resolve.InputError{Field: string(resolve.FieldVerifyKey), Policy: resolve.FieldVerifyKey, Value: t.Key,
			Accepted: "the name of a public key of the operator's trust.keys (" + have + ")"}
	}
	if kc.err != nil {
		return nil, fmt.Errorf("key %s: %w", t.Key, kc.err)
	}
	mode := fmt.Sprintf("key=%s,tlog=%t", kc.fingerprint, v.requireTlog(false))
	if v.requireTlog(false) {
		// the log's key comes from the trust root
		_, id, err := v.trustedNow(ctx)
		if err != nil {
			return nil, fmt.Errorf("key %s: a transparency-log entry is required (trust.requireTlog): %w", t.Key, err)
		}
		mode += rootMode(id)
	}
	return &check{t: t, sv: kc.v, policy: verify.WithKey(), mode: mode}, nil
}

// rootMode is the part of a verdict's key naming a trust root that changes
// (TUFRoot), so that a verdict is not reused under another root.
func rootMode(id string) string {
	if id == "" {
		return ""
	}
	return ",root=" + id
}

// Verify finds the candidate's signatures and checks them against t: the
// signature that satisfies it, or a *resolve.UnverifiedError saying why none
// does, or an error when the registry could not be read or the requirement
// cannot be checked (a key or trust root that is not configured).
func (v *Verifier) Verify(ctx context.Context, s resolve.Subject, t *resolve.Trust) (*resolve.Verified, error) {
	if t == nil {
		return nil, errors.New("signature verifier: no requirement to check")
	}
	c, err := v.checkFor(ctx, t)
	if err != nil {
		return nil, err
	}
	key := verdictKey(s, t, c.mode)
	if vd, ok := v.o.cache.GetVerdict(ctx, key); ok {
		if vd.Verified != nil {
			out := *vd.Verified
			return &out, nil
		}
		return nil, &resolve.UnverifiedError{Reason: vd.Reason}
	}
	ver, err := v.find(ctx, s, c)
	var ue *resolve.UnverifiedError
	switch {
	case err == nil:
		out := *ver
		v.o.cache.SetVerdict(ctx, key, resolve.Verdict{Verified: &out}, v.o.okTTL)
		v.o.log.Debug("signature verified", "image", s.Repo.String(), "digest", s.Digest.String(),
			"signer", ver.Describe(), "source", ver.Source)
	case errors.As(err, &ue):
		v.o.cache.SetVerdict(ctx, key, resolve.Verdict{Reason: ue.Reason}, v.o.failTTL)
		v.o.log.Debug("signature not verified", "image", s.Repo.String(), "digest", s.Digest.String(), "reason", ue.Reason)
	}
	return ver, err
}

// verdictKey is a verdict's cache key: repository, digest, requirement and how
// the verifier is configured for it (a key's fingerprint, what is required).
func verdictKey(s resolve.Subject, t *resolve.Trust, mode string) string {
	return "sig1|" + s.Repo.Name() + "@" + s.Digest.String() + "|" + t.String() + "|" + mode
}
