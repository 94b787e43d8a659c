// Package credentials supplies registry credentials from the sources a registries
// configuration names (resolve.RegistryConfig.Credentials): docker config files,
// Kubernetes pull secrets and secrets, environment variables, external scripts,
// and the cloud keychains of ECR, Google (Artifact Registry, GCR), ACR and GitHub.
//
// A Keychain binds each credential to its registry entry: it is handed out only
// for repositories under that entry's prefix, so go-containerregistry sends it only
// to that registry's endpoint (never to another host, never along a redirect to
// blob storage). Fetched credentials are cached, refreshed before they expire and
// fetched again when the registry rejects them (resolve.CredentialKeychain). No
// secret ever appears in an error or a log line: errors name the registry and the
// source ("ext:/opt/ecr-login.sh"), never what it printed.
package credentials

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// DefaultSecretExpire is how long a credential read from a Kubernetes secret is
// used before it is read again, unless credentialsExpire says otherwise.
const DefaultSecretExpire = 5 * time.Minute

// Keychain resolves the credential of every registry entry that names a
// credentials source; other repositories go to the fallback keychain. It
// implements authn.Keychain, authn.ContextKeychain and resolve.CredentialKeychain.
type Keychain struct {
	table   resolve.RegistryTable
	entries map[string]*entry // by prefix
	o       options

	kubeMu sync.Mutex
	kube   kubernetes.Interface
}

type options struct {
	fallback   authn.Keychain
	log        *slog.Logger
	now        func() time.Time
	kubeConfig func() (*rest.Config, error)
	awsConfig  func(ctx context.Context, region string) (aws.Config, error)
	azure      func() (azcore.TokenCredential, error)
	google     func(ctx context.Context) (authn.Authenticator, error)
	httpClient *http.Client
	// acrExchangeURL is where an AAD token is exchanged for an ACR refresh token.
	acrExchangeURL func(host string) string
}

// Option configures a Keychain.
type Option func(*options)

// WithFallback sets the keychain for repositories without a configured source
// (default: authn.DefaultKeychain, the docker config of $DOCKER_CONFIG).
func WithFallback(k authn.Keychain) Option { return func(o *options) { o.fallback = k } }

// WithLogger sets where credential fetches and failures are logged (never a secret).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithClock sets the clock that expiry and refresh are judged by.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithKubernetesConfig sets the API server configuration for pullsecret: and
// secret: (default: the in-cluster configuration of the pod's service account).
func WithKubernetesConfig(c *rest.Config) Option {
	return func(o *options) { o.kubeConfig = func() (*rest.Config, error) { return c, nil } }
}

// WithAWSConfig sets how the AWS configuration of a region is loaded for ecr
// (default: the SDK's default chain: IRSA, EKS pod identity, instance role, env).
func WithAWSConfig(f func(ctx context.Context, region string) (aws.Config, error)) Option {
	return func(o *options) { o.awsConfig = f }
}

// WithAzureCredential sets the Azure AD credential for acr (default:
// azidentity.NewDefaultAzureCredential: workload identity, managed identity, env).
func WithAzureCredential(c azcore.TokenCredential) Option {
	return func(o *options) { o.azure = func() (azcore.TokenCredential, error) { return c, nil } }
}

// WithGoogleAuthenticator sets how the google source gets its authenticator
// (default: go-containerregistry's Application Default Credentials authenticator,
// which is workload identity on GKE).
func WithGoogleAuthenticator(f func(ctx context.Context) (authn.Authenticator, error)) Option {
	return func(o *options) { o.google = f }
}

// New returns the keychain of cfgs (as resolve.ParseRegistries returns them). It
// reads nothing yet: each credential is fetched when first needed.
func New(cfgs []resolve.RegistryConfig, opts ...Option) (*Keychain, error) {
	k := &Keychain{table: resolve.NewRegistryTable(cfgs), entries: map[string]*entry{}}
	k.o = options{
		fallback:       authn.DefaultKeychain,
		log:            slog.Default(),
		now:            time.Now,
		kubeConfig:     rest.InClusterConfig,
		awsConfig:      defaultAWSConfig,
		azure:          defaultAzureCredential,
		google:         defaultGoogle,
		httpClient:     &http.Client{Timeout: time.Minute},
		acrExchangeURL: func(host string) string { return "https://" + host + "/oauth2/exchange" },
	}
	for _, opt := range opts {
		opt(&k.o)
	}
	for _, rc := range cfgs {
		if rc.Credentials == "" {
			continue
		}
		src, err := resolve.ParseCredentialSource(rc.Credentials)
		if err != nil {
			return nil, &resolve.InputError{Field: "registries[" + rc.Prefix + "].credentials", Value: rc.Credentials,
				Accepted: resolve.CredentialSourceForms, Err: err}
		}
		e := &entry{k: k, rc: rc, src: src, sem: make(chan struct{}, 1)}
		if e.fetch, err = k.fetcher(rc, src); err != nil {
			return nil, err
		}
		k.entries[rc.Prefix] = e
	}
	return k, nil
}

// fetcher returns how a source's credential is fetched, and sets its default
// expiry.
func (k *Keychain) fetcher(rc resolve.RegistryConfig, src resolve.CredentialSource) (fetchFunc, error) {
	switch src.Kind {
	case resolve.CredDockerConfig:
		return k.dockerConfigFile(src.Path), nil
	case resolve.CredPullSecret:
		return k.pullSecret(src.Namespace, src.Name), nil
	case resolve.CredSecret:
		return k.secretField(src.Namespace, src.Name, src.Field), nil
	case resolve.CredEnv:
		return envUserPass(src.Var), nil
	case resolve.CredExt:
		return extScript(src.Path, rc.CredentialsTimeoutOrDefault(), rc.Prefix), nil
	case resolve.CredGitHub:
		return githubToken(src.Var), nil
	case resolve.CredECR:
		account, region, ok := resolve.ECRHost(rc.Host())
		if !ok {
			return nil, fmt.Errorf("registries[%s].credentials: ecr needs an ECR registry host", rc.Prefix)
		}
		return k.ecr(account, region, strings.Contains(rc.Host(), "-fips.")), nil
	case resolve.CredGoogle:
		return k.googleToken(), nil
	case resolve.CredACR:
		return k.acr(rc.Host()), nil
	}
	return nil, fmt.Errorf("registries[%s].credentials: unknown source %q", rc.Prefix, src.Kind)
}

// Resolve implements authn.Keychain.
func (k *Keychain) Resolve(target authn.Resource) (authn.Authenticator, error) {
	return k.ResolveContext(context.Background(), target)
}

// ResolveContext implements authn.ContextKeychain. A repository under an entry with
// a credentials source gets that entry's credential, unless ctx carries an app
// (resolve.WithApp) that the entry's apps do not allow: then an *resolve.AuthError.
// Everything else goes to the fallback keychain.
func (k *Keychain) ResolveContext(ctx context.Context, target authn.Resource) (authn.Authenticator, error) {
	repo, ok := target.(name.Repository)
	if !ok {
		return authn.Resolve(ctx, k.o.fallback, target)
	}
	e := k.entry(repo)
	if e == nil {
		return authn.Resolve(ctx, k.o.fallback, target)
	}
	if app := resolve.AppFrom(ctx); app != "" && !e.rc.AllowsApp(app) {
		return nil, &resolve.AuthError{Registry: e.rc.Prefix, Source: e.src.String(), App: app,
			Reason: fmt.Sprintf("app %q may not use this registry entry's credentials (apps: %s)", app, strings.Join(e.rc.Apps, ", "))}
	}
	return &authenticator{e: e, repo: repo}, nil
}

// CredentialSource implements resolve.CredentialKeychain.
func (k *Keychain) CredentialSource(repo name.Repository) string {
	if e := k.entry(repo); e != nil {
		return e.src.String()
	}
	return ""
}

// Invalidate implements resolve.CredentialKeychain: repo's credential is fetched
// again on its next use.
func (k *Keychain) Invalidate(repo name.Repository) {
	if e := k.entry(repo); e != nil {
		e.invalidate()
	}
}

func (k *Keychain) entry(repo name.Repository) *entry {
	rc, ok := k.table.Lookup(repo)
	if !ok {
		return nil
	}
	return k.entries[rc.Prefix]
}

// fetchFunc fetches a source's credential material.
type fetchFunc func(ctx context.Context) (*material, error)

// material is what a source gave: a credential per repository (a docker config
// may hold several, matched by host and path) and when it stops being valid.
type material struct {
	lookup func(ctx context.Context, repo name.Repository) (*authn.AuthConfig, error)
	// expires is when the source says the credential expires (zero: unknown).
	expires time.Time
	// ttl is the source's default time to use it before fetching again (zero: until
	// rejected); credentialsExpire overrides it.
	ttl time.Duration
	// stale, when set, reports whether the source changed since (a file).
	stale func() bool
	// what describes the credential for the log ("user robot", "token"); no secret.
	what string
}

func single(ac authn.AuthConfig) func(context.Context, name.Repository) (*authn.AuthConfig, error) {
	return func(context.Context, name.Repository) (*authn.AuthConfig, error) {
		c := ac
		return &c, nil
	}
}

// entry caches the credential of one registry entry.
type entry struct {
	k     *Keychain
	rc    resolve.RegistryConfig
	src   resolve.CredentialSource
	fetch fetchFunc

	sem       chan struct{} // one fetch at a time
	mu        sync.Mutex
	cur       *material
	refreshAt time.Time // zero: until invalidated
}

func (e *entry) invalidate() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur != nil {
		e.k.o.log.Info("registry credential rejected; fetching it again", "registry", e.rc.Prefix, "source", e.src.String())
	}
	e.cur = nil
}

// current returns a valid credential, fetching it when there is none, when it is
// due for refresh, or when its source changed.
func (e *entry) current(ctx context.Context) (*material, error) {
	if m := e.valid(); m != nil {
		return m, nil
	}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, e.authError("waiting for the credential", ctx.Err())
	}
	defer func() { <-e.sem }()
	if m := e.valid(); m != nil { // fetched while we waited
		return m, nil
	}
	m, err := e.fetch(ctx)
	now := e.k.o.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		if old := e.cur; old != nil && !old.expires.IsZero() && now.Before(old.expires) {
			e.k.o.log.Warn("refreshing registry credential failed; using the current one until it expires",
				"registry", e.rc.Prefix, "source", e.src.String(), "expires", old.expires, "error", err.Error())
			e.refreshAt = now.Add(min(old.expires.Sub(now)/2, time.Minute))
			return old, nil
		}
		e.cur = nil
		return nil, e.authError("could not fetch the credential", err)
	}
	e.cur, e.refreshAt = m, refreshAt(now, m, e.rc.CredentialsExpiry())
	attrs := []any{"registry", e.rc.Prefix, "source", e.src.String()}
	if m.what != "" {
		attrs = append(attrs, "credential", m.what)
	}
	if !m.expires.IsZero() {
		attrs = append(attrs, "expires", m.expires.UTC().Format(time.RFC3339))
	}
	if !e.refreshAt.IsZero() {
		attrs = append(attrs, "refresh", e.refreshAt.UTC().Format(time.RFC3339))
	}
	e.k.o.log.Info("registry credential fetched", attrs...)
	return m, nil
}

func (e *entry) valid() *material {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur == nil || (!e.refreshAt.IsZero() && !e.k.o.now().Before(e.refreshAt)) {
		return nil
	}
	if e.cur.stale != nil && e.cur.stale() {
		return nil
	}
	return e.cur
}

// refreshAt is when a credential fetched at now is fetched again: before it
// expires (a fifth of its lifetime early, at most 30 minutes), after
// credentialsExpire or the source's default, whichever comes first.
func refreshAt(now time.Time, m *material, expire time.Duration) time.Time {
	var at time.Time
	earliest := func(t time.Time) {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	if !m.expires.IsZero() {
		life := m.expires.Sub(now)
		earliest(m.expires.Add(-min(life/5, 30*time.Minute)))
	}
	if expire == 0 {
		expire = m.ttl
	}
	if expire > 0 {
		earliest(now.Add(expire))
	}
	return at
}

func (e *entry) authError(reason string, err error) error {
	return &resolve.AuthError{Registry: e.rc.Prefix, Source: e.src.String(), Reason: reason, Err: err}
}

// authenticator is the credential of one repository under an entry, looked up on
// every request so that a refreshed credential is used at once.
type authenticator struct {
	e    *entry
	repo name.Repository
}

func (a *authenticator) Authorization() (*authn.AuthConfig, error) {
	return a.AuthorizationContext(context.Background())
}

func (a *authenticator) AuthorizationContext(ctx context.Context) (*authn.AuthConfig, error) {
	m, err := a.e.current(ctx)
	if err != nil {
		return nil, err
	}
	ac, err := m.lookup(ctx, a.repo)
	if err != nil {
		return nil, a.e.authError("no credential", err)
	}
	return ac, nil
}

// parseUserPass reads user:password from the first non-empty line of b. Its
// errors never quote b.
func parseUserPass(b []byte) (authn.AuthConfig, error) {
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		user, pass, ok := strings.Cut(line, ":")
		if !ok || user == "" || pass == "" {
			break
		}
		return authn.AuthConfig{Username: user, Password: pass}, nil
	}
	return authn.AuthConfig{}, fmt.Errorf("not user:password (the value is not shown: it may hold a secret)")
}
