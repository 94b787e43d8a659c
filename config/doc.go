// Package config is the operator's configuration, read one way by every command:
// defaults, the YAML file ($IMAGE_RESOLVER_CONFIG), the registries file
// ($IMAGE_RESOLVER_REGISTRIES_CONFIG), environment variables, then flags (Flags.Load,
// Load). It also builds what the configuration describes about registries (NewRemote,
// NewResolver, NewDirectResolver), so that the daemon and a render without it use the
// same registries, credentials, trust, limits and app scoping.
package config
