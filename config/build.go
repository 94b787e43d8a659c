package config

import (
	"log/slog"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/credentials"
)

// The builders below turn a Config into the parts that talk to registries. The
// daemon and a render without it (generate's fallback, preview, resolve) build them
// here alike, so both use the same registries, credentials, trust, limits and app
// scoping, and give the same answer.

// NewRemote builds the registry client of this configuration: the registries
// entries (endpoints, TLS, page sizes), the credentials keychain of the entries
// that name a credentials source (the docker config keychain for the rest), and
// the rate limits and per-registry concurrency, recorded in m (nil: metrics of
// its own). opts come last, so a caller can add to them (the daemon turns the
// Remote's own memo off; tests set a keychain).
func (c Config) NewRemote(m *cache.Metrics, log *slog.Logger, opts ...resolve.RemoteOption) (*resolve.Remote, *cache.Limiter, error) {
	if log == nil {
		log = slog.Default()
	}
	kc, err := credentials.New(c.Registries, credentials.WithLogger(log))
	if err != nil {
		return nil, nil, err
	}
	limiter := cache.NewLimiter(c.EffectiveRateLimits(), c.RegistryConcurrency, m)
	base := []resolve.RemoteOption{
		resolve.WithRegistries(c.Registries),
		resolve.WithKeychain(kc),
		resolve.WithTransportWrapper(limiter.Wrap),
	}
	remote, err := resolve.NewRemote(append(base, opts...)...)
	if err != nil {
		return nil, nil, err
	}
	return remote, limiter, nil
}

// NewResolver returns a Resolver over reg that refuses, before reg is read, an app
// that a registries entry's apps do not allow.
func (c Config) NewResolver(reg resolve.Registry, opts ...resolve.ResolverOption) *resolve.Resolver {
	scoped := resolve.WithAuthorizer(resolve.NewRegistryTable(c.Registries).Authorize)
	return resolve.NewResolver(reg, append([]resolve.ResolverOption{scoped}, opts...)...)
}

// NewDirectResolver is the resolver of a render without the daemon: NewRemote
// read directly, with no cache beyond the process, scoped as NewResolver.
func (c Config) NewDirectResolver(log *slog.Logger, opts ...resolve.RemoteOption) (*resolve.Resolver, error) {
	remote, _, err := c.NewRemote(nil, log, opts...)
	if err != nil {
		return nil, err
	}
	return c.NewResolver(remote), nil
}
