package forge

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// appTokenMargin is how long before its expiry an installation token is
// no longer used.
const appTokenMargin = time.Minute

// appTokens mints a GitHub App installation's tokens, and keeps the last
// one until appTokenMargin before it expires.
type appTokens struct {
	app     *GitHubApp
	mintURL string
	client  *http.Client // the forge's (observed, bounded)
	now     func() time.Time

	mu    sync.Mutex
	token string
	until time.Time
}

func newAppTokens(app *GitHubApp, api *url.URL) (*appTokens, error) {
	if app.AppID <= 0 || app.InstallationID <= 0 || app.PrivateKey == nil {
		return nil, fmt.Errorf("forge github: app %d, installation %d: want an App ID, an installation ID (both 1 or more) and a private key", app.AppID, app.InstallationID)
	}
	return &appTokens{
		app:     app,
		mintURL: fmt.Sprintf("%s/app/installations/%d/access_tokens", api, app.InstallationID),
		now:     time.Now,
	}, nil
}

// credential is the installation token, minted when none is valid.
func (a *appTokens) credential(ctx context.Context) (string, string, string, error) {
	tok, err := a.get(ctx)
	if err != nil {
		return "", "", "", err
	}
	return "Authorization", "Bearer " + tok, tok, nil
}

func (a *appTokens) get(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.token != "" && a.now().Before(a.until) {
		return a.token, nil
	}
	tok, expires, err := a.mint(ctx)
	if err != nil {
		return "", err
	}
	a.token, a.until = tok, expires.Add(-appTokenMargin)
	return tok, nil
}

// mint exchanges a JWT signed with the App's key for an installation token.
func (a *appTokens) mint(ctx context.Context) (string, time.Time, error) {
	repo := callOf(ctx).repo
	jwt, err := a.jwt()
	if err != nil {
		return "", time.Time{}, err
	}
	ctx, c := withCall(ctx, KindGitHub, OpAppToken, repo)
	c.noCred = true
	c.addSecret(jwt)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.mintURL, nil)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("forge github: %s: %w", OpAppToken, err)
	}
	req.Header.Set("Authorization", "Bearer "+jwt)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	resp, err := a.client.Do(req)
	if err != nil {
		return "", time.Time{}, c.fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return "", time.Time{}, c.fail(fmt.Errorf("HTTP %d", resp.StatusCode))
	}
	var answer struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return "", time.Time{}, c.fail(err)
	}
	c.addSecret(answer.Token)
	if err := checkToken(KindGitHub, answer.Token); err != nil || answer.ExpiresAt.IsZero() {
		return "", time.Time{}, c.refuse(errRefused, "the answer holds no usable token and expires_at")
	}
	return answer.Token, answer.ExpiresAt, nil
}

// jwt is the App's JSON Web Token: RS256, issued by the App ID, from a
// minute ago (clock drift) for 9 minutes (GitHub accepts at most 10).
func (a *appTokens) jwt() (string, error) {
	key, err := a.key()
	if err != nil {
		return "", err
	}
	now := a.now()
	header := `{"alg":"RS256","typ":"JWT"}`
	claims, err := json.Marshal(map[string]any{
		"iat": now.Add(-time.Minute).Unix(),
		"exp": now.Add(9 * time.Minute).Unix(),
		"iss": strconv.FormatInt(a.app.AppID, 10),
	})
	if err != nil {
		return "", fmt.Errorf("forge github: app %d: JWT claims: %w", a.app.AppID, err)
	}
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("forge github: app %d: signing the JWT: %w", a.app.AppID, err)
	}
	return signing + "." + enc.EncodeToString(sig), nil
}

// key reads the App's private key: PEM, PKCS #1 (as GitHub hands it out)
// or PKCS #8, RSA.
func (a *appTokens) key() (*rsa.PrivateKey, error) {
	data, err := a.app.PrivateKey()
	if err != nil {
		return nil, fmt.Errorf("forge github: app %d: reading the private key: %w", a.app.AppID, err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("forge github: app %d: the private key (%d bytes) is not PEM (accepted: RSA PRIVATE KEY or PRIVATE KEY)", a.app.AppID, len(data))
	}
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("forge github: app %d: the private key: not PKCS #1 RSA", a.app.AppID)
		}
		return key, nil
	case "PRIVATE KEY":
		key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if rsaKey, ok := key.(*rsa.PrivateKey); err == nil && ok {
			return rsaKey, nil
		}
		return nil, fmt.Errorf("forge github: app %d: the private key: not PKCS #8 RSA", a.app.AppID)
	}
	return nil, fmt.Errorf("forge github: app %d: the private key is a PEM %q (accepted: RSA PRIVATE KEY or PRIVATE KEY)", a.app.AppID, block.Type)
}
