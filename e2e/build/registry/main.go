// Command registry is the CNCF distribution registry's own command (its
// cmd/registry/main.go) with the storage drivers the tests use (inmemory,
// filesystem) and its auth providers, less the cloud storage drivers (S3, Azure,
// GCS, CloudFront), whose SDKs took 44% of a cold build's CPU. The registry
// itself, its HTTP API, notifications and configuration, is distribution's code,
// unchanged.
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/auth/silly"
	_ "github.com/distribution/distribution/v3/registry/auth/token"
	_ "github.com/distribution/distribution/v3/registry/proxy"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/middleware/redirect"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/middleware/rewrite"
)

func main() {
	// As upstream: the two commands registered with RootCmd exit non-zero on failure.
	registry.RootCmd.Execute() //nolint:errcheck
}
