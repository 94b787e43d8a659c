package credentials

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ecr"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/google"
)

// ---- ECR ----

func defaultAWSConfig(ctx context.Context, region string) (aws.Config, error) {
	return awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region))
}

// ecr is the ecr source: ecr:GetAuthorizationToken through the AWS SDK's default
// credential chain (IRSA, EKS pod identity, instance role), for the region of the
// registry host. The token (12h) is fetched again before it expires.
func (k *Keychain) ecr(account, region string, fips bool) fetchFunc {
	return func(ctx context.Context) (*material, error) {
		cfg, err := k.o.awsConfig(ctx, region)
		if err != nil {
			return nil, fmt.Errorf("AWS configuration: %w", err)
		}
		client := ecr.NewFromConfig(cfg, func(o *ecr.Options) {
			if fips {
				o.EndpointOptions.UseFIPSEndpoint = aws.FIPSEndpointStateEnabled
			}
		})
		out, err := client.GetAuthorizationToken(ctx, &ecr.GetAuthorizationTokenInput{})
		if err != nil {
			return nil, fmt.Errorf("ecr:GetAuthorizationToken for account %s in %s: %w", account, region, err)
		}
		if len(out.AuthorizationData) == 0 || out.AuthorizationData[0].AuthorizationToken == nil {
			return nil, fmt.Errorf("ecr:GetAuthorizationToken returned no authorization data")
		}
		d := out.AuthorizationData[0]
		raw, err := base64.StdEncoding.DecodeString(aws.ToString(d.AuthorizationToken))
		if err != nil {
			return nil, fmt.Errorf("ecr:GetAuthorizationToken: the token is not base64")
		}
		ac, err := parseUserPass(raw)
		if err != nil {
			return nil, fmt.Errorf("ecr:GetAuthorizationToken: the token is %w", err)
		}
		m := &material{lookup: single(ac), what: "ecr token"}
		if d.ExpiresAt != nil {
			m.expires = *d.ExpiresAt
		}
		return m, nil
	}
}

// ---- Google ----

func defaultGoogle(ctx context.Context) (authn.Authenticator, error) {
	// The token source outlives the request that first needed it.
	return google.NewEnvAuthenticator(context.WithoutCancel(ctx))
}

// googleToken is the google source: OAuth2 access tokens from Application Default
// Credentials (GKE workload identity, GOOGLE_APPLICATION_CREDENTIALS), refreshed
// by the token source as they expire.
func (k *Keychain) googleToken() fetchFunc {
	return func(ctx context.Context) (*material, error) {
		a, err := k.o.google(ctx)
		if err != nil {
			return nil, fmt.Errorf("google application default credentials: %w", err)
		}
		if a == nil || a == authn.Anonymous {
			return nil, fmt.Errorf("google application default credentials: none found")
		}
		return &material{
			lookup: func(ctx context.Context, _ name.Repository) (*authn.AuthConfig, error) {
				return authn.Authorization(ctx, a)
			},
			what: "oauth2 access token",
		}, nil
	}
}

// ---- ACR ----

func defaultAzureCredential() (azcore.TokenCredential, error) {
	return azidentity.NewDefaultAzureCredential(nil)
}

// acrUser is the user name ACR expects with a refresh token.
const acrUser = "00000000-0000-0000-0000-000000000000"

// acr is the acr source: an Azure AD token (workload identity, managed identity)
// exchanged at the registry's /oauth2/exchange for an ACR refresh token, used as
// the password of acrUser and fetched again before it expires.
func (k *Keychain) acr(host string) fetchFunc {
	return func(ctx context.Context) (*material, error) {
		cred, err := k.o.azure()
		if err != nil {
			return nil, fmt.Errorf("azure credential: %w", err)
		}
		tok, err := cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{azureScope(host)}})
		if err != nil {
			return nil, fmt.Errorf("azure AD token: %w", err)
		}
		form := url.Values{"grant_type": {"access_token"}, "service": {host}, "access_token": {tok.Token}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.o.acrExchangeURL(host), strings.NewReader(form.Encode()))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := k.o.httpClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("acr token exchange: %w", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != http.StatusOK {
			// The body of a refusal says why; it holds no token.
			return nil, fmt.Errorf("acr token exchange: %s", resp.Status)
		}
		var out struct {
			RefreshToken string `json:"refresh_token"`
		}
		if json.Unmarshal(body, &out) != nil || out.RefreshToken == "" {
			return nil, fmt.Errorf("acr token exchange: no refresh_token in the answer")
		}
		exp := expiresFromJWT(out.RefreshToken)
		if exp.IsZero() {
			exp = k.o.now().Add(time.Hour)
		}
		return &material{lookup: single(authn.AuthConfig{Username: acrUser, Password: out.RefreshToken}),
			expires: exp, what: "acr refresh token"}, nil
	}
}

// azureScope is the Azure Resource Manager scope of the registry's cloud.
func azureScope(host string) string {
	switch {
	case strings.HasSuffix(host, ".azurecr.cn"):
		return "https://management.chinacloudapi.cn/.default"
	case strings.HasSuffix(host, ".azurecr.us"):
		return "https://management.usgovcloudapi.net/.default"
	}
	return "https://management.azure.com/.default"
}
