package main

import (
	"log/slog"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/credentials"
)

// newConfiguredRemote builds the registry client from the registries configuration
// file, if any: per-registry endpoints, TLS and page sizes, and the credentials
// keychain (resolve/credentials) for every entry that names a credentials source.
// Repositories without one use the docker config keychain ($DOCKER_CONFIG), as
// before. Resolvers over the returned Remote refuse apps an entry's apps do not
// allow (the Remote's Authorize method); the app comes from resolve.WithApp, which
// (*resolve.Resolver).ResolveBatch sets.
//
// opts come after the configuration's, so a caller can still override the
// keychain (tests).
func newConfiguredRemote(registriesFile string, opts ...resolve.RemoteOption) (*resolve.Remote, error) {
	var cfgs []resolve.RegistryConfig
	if registriesFile != "" {
		var err error
		if cfgs, err = resolve.LoadRegistries(registriesFile); err != nil {
			return nil, err
		}
	}
	kc, err := newCredentialsKeychain(cfgs)
	if err != nil {
		return nil, err
	}
	base := []resolve.RemoteOption{resolve.WithRegistries(cfgs), resolve.WithKeychain(kc)}
	return resolve.NewRemote(append(base, opts...)...)
}

// newCredentialsKeychain is the keychain of a registries configuration, logging to
// the default logger (fetches and refreshes, never a secret). The daemon gives it
// to its Remote with resolve.WithKeychain, and resolve.NewRegistryTable(cfgs).Authorize
// to its Resolver with resolve.WithAuthorizer.
func newCredentialsKeychain(cfgs []resolve.RegistryConfig) (*credentials.Keychain, error) {
	return credentials.New(cfgs, credentials.WithLogger(slog.Default()))
}
