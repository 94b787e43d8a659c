// Package compose is the composition root: it builds the registry client, the
// resolver, the pin writer, the Redis tier and the pipeline settings from a
// config.Config, the same way for the daemon and for a render without it
// (generate's fallback, preview, resolve), so that both use the same registries,
// credentials, trust, limits and app scoping, and give the same answer.
package compose
