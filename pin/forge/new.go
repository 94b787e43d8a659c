package forge

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// DefaultTimeout bounds one request to a forge.
const DefaultTimeout = 30 * time.Second

// MaxAnswerBytes bounds what is read of one answer of a forge.
const MaxAnswerBytes = 8 << 20

// Config is how to reach one forge.
type Config struct {
	// Kind is KindGitHub, KindGitLab or KindGitea.
	Kind string
	// API is the forge's API base URL: https://api.github.com (or a GitHub
	// Enterprise https://HOST/api/v3), https://gitlab.com (the client adds
	// /api/v4), https://gitea.example (the client adds /api/v1).
	API string
	// Token returns the token to send, read when needed (so a rotated token
	// is used at the next request). nil with GitHubApp set.
	Token func(ctx context.Context) (string, error)
	// GitHubApp, for GitHub only, authenticates as an App installation
	// instead of with Token.
	GitHubApp *GitHubApp
	// HTTPClient sends the requests (nil: a client with Timeout). Its
	// transport is wrapped; the caller's is never changed.
	HTTPClient *http.Client
	// Timeout bounds each request (0: DefaultTimeout).
	Timeout time.Duration
	// Observe, when set, is told of every request answered or failed: the
	// operation and the HTTP status (0: no answer), for metrics.
	Observe func(op string, status int)
}

// GitHubApp is a GitHub App installation: the App's ID, the installation's
// ID, and the App's private key (PEM), read when a token is minted.
type GitHubApp struct {
	AppID          int64
	InstallationID int64
	PrivateKey     func() ([]byte, error)
}

// New returns the Forge cfg describes.
func New(cfg Config) (Forge, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Token == nil && cfg.GitHubApp == nil {
		return nil, fmt.Errorf("forge %s at %s: no token (tokenFile) configured", cfg.Kind, cfg.API)
	}
	switch cfg.Kind {
	case KindGitHub:
		return newGitHub(cfg)
	case KindGitLab:
		return newGitLab(cfg)
	case KindGitea:
		return newGitea(cfg)
	}
	return nil, fmt.Errorf("forge kind %q: unknown (accepted: %s)", cfg.Kind, KindsAccepted)
}
