package resolve_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

func TestParseRegistriesCredentialsFields(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	s := rt.New(t, rt.WithTLS())
	if err := os.WriteFile(ca, s.CACertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := fmt.Sprintf(`registries:
- prefix: 123456789012.dkr.ecr.eu-west-1.amazonaws.com
  credentials: ecr
  rateLimit: 20
  pageSize: 1000
- prefix: europe-docker.pkg.dev/proj
  credentials: google
- prefix: myreg.azurecr.io
  credentials: acr
- prefix: ghcr.io/acme
  credentials: github:ACME_TOKEN
  apps: [acme-*, "platform/*"]
- prefix: index.docker.io
  credentials: pullsecret:argocd/dockerhub
  defaultNamespace: library
  rateLimit: 0.5
- prefix: harbor.example.com
  credentials: secret:argocd/harbor-robot#creds
  credentialsExpire: 30m
  defaultNamespace: library
  ca: %s
- prefix: registry.example.com
  credentials: ext:/opt/creds.sh
  credentialsTimeout: 10s
  credentialsExpire: 11h
- prefix: quay.io
  credentials: dockerconfig:/etc/docker/config.json
- prefix: in-house.example.com
  credentials: env:IN_HOUSE_CREDS
`, ca)
	cfgs, err := resolve.ParseRegistries("registries.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if cfgs[4].Prefix != "docker.io" || cfgs[4].RateLimit != 0.5 || cfgs[5].CredentialsExpiry() != 30*time.Minute ||
		cfgs[6].CredentialsTimeoutOrDefault() != 10*time.Second || cfgs[0].CredentialsTimeoutOrDefault() != time.Minute {
		t.Errorf("parsed: %+v", cfgs)
	}

	tests := []struct{ yaml, field, value, accepted string }{
		{"- prefix: ghcr.io\n  credentials: vault:x\n", "registries[0].credentials", "vault:x", "dockerconfig:/path/config.json"},
		{"- prefix: ghcr.io\n  credentials: dockerconfig:relative.json\n", "registries[0].credentials", "dockerconfig:relative.json", "ext:/path/to/script"},
		{"- prefix: ghcr.io\n  credentials: pullsecret:argocd\n", "registries[0].credentials", "pullsecret:argocd", "pullsecret:NAMESPACE/NAME"},
		{"- prefix: ghcr.io\n  credentials: secret:argocd/x\n", "registries[0].credentials", "secret:argocd/x", "secret:NAMESPACE/NAME#FIELD"},
		{"- prefix: ghcr.io\n  credentials: env:1X\n", "registries[0].credentials", "env:1X", "env:VAR"},
		{"- prefix: ghcr.io\n  credentials: ecr\n", "registries[0].credentials", "ecr", "not for prefix ghcr.io"},
		{"- prefix: ghcr.io\n  credentials: google\n", "registries[0].credentials", "google", "only for the registries it serves"},
		{"- prefix: ghcr.io\n  credentials: acr\n", "registries[0].credentials", "acr", "only for the registries it serves"},
		{"- prefix: x.azurecr.io\n  credentials: acr:foo\n", "registries[0].credentials", "acr:foo", "acr"},
		{"- prefix: ghcr.io\n  credentialsExpire: 1h\n", "registries[0].credentialsExpire", "1h", "with credentials set"},
		{"- prefix: ghcr.io\n  credentials: env:X\n  credentialsExpire: soon\n", "registries[0].credentialsExpire", "soon", "positive duration"},
		{"- prefix: ghcr.io\n  credentials: env:X\n  credentialsTimeout: 5s\n", "registries[0].credentialsTimeout", "5s", "ext:/path/to/script"},
		{"- prefix: ghcr.io\n  rateLimit: -1\n", "registries[0].rateLimit", "-1", "requests per second"},
		{"- prefix: ghcr.io\n- prefix: quay.io\n  defaultNamespace: Bad/\n", "registries[1].defaultNamespace", "Bad/", "repository path"},
		{"- prefix: docker.io\n  defaultNamespace: acme\n", "registries[0].defaultNamespace", "acme", "only library on Docker Hub"},
		{"- prefix: ghcr.io\n  apps: ['[']\n", "registries[0].apps[0]", "[", "glob"},
		{"- prefix: ghcr.io\n  ca: relative.pem\n", "registries[0].ca", "relative.pem", "absolute path"},
		{"- prefix: ghcr.io\n  ca: " + notPEM + "\n", "registries[0].ca", notPEM, "PEM"},
		{"- prefix: ghcr.io\n  ca: " + ca + "\n  insecure: true\n", "registries[0].ca", ca, "not both"},
		{"- prefix: docker.io\n- prefix: index.docker.io\n", "registries[1].prefix", "index.docker.io", "each prefix once"},
	}
	for _, tt := range tests {
		_, err := resolve.ParseRegistries("f.yaml", []byte("registries:\n"+tt.yaml))
		var ie *resolve.InputError
		if !errors.As(err, &ie) {
			t.Errorf("%q: err = %v, want an *InputError", tt.yaml, err)
			continue
		}
		msg := err.Error()
		for _, want := range []string{"f.yaml: " + tt.field, fmt.Sprintf("%q", tt.value), tt.accepted} {
			if !strings.Contains(msg, want) {
				t.Errorf("%q: error %q does not say %q", tt.yaml, msg, want)
			}
		}
	}
}

func TestCredentialSourceString(t *testing.T) {
	for _, s := range []string{"dockerconfig:/a/b.json", "pullsecret:ns/n", "secret:ns/n#f", "env:V", "ext:/x.sh", "ecr", "google", "acr", "github", "github:T"} {
		src, err := resolve.ParseCredentialSource(s)
		if err != nil || src.String() != s {
			t.Errorf("%s: %v, %q", s, err, src.String())
		}
	}
}

func TestCAAndInsecureWithTLSRegistry(t *testing.T) {
	s := rt.New(t, rt.WithTLS(), rt.WithBasicAuth("robot", "tls-Secret-pass"))
	pushTags(t, s, "app", "1.0.0", "1.1.0")
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, s.CACertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	kc := staticKeychain{s.Host, "robot", "tls-Secret-pass"}
	resolveWith := func(yaml string) (*resolve.Result, error) {
		t.Helper()
		cfgs, err := resolve.ParseRegistries("registries.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return resolveIn(t, newResolver(t, resolve.WithRegistries(cfgs), resolve.WithKeychain(kc)), s, "app", resolve.PolicySpec{})
	}
	s.ResetCounts()
	res, err := resolveWith(fmt.Sprintf("registries:\n- prefix: %q\n  ca: %s\n", s.Host, ca))
	if err != nil || res.Tag != "1.1.0" {
		t.Fatalf("with the test CA: %v, %v", res, err)
	}
	if s.Count(rt.Tags) == 0 {
		t.Errorf("no tag list reached the TLS registry")
	}
	if _, err := resolveWith("registries: []\n"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: err = %v, want a certificate error", err)
	}
	if res, err := resolveWith(fmt.Sprintf("registries:\n- prefix: %q\n  insecure: true\n", s.Host)); err != nil || res.Tag != "1.1.0" {
		t.Errorf("insecure: %v, %v", res, err)
	}
	// A CA for another registry does not make this one trusted.
	other := rt.New(t, rt.WithTLS())
	otherCA := filepath.Join(t.TempDir(), "other.pem")
	if err := os.WriteFile(otherCA, other.CACertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := resolveWith(fmt.Sprintf("registries:\n- prefix: %q\n  ca: %s\n", s.Host, otherCA)); err == nil {
		t.Errorf("with another registry's CA: resolved")
	}
}

func TestDefaultNamespace(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "library/app", "1.0.0", "2.0.0")
	pushTags(t, s, "team/app", "3.0.0")
	cfgs, err := resolve.ParseRegistries("r.yaml", []byte(fmt.Sprintf("registries:\n- prefix: %q\n  defaultNamespace: library\n", s.Host)))
	if err != nil {
		t.Fatal(err)
	}
	r := newResolver(t, resolve.WithRegistries(cfgs))
	if res := mustResolve(t, r, s, "app", resolve.PolicySpec{}); res.Tag != "2.0.0" || res.Reference != s.Ref("app")+":2.0.0" {
		t.Errorf("one-component name: %+v", res)
	}
	if res := mustResolve(t, r, s, "team/app", resolve.PolicySpec{}); res.Tag != "3.0.0" {
		t.Errorf("two-component name: %+v", res)
	}
}

func TestAppsAuthorize(t *testing.T) {
	cfgs, err := resolve.ParseRegistries("r.yaml", []byte("registries:\n- prefix: ghcr.io/team-a\n  apps: [team-a-*, argocd/team-a]\n- prefix: ghcr.io\n"))
	if err != nil {
		t.Fatal(err)
	}
	table := resolve.NewRegistryTable(cfgs)
	for _, tt := range []struct {
		app, image string
		ok         bool
	}{
		{"team-a-web", "ghcr.io/team-a/web", true},
		{"argocd/team-a", "ghcr.io/team-a/web", true},
		{"team-b-web", "ghcr.io/team-a/web", false},
		{"x/team-a-web", "ghcr.io/team-a/web", false}, // * does not cross /
		{"", "ghcr.io/team-a/web", false},
		{"team-b-web", "ghcr.io/team-b/web", true},
		{"team-b-web", "ghcr.io/team-ab/web", true},
	} {
		repo, _ := name.NewRepository(tt.image)
		ctx := context.Background()
		if tt.app != "" {
			ctx = resolve.WithApp(ctx, tt.app)
		}
		if resolve.AppFrom(ctx) != tt.app {
			t.Fatalf("AppFrom = %q", resolve.AppFrom(ctx))
		}
		err := table.Authorize(ctx, repo)
		var ae *resolve.AuthError
		if tt.ok != (err == nil) || (err != nil && (!errors.As(err, &ae) || ae.Registry != "ghcr.io/team-a")) {
			t.Errorf("app %q, %s: err = %v", tt.app, tt.image, err)
		}
	}

	// A Resolver given the table's Authorize checks before any request.
	s := rt.New(t)
	pushTags(t, s, "team-a/web", "1.0.0")
	cfgs, _ = resolve.ParseRegistries("r.yaml", []byte(fmt.Sprintf("registries:\n- prefix: %q\n  apps: [team-a-*]\n", s.Ref("team-a"))))
	reg, err := resolve.NewRemote(resolve.WithRegistries(cfgs), resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	resolver := resolve.NewResolver(reg, resolve.WithAuthorizer(resolve.NewRegistryTable(cfgs).Authorize))
	answers, _ := resolver.ResolveBatch(context.Background(), "team-b", []resolve.Request{{Image: s.Ref("team-a/web")}})
	if answers[0].ErrorKind != resolve.KindRegistry || !strings.Contains(answers[0].Error, `app "team-b" may not use`) || s.Total() != 0 {
		t.Errorf("refused app: %+v, %d requests", answers[0], s.Total())
	}
	answers, _ = resolver.ResolveBatch(context.Background(), "team-a-web", []resolve.Request{{Image: s.Ref("team-a/web")}})
	if answers[0].Error != "" {
		t.Errorf("allowed app: %+v", answers[0])
	}
}
