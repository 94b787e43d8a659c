package metadata

import (
	"log/slog"
	"net/http"

	"github.com/google/go-containerregistry/pkg/authn"
)

// Options configure one metadata API client (one registries entry).
type Options struct {
	// BaseURL is the API's base URL (a registries entry's metadataURL); "" for
	// the vendor's default (https://hub.docker.com for Docker Hub, the registry
	// host itself for Harbor, ACR and Quay, https://artifactregistry.googleapis.com
	// for GAR; ECR uses the AWS SDK's regional endpoint).
	BaseURL string
	// Registry is the registry host the entry names (docker.io, harbor.example.com,
	// europe-docker.pkg.dev, 123.dkr.ecr.eu-west-1.amazonaws.com, x.azurecr.io, quay.io).
	Registry string
	// Transport carries every request (the daemon's limiter, retries of 429/5xx
	// with Retry-After honoured, TLS configuration of the entry). nil:
	// http.DefaultTransport.
	Transport http.RoundTripper
	// Keychain gives the registry's credential (the entry's credentials source):
	// each API's own token flow starts from it (Docker Hub's login, Harbor's robot
	// account as basic auth, GAR's OAuth2 access token, ACR's refresh token
	// exchange, Quay's bearer token). ECR uses the AWS SDK's credential chain.
	// nil: anonymous.
	Keychain authn.Keychain
	// Bounds of one listing: pages, tags and bytes of one page (after
	// decompression). Zero: the resolver's tag list defaults.
	MaxPages     int
	MaxTags      int
	MaxPageBytes int64
	// PageSize is the page size asked for (0: the API's maximum, usually 100).
	PageSize int
	Log      *slog.Logger
}
