package credentials

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/aws/aws-sdk-go-v2/aws"
	awscreds "github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/google/go-containerregistry/pkg/authn"

	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// TestECR drives the AWS SDK's real GetAuthorizationToken call against a loopback
// endpoint answering the ECR JSON API, and refreshes the token before it expires.
func TestECR(t *testing.T) {
	const token = "ecr-T0ken-secret-8b2e"
	const awsSecret = "aws-Secret-Access-Key-55"
	const ecrHost = "123456789012.dkr.ecr.eu-west-1.amazonaws.com"
	s := newRegistry(t, rt.WithBasicAuth("AWS", token))
	c := newClock()
	var calls atomic.Int32
	var failing atomic.Bool
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("X-Amz-Target") != "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken" {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDTEST/") ||
			!strings.Contains(r.Header.Get("Authorization"), "/eu-west-1/ecr/aws4_request") {
			http.Error(w, "not signed for ecr in eu-west-1", http.StatusForbidden)
			return
		}
		calls.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		if failing.Load() {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"__type":"AccessDeniedException","message":"not authorized to perform ecr:GetAuthorizationToken"}`)
			return
		}
		fmt.Fprintf(w, `{"authorizationData":[{"authorizationToken":%q,"expiresAt":%d,"proxyEndpoint":"https://%s"}]}`,
			base64.StdEncoding.EncodeToString([]byte("AWS:"+token)), c.Now().Add(10*time.Minute).Unix(), ecrHost)
	}))
	t.Cleanup(api.Close)
	awsConfig := func(_ context.Context, region string) (aws.Config, error) {
		return aws.Config{Region: region, BaseEndpoint: aws.String(api.URL),
			Credentials: awscreds.NewStaticCredentialsProvider("AKIDTEST", awsSecret, "")}, nil
	}
	yaml := fmt.Sprintf("registries:\n- prefix: %s\n  api: %q\n  credentials: ecr\n", ecrHost, s.Host)
	e := newEnv(t, yaml, WithAWSConfig(awsConfig), WithClock(c.Now))
	secrets := []string{token, awsSecret, base64.StdEncoding.EncodeToString([]byte("AWS:" + token))}

	image := ecrHost + "/team/app"
	a := e.resolve(t, "app", image)
	if a.Error != "" || a.Result.Reference != image+":1.1.0" {
		t.Fatalf("%+v", a)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("GetAuthorizationToken called %d times, want 1", n)
	}
	c.Advance(7 * time.Minute) // 3 of 10 minutes left: still fresh
	if a := e.resolve(t, "app", image); a.Error != "" {
		t.Fatal(a.Error)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("GetAuthorizationToken called %d times with 3 minutes left, want 1", n)
	}
	c.Advance(time.Minute + time.Second) // under a fifth of its lifetime left: refresh
	if a := e.resolve(t, "app", image); a.Error != "" {
		t.Fatal(a.Error)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("GetAuthorizationToken called %d times before expiry, want 2 (refreshed)", n)
	}
	if !strings.Contains(e.logs.String(), "expires=") {
		t.Errorf("log does not say when the token expires:\n%s", e.logs)
	}
	noSecrets(t, secrets, e.channels(a))

	// The API fails while the current token is still valid: keep using it.
	failing.Store(true)
	c.Advance(9 * time.Minute)
	if a := e.resolve(t, "app", image); a.Error != "" {
		t.Errorf("refresh failed with a valid token: %s", a.Error)
	}
	if !strings.Contains(e.logs.String(), "refreshing registry credential failed") {
		t.Errorf("log does not warn of the failed refresh:\n%s", e.logs)
	}
	// ... and once it has expired, fail naming the source.
	c.Advance(2 * time.Minute)
	a = e.resolve(t, "app", image)
	for _, want := range []string{"registry " + ecrHost, "credentials ecr", "AccessDeniedException"} {
		if !strings.Contains(a.Error, want) {
			t.Errorf("error %q does not say %q", a.Error, want)
		}
	}
	noSecrets(t, secrets, e.channels(a))
}

type fakeAAD struct{ calls atomic.Int32 }

func (f *fakeAAD) GetToken(_ context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	f.calls.Add(1)
	if len(o.Scopes) != 1 || o.Scopes[0] != "https://management.azure.com/.default" {
		return azcore.AccessToken{}, errors.New("unexpected scope")
	}
	return azcore.AccessToken{Token: "aad-Secret-token-41", ExpiresOn: time.Now().Add(time.Hour)}, nil
}

func TestACR(t *testing.T) {
	const acrHost = "myreg.azurecr.io"
	c := newClock()
	claims, _ := json.Marshal(map[string]any{"exp": c.Now().Add(3 * time.Hour).Unix()})
	refresh := "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString(claims) + ".c2lnbmF0dXJlLXNlY3JldA"
	s := newRegistry(t, rt.WithBasicAuth(acrUser, refresh))
	var exchanges atomic.Int32
	ex := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/oauth2/exchange" || r.ParseForm() != nil || r.PostForm.Get("grant_type") != "access_token" ||
			r.PostForm.Get("service") != acrHost || r.PostForm.Get("access_token") != "aad-Secret-token-41" {
			http.Error(w, "bad exchange", http.StatusUnauthorized)
			return
		}
		exchanges.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]string{"refresh_token": refresh})
	}))
	t.Cleanup(ex.Close)
	aad := &fakeAAD{}
	e := newEnv(t, fmt.Sprintf("registries:\n- prefix: %s\n  api: %q\n  credentials: acr\n", acrHost, s.Host),
		WithAzureCredential(aad), WithClock(c.Now),
		func(o *options) { o.acrExchangeURL = func(string) string { return ex.URL + "/oauth2/exchange" } })
	a := e.resolve(t, "app", acrHost+"/team/app")
	if a.Error != "" {
		t.Fatal(a.Error)
	}
	c.Advance(2 * time.Hour) // 1 of 3 hours left: fresh
	if a := e.resolve(t, "app", acrHost+"/team/app"); a.Error != "" {
		t.Fatal(a.Error)
	}
	if n := exchanges.Load(); n != 1 {
		t.Errorf("%d exchanges, want 1", n)
	}
	c.Advance(31 * time.Minute) // under 30 minutes left: refresh
	if a := e.resolve(t, "app", acrHost+"/team/app"); a.Error != "" {
		t.Fatal(a.Error)
	}
	if n := exchanges.Load(); n != 2 {
		t.Errorf("%d exchanges after the refresh point, want 2", n)
	}
	noSecrets(t, []string{refresh, "aad-Secret-token-41", "c2lnbmF0dXJlLXNlY3JldA"}, e.channels(a))
}

func TestGoogle(t *testing.T) {
	const tok = "ya29.google-Secret-token"
	s := newRegistry(t, rt.WithBearerAuth("oauth2accesstoken", tok))
	s.Push(t, "proj/team/app", "2.0.0", rt.Image(t0, "linux/amd64"))
	yaml := fmt.Sprintf("registries:\n- prefix: europe-docker.pkg.dev/proj\n  api: %q\n  credentials: google\n", s.Host)
	e := newEnv(t, yaml, WithGoogleAuthenticator(func(context.Context) (authn.Authenticator, error) {
		return &authn.Basic{Username: "oauth2accesstoken", Password: tok}, nil
	}))
	a := e.resolve(t, "app", "europe-docker.pkg.dev/proj/team/app")
	if a.Error != "" {
		t.Fatal(a.Error)
	}
	noSecrets(t, []string{tok}, e.channels(a))

	e = newEnv(t, yaml, WithGoogleAuthenticator(func(context.Context) (authn.Authenticator, error) {
		return nil, errors.New("google: could not find default credentials")
	}))
	a = e.resolve(t, "app", "europe-docker.pkg.dev/proj/team/app")
	if !strings.Contains(a.Error, "credentials google") || !strings.Contains(a.Error, "could not find default credentials") {
		t.Errorf("%+v", a)
	}
}
