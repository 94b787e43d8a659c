package resolve_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

const (
	ghIssuer = "https://token.actions.githubusercontent.com"
	orgID    = "regexp:^https://github.com/org/"
)

// TestParseRegistriesRequireSignatureErrors: each bad requireSignature is refused
// with the entry's prefix, the field, the value and what is accepted.
func TestParseRegistriesRequireSignatureErrors(t *testing.T) {
	tests := []struct {
		name, entries string
		want          []string
	}{
		{"empty", `{prefix: ghcr.io/org, requireSignature: {}}`,
			[]string{`r.yaml: registries entry "ghcr.io/org": requireSignature: invalid value "{}"`, "requires nothing", "{identity, issuer}"}},
		{"identity without issuer", `{prefix: ghcr.io/org, requireSignature: {identity: me}}`,
			[]string{`registries entry "ghcr.io/org": requireSignature.issuer`, `identity "me" needs its OIDC issuer`}},
		{"issuer without identity", `{prefix: ghcr.io/org, requireSignature: {issuer: x}}`,
			[]string{`requireSignature.identity`, `issuer "x" needs the identity`}},
		{"key and identity", `{prefix: ghcr.io/org, requireSignature: {key: k, identity: me, issuer: x}}`,
			[]string{`requireSignature.identity: invalid value "me"`, `key "k" is set too`}},
		{"key and issuer", `{prefix: ghcr.io/org, requireSignature: {key: k, issuer: x}}`,
			[]string{`requireSignature.issuer: invalid value "x"`, `key "k" is set too`}},
		{"bad key name", `{prefix: ghcr.io/org, requireSignature: {key: "a key"}}`,
			[]string{`registries entry "ghcr.io/org": requireSignature.key: invalid value "a key"`, "trust.keys"}},
		{"bad identity regexp", `{prefix: ghcr.io/org, requireSignature: {identity: "regexp:(", issuer: x}}`,
			[]string{`requireSignature.identity: invalid value "regexp:("`, "missing closing )", "regexp:EXPR"}},
		{"bad issuer regexp", `{prefix: ghcr.io/org, requireSignature: {identity: me, issuer: "regexp:"}}`,
			[]string{`requireSignature.issuer`, "empty expression"}},
		{"unknown field", `{prefix: ghcr.io/org, requireSignature: {identty: me}}`,
			[]string{"identty"}},
		{"alias folded", `{prefix: index.docker.io/org, requireSignature: {key: "-k"}}`,
			[]string{`registries entry "docker.io/org": requireSignature.key`}},
		{"key under keyless", `{prefix: ghcr.io/org, requireSignature: {identity: me, issuer: x}}, {prefix: ghcr.io/org/team, requireSignature: {key: k}}`,
			[]string{`registries entry "ghcr.io/org/team": requireSignature.key: invalid value "k"`, `registries entry "ghcr.io/org" requireSignature`, "identity me (issuer x)"}},
		{"two keys", `{prefix: ghcr.io, requireSignature: {key: a}}, {prefix: ghcr.io/org/team, requireSignature: {key: b}}`,
			[]string{`registries entry "ghcr.io/org/team": requireSignature.key: invalid value "b"`, `registries entry "ghcr.io" requireSignature`, "key a"}},
		{"two exact issuers", `{prefix: ghcr.io/org/team, requireSignature: {identity: me, issuer: "https://other"}}, {prefix: ghcr.io/org, requireSignature: {identity: me, issuer: x}}`,
			[]string{`registries entry "ghcr.io/org/team": requireSignature.issuer: invalid value "https://other"`, `"ghcr.io/org" requireSignature`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := resolve.ParseRegistries("r.yaml", []byte("registries: ["+tt.entries+"]"))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func mustRepo(t *testing.T, s string) name.Repository {
	t.Helper()
	r, err := name.NewRepository(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRequiredTrust: the longest matching entry decides which requirements apply,
// and a broader entry's requirement still holds under a more specific entry that
// has none or one of its own (both then apply).
func TestRequiredTrust(t *testing.T) {
	cfgs, err := resolve.ParseRegistries("r.yaml", []byte(`registries:
- {prefix: ghcr.io/org, requireSignature: {identity: "`+orgID+`", issuer: "`+ghIssuer+`"}}
- {prefix: ghcr.io/org/team, api: mirror.internal:5000}
- {prefix: ghcr.io/org/team/web, requireSignature: {identity: "https://github.com/org/web/.github/workflows/release.yml@refs/heads/main", issuer: "`+ghIssuer+`"}}
- {prefix: ghcr.io/other}
- {prefix: quay.io/keyed, requireSignature: {key: release}}
- {prefix: docker.io/library, requireSignature: {key: hub}}
`))
	if err != nil {
		t.Fatal(err)
	}
	table := resolve.NewRegistryTable(cfgs)
	tests := []struct {
		repo, want, by string
	}{
		{"ghcr.io/org/app", `keyless:["regexp:^https://github.com/org/"]|["https://token.actions.githubusercontent.com"]`, `registries entry "ghcr.io/org" requireSignature`},
		{"ghcr.io/org/team/api", `keyless:["regexp:^https://github.com/org/"]|["https://token.actions.githubusercontent.com"]`, `registries entry "ghcr.io/org" requireSignature`},
		{"ghcr.io/org/team/web", `keyless:["regexp:^https://github.com/org/" "https://github.com/org/web/.github/workflows/release.yml@refs/heads/main"]|["https://token.actions.githubusercontent.com"]`,
			`registries entries "ghcr.io/org" and "ghcr.io/org/team/web" requireSignature`},
		{"ghcr.io/organisation/app", "", ""}, // whole path components only
		{"ghcr.io/other/app", "", ""},
		{"quay.io/keyed/x", "key:release", `registries entry "quay.io/keyed" requireSignature`},
		{"quay.io/unkeyed", "", ""},
		{"nginx", "key:hub", `registries entry "docker.io/library" requireSignature`},
		{"index.docker.io/library/nginx", "key:hub", `registries entry "docker.io/library" requireSignature`},
	}
	for _, tt := range tests {
		trust, by := table.RequiredTrust(mustRepo(t, tt.repo))
		if trust.String() != tt.want || by != tt.by {
			t.Errorf("%s: %s by %q, want %s by %q", tt.repo, trust, by, tt.want, tt.by)
		}
	}
	web, _ := table.RequiredTrust(mustRepo(t, "ghcr.io/org/team/web"))
	if web.MatchCertificate("https://github.com/org/api/.github/workflows/release.yml@refs/heads/main", ghIssuer) {
		t.Error("the specific entry's identity does not narrow the broader requirement")
	}
	if !web.MatchCertificate("https://github.com/org/web/.github/workflows/release.yml@refs/heads/main", ghIssuer) {
		t.Error("the signer both entries name is refused")
	}
}

// TestRequiredTrustFailsClosed: a table built in code from entries ParseRegistries
// would refuse still requires a signature, one nothing satisfies, and says why.
func TestRequiredTrustFailsClosed(t *testing.T) {
	for _, cfgs := range [][]resolve.RegistryConfig{
		{{Prefix: "ghcr.io/org", RequireSignature: &resolve.VerifySpec{Identity: "regexp:("}}},
		{{Prefix: "ghcr.io/org", RequireSignature: &resolve.VerifySpec{Key: "a"}}, {Prefix: "ghcr.io/org/team", RequireSignature: &resolve.VerifySpec{Key: "b"}}},
	} {
		trust, by := resolve.NewRegistryTable(cfgs).RequiredTrust(mustRepo(t, "ghcr.io/org/team/web"))
		if trust == nil || trust.Keyless() || trust.MatchCertificate("x", "y") || !strings.Contains(by, "invalid") {
			t.Errorf("%+v: %v by %q, want a requirement nothing satisfies", cfgs, trust, by)
		}
	}
}

// TestRequiredTrustInResolver: a Resolver given the table's RequiredTrust and no
// signature verifier refuses an image under a requiring prefix (and under a more
// specific entry without requireSignature), before any request; other images
// resolve.
func TestRequiredTrustInResolver(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "org/team/web", "1.0.0")
	pushTags(t, s, "free/web", "1.0.0")
	cfgs, err := resolve.ParseRegistries("r.yaml", []byte(fmt.Sprintf("registries:\n- {prefix: %q, requireSignature: {key: release}}\n- {prefix: %q}\n",
		s.Ref("org"), s.Ref("org/team"))))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := resolve.NewRemote(resolve.WithRegistries(cfgs), resolve.WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	resolver := resolve.NewResolver(reg, resolve.WithRequiredTrust(resolve.NewRegistryTable(cfgs).RequiredTrust))
	s.ResetCounts()
	answers, _ := resolver.ResolveBatch(context.Background(), "", []resolve.Request{{Image: s.Ref("org/team/web")}})
	if !strings.Contains(answers[0].Error, "requires a signature (key release)") || s.Total() != 0 {
		t.Errorf("required signature: %+v, %d requests", answers[0], s.Total())
	}
	answers, _ = resolver.ResolveBatch(context.Background(), "", []resolve.Request{{Image: s.Ref("free/web")}})
	if answers[0].Error != "" || answers[0].Result.Tag != "1.0.0" {
		t.Errorf("no requirement: %+v", answers[0])
	}
}
