// Package config is the operator's settings, read one way by every command: one
// table of settings (Settings: each with its YAML key, environment variable and
// flag), applied in increasing precedence from the defaults, the YAML file
// ($IMAGE_RESOLVER_CONFIG), the registries file ($IMAGE_RESOLVER_REGISTRIES_CONFIG),
// environment variables, then flags (Flags.Load, Load); the parsing of each value;
// and the validation of the whole (Validate). It is data: besides the values it
// only reads, when they are used, the secret files the settings name
// (GitConfig.AuthFor and Signer, RedisConfig.TLSConfig and Password,
// TrustConfig.PublicKeys), so that a rotated one is picked up. The parts the settings describe are made from a Config
// by package compose.
package config
