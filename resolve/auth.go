package resolve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Credential source kinds, as written before the colon of a registry's
// credentials (or alone, for the cloud keychains).
const (
	CredDockerConfig = "dockerconfig" // dockerconfig:/path/config.json
	CredPullSecret   = "pullsecret"   // pullsecret:NAMESPACE/NAME
	CredSecret       = "secret"       // secret:NAMESPACE/NAME#FIELD
	CredEnv          = "env"          // env:VAR
	CredExt          = "ext"          // ext:/path/to/script
	CredECR          = "ecr"
	CredGoogle       = "google"
	CredACR          = "acr"
	CredGitHub       = "github" // github or github:VAR (default GITHUB_TOKEN)
)

// CredentialSourceForms lists the accepted credentials values, for error messages.
const CredentialSourceForms = "dockerconfig:/path/config.json, pullsecret:NAMESPACE/NAME, " +
	"secret:NAMESPACE/NAME#FIELD, env:VAR, ext:/path/to/script, ecr, google, acr, github[:VAR]"

// CredentialSource is a parsed credentials value. It names where a secret is, never
// the secret itself, so it may appear in errors and logs.
type CredentialSource struct {
	Kind string
	// Path of dockerconfig: and ext:.
	Path string
	// Namespace and Name of pullsecret: and secret:; Field of secret:.
	Namespace, Name, Field string
	// Var is the environment variable of env: and github: (GITHUB_TOKEN by default).
	Var string
}

var (
	reK8sName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	reField   = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)
	reEnvVar  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ParseCredentialSource parses a registry's credentials value.
func ParseCredentialSource(s string) (CredentialSource, error) {
	kind, arg, hasArg := strings.Cut(strings.TrimSpace(s), ":")
	src := CredentialSource{Kind: kind}
	switch kind {
	case CredECR, CredGoogle, CredACR:
		if hasArg {
			return src, fmt.Errorf("%s takes no argument", kind)
		}
	case CredGitHub:
		src.Var = "GITHUB_TOKEN"
		if hasArg {
			if !reEnvVar.MatchString(arg) {
				return src, fmt.Errorf("%q is not an environment variable name", arg)
			}
			src.Var = arg
		}
	case CredDockerConfig, CredExt:
		if !hasArg || !filepath.IsAbs(arg) {
			return src, fmt.Errorf("%s needs an absolute path", kind)
		}
		src.Path = filepath.Clean(arg)
	case CredEnv:
		if !reEnvVar.MatchString(arg) {
			return src, fmt.Errorf("env needs an environment variable name")
		}
		src.Var = arg
	case CredPullSecret, CredSecret:
		ref := arg
		if kind == CredSecret {
			var ok bool
			ref, src.Field, ok = strings.Cut(arg, "#")
			if !ok || !reField.MatchString(src.Field) {
				return src, fmt.Errorf("secret needs NAMESPACE/NAME#FIELD")
			}
		}
		ns, n, ok := strings.Cut(ref, "/")
		if !ok || !reK8sName.MatchString(ns) || !reK8sName.MatchString(n) || len(ns) > 63 {
			return src, fmt.Errorf("%s needs NAMESPACE/NAME of a Kubernetes secret", kind)
		}
		src.Namespace, src.Name = ns, n
	default:
		return src, fmt.Errorf("unknown credential source %q", kind)
	}
	return src, nil
}

// String is the source as written (it holds no secret).
func (c CredentialSource) String() string {
	switch c.Kind {
	case CredDockerConfig, CredExt:
		return c.Kind + ":" + c.Path
	case CredPullSecret:
		return c.Kind + ":" + c.Namespace + "/" + c.Name
	case CredSecret:
		return c.Kind + ":" + c.Namespace + "/" + c.Name + "#" + c.Field
	case CredEnv:
		return c.Kind + ":" + c.Var
	case CredGitHub:
		if c.Var != "" && c.Var != "GITHUB_TOKEN" {
			return c.Kind + ":" + c.Var
		}
	}
	return c.Kind
}

// checkHost refuses a cloud keychain for a registry it does not serve, so that a
// cloud token is never sent to another host.
func (c CredentialSource) checkHost(host string) error {
	switch c.Kind {
	case CredECR:
		if _, _, ok := ECRHost(host); !ok {
			return fmt.Errorf("%s is not an ECR private registry (ACCOUNT.dkr.ecr.REGION.amazonaws.com)", host)
		}
	case CredGoogle:
		if !isGoogleHost(host) {
			return fmt.Errorf("%s is not Artifact Registry (*.pkg.dev) or Container Registry (gcr.io, *.gcr.io)", host)
		}
	case CredACR:
		if !reACRHost.MatchString(host) {
			return fmt.Errorf("%s is not an Azure Container Registry (NAME.azurecr.io)", host)
		}
	}
	return nil
}

// AuthError says that a registry refused a credential, that a credential could not
// be fetched, or that an app may not use a registry entry. It names the registry
// and the credential source, never a secret.
type AuthError struct {
	// Registry is the entry's prefix (or the registry host when no entry matched).
	Registry string
	// Source is the credential source as configured ("ext:/opt/ecr-login.sh"), or "".
	Source string
	// App is the application refused, for an app scoping refusal.
	App string
	// Reason says what went wrong, without secrets.
	Reason string
	Err    error
}

func (e *AuthError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "registry %s", e.Registry)
	if e.Source != "" {
		fmt.Fprintf(&b, " (credentials %s)", e.Source)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, ": %s", e.Reason)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

func (e *AuthError) Unwrap() error { return e.Err }

// IsAuthFailure reports whether err is a registry's 401 or 403 answer.
func IsAuthFailure(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && (te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden)
}

type appKey struct{}

// WithApp returns ctx carrying the Argo CD application a resolution is for; entries
// with apps: allow or refuse it (see WithAuthorizer, Remote.Authorize).
func WithApp(ctx context.Context, app string) context.Context {
	return context.WithValue(ctx, appKey{}, app)
}

// AppFrom returns the application ctx carries ("" when none).
func AppFrom(ctx context.Context) string {
	app, _ := ctx.Value(appKey{}).(string)
	return app
}

// Authorize refuses an app that the registry entry of repo does not list in its
// apps: (an *AuthError); entries without apps allow every app. It reads nothing
// from the network.
func (t RegistryTable) Authorize(ctx context.Context, repo name.Repository) error {
	rc, ok := t.Lookup(repo)
	if !ok || rc.AllowsApp(AppFrom(ctx)) {
		return nil
	}
	app := AppFrom(ctx)
	reason := fmt.Sprintf("app %q may not use this registry entry (apps: %s)", app, strings.Join(rc.Apps, ", "))
	if app == "" {
		reason = fmt.Sprintf("no app given; this registry entry is restricted to apps %s", strings.Join(rc.Apps, ", "))
	}
	return &AuthError{Registry: rc.Prefix, Source: rc.Credentials, App: app, Reason: reason}
}

// CredentialKeychain is implemented by keychains (resolve/credentials) that know
// which configured source gives a repository's credential. The Remote uses it to
// fetch a rejected credential once more and to name the source in errors.
type CredentialKeychain interface {
	// CredentialSource names the source configured for repo (the credentials value
	// as written), "" when none is.
	CredentialSource(repo name.Repository) string
	// Invalidate forgets repo's cached credential, so that the next request
	// fetches it again.
	Invalidate(repo name.Repository)
}

type originKey struct{}

// withOrigin records the repository as written (before the API endpoint and
// default namespace mapping), for the keychain.
func withOrigin(ctx context.Context, repo name.Repository) context.Context {
	return context.WithValue(ctx, originKey{}, repo)
}

// originFrom returns the repository a registry request is for, as written (before
// the Remote mapped it to a configured API endpoint).
func originFrom(ctx context.Context) (name.Repository, bool) {
	repo, ok := ctx.Value(originKey{}).(name.Repository)
	return repo, ok
}
