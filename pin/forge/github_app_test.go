package forge

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge/forgetest"
)

const appRepo = "octo/app-config"

// newAppForge is a GitHub forge authenticating as App 7, installation 42,
// with key (nil: the App's own).
func newAppForge(t *testing.T, srv *forgetest.GitHub, api string, key []byte) *gitHub {
	t.Helper()
	own := srv.App(7, 42)
	if key == nil {
		key = own
	}
	srv.AddRepo(appRepo)
	f := mustNew(t, Config{Kind: KindGitHub, API: api, GitHubApp: &GitHubApp{
		AppID: 7, InstallationID: 42, PrivateKey: func() ([]byte, error) { return key, nil },
	}})
	return f.(*gitHub)
}

// TestGitHubAppTokenReused: one installation token is minted for many
// requests, and minted again only within a minute of its expiry.
func TestGitHubAppTokenReused(t *testing.T) {
	cases := []struct {
		name      string
		ttl       time.Duration // of the tokens the server mints
		advance   time.Duration // the forge's clock, before the last requests
		wantMints int
	}{
		{name: "reused", ttl: time.Hour, advance: 0, wantMints: 1},
		{name: "reused until a minute before expiry", ttl: 90 * time.Second, advance: 29 * time.Second, wantMints: 1},
		{name: "refreshed within a minute of expiry", ttl: 90 * time.Second, advance: 31 * time.Second, wantMints: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := forgetest.NewGitHub(t)
			f := newAppForge(t, srv, srv.URL, nil)
			srv.SetAppTokenTTL(tc.ttl)
			ctx := context.Background()
			pr, err := f.Create(ctx, appRepo, Spec{Head: "image-resolver/web", Base: "main", Title: "Pin web", AutoMerge: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.OpenPullRequests(ctx, appRepo, "image-resolver/"); err != nil {
				t.Fatal(err)
			}
			f.app.now = func() time.Time { return time.Now().Add(tc.advance) }
			srv.SetAppTokenTTL(time.Hour) // a token minted now outlives the rest
			if _, err := f.Update(ctx, appRepo, pr.Number, Spec{Title: "Pin web 2"}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.OpenPullRequests(ctx, appRepo, "image-resolver/"); err != nil {
				t.Fatal(err)
			}
			if got := srv.Count(forgetest.GitHubAppToken); got != tc.wantMints {
				t.Errorf("%d installation tokens minted, want %d", got, tc.wantMints)
			}
			tokens := srv.AppTokens()
			if len(tokens) == 0 || srv.LastToken() != tokens[len(tokens)-1] {
				t.Errorf("the last request did not carry the last installation token minted")
			}
			if got := srv.Count(forgetest.GitHubGraphQL); got != 1 {
				t.Errorf("%d GraphQL requests, want 1 (auto-merge, with the installation token)", got)
			}
		})
	}
}

// TestGitHubAppRefused: a JWT signed by another key, an installation not
// found, a key that is not one: each a clear error with neither the JWT
// nor the key in it, and no further request.
func TestGitHubAppRefused(t *testing.T) {
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	otherPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(other)})
	cases := []struct {
		name     string
		key      []byte
		sentinel error
		message  string
		mints    int
	}{
		{name: "another key", key: otherPEM, sentinel: ErrUnauthorized, message: "A JSON web token could not be decoded", mints: 1},
		{name: "not PEM", key: []byte("-----not a key-----"), message: "app 7: the private key (19 bytes) is not PEM", mints: 0},
		{name: "not RSA", key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte{1}}), message: `is a PEM "EC PRIVATE KEY"`, mints: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := forgetest.NewGitHub(t)
			f := newAppForge(t, srv, srv.URL, tc.key)
			_, err := f.OpenPullRequests(context.Background(), appRepo, "")
			if err == nil || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("err = %v, want it to say %q", err, tc.message)
			}
			if tc.sentinel != nil {
				var fe *Error
				if !errors.Is(err, tc.sentinel) || !errors.As(err, &fe) || fe.Op != OpAppToken {
					t.Errorf("err = %v, want %v from %s", err, tc.sentinel, OpAppToken)
				}
			}
			checkNoToken(t, err, string(tc.key), "eyJ") // a JWT starts with eyJ
			if got := srv.Count(forgetest.GitHubAppToken); got != tc.mints {
				t.Errorf("%d mint requests, want %d", got, tc.mints)
			}
			if got := srv.Count(forgetest.GitHubListPulls); got != 0 {
				t.Errorf("%d list requests without a token, want 0", got)
			}
		})
	}
}

// TestGitHubAppPKCS8 accepts the App's key as PKCS #8 too.
func TestGitHubAppPKCS8(t *testing.T) {
	srv := forgetest.NewGitHub(t)
	block, _ := pem.Decode(srv.App(7, 42))
	rsaKey, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	f := newAppForge(t, srv, srv.URL, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if _, err := f.OpenPullRequests(context.Background(), appRepo, ""); err != nil {
		t.Fatal(err)
	}
}

// TestGitHubEnterpriseGraphQL: with an Enterprise API (/api/v3), auto-merge
// goes to /api/graphql; a repository that does not allow auto-merge is a
// clear refusal, the pull request still returned.
func TestGitHubEnterpriseGraphQL(t *testing.T) {
	for _, allowed := range []bool{true, false} {
		srv := forgetest.NewGitHub(t)
		srv.AddRepo(appRepo)
		srv.SetAutoMergeAllowed(appRepo, allowed)
		f := mustNew(t, Config{Kind: KindGitHub, API: srv.EnterpriseURL, Token: staticToken(srv.Token)})
		if got, want := f.(*gitHub).graphQL, srv.URL+"/api/graphql"; got != want {
			t.Fatalf("GraphQL endpoint = %s, want %s", got, want)
		}
		pr, err := f.Create(context.Background(), appRepo, Spec{Head: "image-resolver/web", Base: "main", Title: "Pin web", AutoMerge: true})
		if pr.Number != 1 {
			t.Fatalf("allowed %v: pull request %+v not returned", allowed, pr)
		}
		held := srv.PRs(appRepo)[0]
		switch {
		case allowed && (err != nil || !held.AutoMerge):
			t.Errorf("auto-merge allowed: err %v, held %v", err, held.AutoMerge)
		case !allowed && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "GraphQL: Pull request Auto merge is not allowed for this repository") || held.AutoMerge):
			t.Errorf("auto-merge not allowed: err %v, held %v", err, held.AutoMerge)
		}
		if got := srv.Count(forgetest.GitHubGraphQL); got != 1 {
			t.Errorf("%d GraphQL requests, want 1", got)
		}
		checkNoToken(t, err, srv.Token)
	}
}

func TestGitHubGraphQLURL(t *testing.T) {
	for api, want := range map[string]string{
		"https://api.github.com":        "https://api.github.com/graphql",
		"https://ghe.example/api/v3":    "https://ghe.example/api/graphql",
		"https://ghe.example/api/v3/":   "https://ghe.example/api/graphql",
		"http://127.0.0.1:8080":         "http://127.0.0.1:8080/graphql",
		"https://proxy.example/github/": "https://proxy.example/github/graphql",
	} {
		u, err := parseAPI(KindGitHub, api)
		if err != nil {
			t.Fatal(err)
		}
		if got := gitHubGraphQL(u); got != want {
			t.Errorf("GraphQL of %s = %s, want %s", api, got, want)
		}
	}
}
