package compose

import (
	"io"
	"log/slog"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge"
	"github.com/argocd-image-resolver/argocd-image-resolver/pipeline"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/credentials"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sigstore/sigstore-go/pkg/root"
)

// NewRemote builds the registry client of the configuration c: the registries
// entries (endpoints, TLS, page sizes), the credentials keychain of the entries
// that name a credentials source (the docker config keychain for the rest), and
// the rate limits and per-registry concurrency, recorded in m (nil: metrics of
// its own). opts come last, so a caller can add to them (the daemon turns the
// Remote's own memo off; tests set a keychain).
func NewRemote(c config.Config, m *cache.Metrics, log *slog.Logger, opts ...resolve.RemoteOption) (*resolve.Remote, *resolve.Limiter, error) {
	if log == nil {
		log = slog.Default()
	}
	kc, err := credentials.New(c.Registries, credentials.WithLogger(log))
	if err != nil {
		return nil, nil, err
	}
	limiter := resolve.NewLimiter(c.EffectiveRateLimits(), c.RegistryConcurrency, m.Transport())
	base := []resolve.RemoteOption{
		resolve.WithRegistries(c.Registries),
		resolve.WithKeychain(kc),
		resolve.WithTransportWrapper(limiter.Wrap),
		resolve.WithTagListLimits(c.TagListMaxPages, c.TagListMaxTags, c.TagListMaxPageSize),
		resolve.WithRequestTimeouts(c.RequestHeaderTimeout, c.RequestTimeout),
		resolve.WithJobs(inspectConcurrency(c)),
		resolve.WithSignatureLimits(c.Trust.MaxSignatureBytes),
	}
	remote, err := resolve.NewRemote(append(base, opts...)...)
	if err != nil {
		return nil, nil, err
	}
	return remote, limiter, nil
}

// NewResolver returns a Resolver over reg that refuses, before reg is read, an app
// that the apps of a registries entry of c do not allow, and that checks
// signatures as c's trust section and the entries' requireSignature say (verdicts
// kept in verdicts; nil: in this process's memory). It fails when a configured key
// or the trusted root cannot be read.
func NewResolver(c config.Config, reg resolve.Registry, verdicts resolve.VerdictCache, log *slog.Logger, opts ...resolve.ResolverOption) (*resolve.Resolver, error) {
	v, err := NewVerifier(c, reg, verdicts, log)
	if err != nil {
		return nil, err
	}
	table := resolve.NewRegistryTable(c.Registries)
	base := []resolve.ResolverOption{
		resolve.WithAuthorizer(table.Authorize),
		resolve.WithConcurrency(inspectConcurrency(c)),
		resolve.WithSignatureVerifier(v),
		resolve.WithRequiredTrust(table.RequiredTrust),
		resolve.WithVerifyCandidates(c.Trust.VerifyCandidates),
		resolve.WithTagFilterMaxCost(c.TagFilterMaxCost),
		resolve.WithClockSkew(c.ClockSkew),
	}
	return resolve.NewResolver(reg, append(base, opts...)...), nil
}

// NewVerifier builds the signature verifier of c's trust section over reg: the
// named public keys, the Sigstore trusted root (a file, or fetched through TUF
// and refreshed when used: see trustedRoot), the transparency-log and SCT
// requirements and the bounds of what is read. trust.requireTlog is about keyless
// signatures (false lifts their log requirement); a key signature never needs a
// log entry. A failed check is cached for the tag TTL, a success for a day.
// verdicts nil keeps verdicts in memory.
func NewVerifier(c config.Config, reg resolve.Registry, verdicts resolve.VerdictCache, log *slog.Logger) (*signature.Verifier, error) {
	if log == nil {
		log = slog.Default()
	}
	keys, err := c.Trust.PublicKeys()
	if err != nil {
		return nil, err
	}
	opts := []signature.Option{
		signature.WithPublicKeys(keys),
		signature.WithRequireSCT(c.Trust.RequireSCT),
		signature.WithLimits(signature.Limits{MaxReferrers: c.Trust.MaxReferrers, MaxBytes: c.Trust.MaxSignatureBytes}),
		signature.WithLogger(log),
		// A failure is checked again when the tag list is read again, so a
		// signature added to a skipped tag is seen as soon as a new tag would be.
		signature.WithVerdictTTL(0, c.TagTTL),
	}
	if !c.Trust.RequireTlog {
		opts = append(opts, signature.WithRequireTlog(false))
	}
	tm, err := trustedRoot(c.Trust, log)
	if err != nil {
		return nil, err
	}
	if tm != nil {
		opts = append(opts, signature.WithTrustedMaterial(tm))
	}
	if verdicts != nil {
		opts = append(opts, signature.WithVerdictCache(verdicts))
	}
	return signature.New(reg, opts...)
}

// trustedRoot is the Sigstore trusted root of the trust section t: the
// trustedRoot file, read now; with tufURL, the root fetched from that TUF
// repository (from tufRoot's TUF root, or the built-in one of Sigstore's
// public-good repository) at the first keyless verification and refreshed every
// tufRefresh, the file being the root until the first fetch succeeds. nil for
// none.
func trustedRoot(t config.TrustConfig, log *slog.Logger) (root.TrustedMaterial, error) {
	var file root.TrustedMaterial
	if t.TrustedRoot != "" {
		tm, err := signature.LoadTrustedRoot(t.TrustedRoot)
		if err != nil {
			return nil, err
		}
		file = tm
	}
	if t.TUFURL == "" {
		return file, nil
	}
	o := signature.TUFOptions{URL: t.TUFURL, Initial: file, Refresh: t.TUFRefresh, Logger: log}
	if t.TUFRoot != "" {
		b, err := signature.ReadTUFRoot(t.TUFRoot)
		if err != nil {
			return nil, err
		}
		o.Root = b
	}
	tr, err := signature.NewTUFRoot(o)
	if err != nil {
		return nil, err
	}
	return tr, nil
}

// inspectConcurrency is how many tags a resolution inspects at once and how many
// jobs go-containerregistry runs: the registry concurrency bound, so that the
// limiter's governor alone decides how many requests are in flight.
func inspectConcurrency(c config.Config) int {
	if c.RegistryConcurrency > 0 {
		return c.RegistryConcurrency
	}
	return resolve.DefaultRegistryConcurrency
}

// NewDirectResolver is the resolver of a render without the daemon: NewRemote of
// c read directly, with no cache beyond the process, scoped as NewResolver.
func NewDirectResolver(c config.Config, log *slog.Logger, opts ...resolve.RemoteOption) (*resolve.Resolver, error) {
	remote, _, err := NewRemote(c, nil, log, opts...)
	if err != nil {
		return nil, err
	}
	return NewResolver(c, remote, nil, log, MetadataAPIs(c, remote, nil, nil, log))
}

// NewPinWriter builds the git writer of pins (pin-mode write and use) of the
// configuration c: author, message template, batch window and the credentials per
// repository prefix, HTTPS or SSH (config.GitConfig.AuthFor: read at each push, so
// a rotated token or key is used at once; a repository no prefix matches is tried
// without credentials), and the OpenPGP key pin commits are signed with, if any
// (config.GitConfig.Signer: read at each commit), the forges pull requests
// of pins are opened on (git.forges), and the bound of what a write fetches
// and holds of one repository (git.maxRepositoryBytes). Its metrics go to reg; opts come last.
func NewPinWriter(c config.Config, log *slog.Logger, reg prometheus.Registerer, opts ...pin.WriterOption) *pin.Writer {
	name, email := c.Git.GitAuthor()
	base := []pin.WriterOption{
		pin.WithAuthor(name, email),
		pin.WithLogger(log),
		pin.WithAuth(c.Git.AuthFor),
	}
	if len(c.Git.Forges) > 0 {
		f := &forges{git: c.Git, reg: reg, built: map[string]forge.Forge{}}
		base = append(base, pin.WithForges(f.ForgeOf))
	}
	if reg != nil {
		base = append(base, pin.WithMetrics(reg))
	}
	if c.Git.Message != "" {
		base = append(base, pin.WithMessage(c.Git.Message))
	}
	if c.Git.MaxRepositoryBytes > 0 {
		base = append(base, pin.WithMaxRepositoryBytes(c.Git.MaxRepositoryBytes))
	}
	if c.Git.BatchWindow > 0 {
		base = append(base, pin.WithBatchWindow(time.Duration(c.Git.BatchWindow)))
	}
	if c.Git.SigningKeyFile != "" {
		// the key is read at each commit, so that a rotated one is used at once
		// (Validate has read it at start)
		g := c.Git
		base = append(base, pin.WithSigner(pin.SignerFunc(func(m io.Reader) ([]byte, error) {
			s, err := g.Signer()
			if err != nil {
				return nil, err
			}
			return s.Sign(m)
		})))
	}
	return pin.NewWriter(append(base, opts...)...)
}

// PipelineSettings is the render pipeline's part of the configuration c, the same
// for the daemon, generate (with or without the daemon) and preview.
func PipelineSettings(c config.Config) pipeline.Settings {
	return pipeline.Settings{ExtraImagePaths: c.ExtraImagePaths, DefaultPlatforms: c.DefaultPlatforms, Timeout: c.RenderTimeout,
		KustomizeRemoteHosts: c.KustomizeRemoteHosts}
}
