package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/spf13/pflag"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func load(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	f := AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return Config{}, err // typed flags are checked as they are parsed
	}
	return f.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

func TestConfigDefaults(t *testing.T) {
	c, err := load(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Socket != api.DefaultSocket || c.MetricsAddr != ":8090" || c.TagTTL != 2*time.Minute || c.HeadTTL != time.Hour ||
		c.StaleIfError != 24*time.Hour || c.ManifestCacheSize != 32<<20 || len(c.RateLimits) != 0 || c.RegistryConcurrency != 64 ||
		c.Refresh != RefreshHard || c.RefreshInterval != 3*time.Minute || c.ControlPlaneNamespace != "argocd" ||
		c.ForgetAfter != 25*time.Hour || c.MaxTrackedApps != 10000 {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestConfigPrecedence(t *testing.T) {
	file := writeFile(t, "c.yaml", `
socket: /run/file.sock
tagTTL: 5m
headTTL: 2h
staleIfError: 1h
refreshAhead: 10%
manifestCacheSize: 64MiB
blobCacheSize: 16777216
registryConcurrency: 4
fetchTimeout: 30s
refresh: "off"
refreshInterval: 1m
controlPlaneNamespace: gitops
forgetAfter: 48h
maxTrackedApps: 500
rateLimits:
  - registry: docker.io
    rps: 2
    burst: 10
  - registry: "*"
    rps: 50
registries:
  - prefix: ghcr.io/org
    api: mirror.internal:5000
`)
	env := map[string]string{ConfigEnv: file, api.SocketEnv: "/run/env.sock", "IMAGE_RESOLVER_TAG_TTL": "3m",
		"IMAGE_RESOLVER_RATE_LIMITS": "ghcr.io=5:5,index.docker.io=3"}
	env["IMAGE_RESOLVER_REFRESH_INTERVAL"] = "45s"
	c, err := load(t, []string{"--tag-ttl", "4m", "--rate-limit", "ghcr.io=7", "--metrics-addr", "127.0.0.1:9100", "--refresh-interval", "30s"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if c.Socket != "/run/env.sock" || c.TagTTL != 4*time.Minute || c.HeadTTL != 2*time.Hour || c.StaleIfError != time.Hour ||
		c.RefreshAhead != 0.1 || c.ManifestCacheSize != 64<<20 || c.BlobCacheSize != 16<<20 || c.RegistryConcurrency != 4 ||
		c.FetchTimeout != 30*time.Second || c.MetricsAddr != "127.0.0.1:9100" {
		t.Fatalf("config: %+v", c)
	}
	if c.Refresh != RefreshOff || c.RefreshInterval != 30*time.Second || c.ControlPlaneNamespace != "gitops" || c.ForgetAfter != 48*time.Hour || c.MaxTrackedApps != 500 {
		t.Errorf("refresh settings: %s %s %s %s %d", c.Refresh, c.RefreshInterval, c.ControlPlaneNamespace, c.ForgetAfter, c.MaxTrackedApps)
	}
	if got := c.Get("rateLimits"); got != "docker.io=3:3,*=50:50,ghcr.io=7:7" {
		t.Errorf("rate limits %s: file, then env per registry (docker.io aliases folded), then flags", got)
	}
	if len(c.Registries) != 1 || c.Registries[0].API != "mirror.internal:5000" {
		t.Errorf("registries: %+v", c.Registries)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		args []string
		env  map[string]string
		want []string // all in the message
	}{
		{"unknown key", "tagTtl: 2m\n", nil, nil, []string{`unknown key "tagTtl"`, "tagTTL", "headTTL"}},
		{"bad duration in file", "headTTL: 1 hour\n", nil, nil, []string{"headTTL", `"1 hour"`, "Go duration"}},
		{"number without unit", "tagTTL: 120\n", nil, nil, []string{"tagTTL", `"120"`, "Go duration"}},
		{"bad size", "blobCacheSize: 32 megs\n", nil, nil, []string{"blobCacheSize", `"32 megs"`, "MiB"}},
		{"size too small", "blobCacheSize: 1KiB\n", nil, nil, []string{"blobCacheSize", "at least 1MiB"}},
		{"bad refresh", "refreshAhead: 1.5\n", nil, nil, []string{"refreshAhead", "1.5", "fraction"}},
		{"rate limit typo", "rateLimits: [{registry: docker.io, rsp: 2}]\n", nil, nil, []string{"rateLimits[0]", "rsp"}},
		{"rate limit prefix", "rateLimits: [{registry: ghcr.io/Org, rps: 2}]\n", nil, nil, []string{"rateLimits[0].registry", "ghcr.io/Org", "optional /path"}},
		{"rate limit zero", "rateLimits: [{registry: ghcr.io, rps: 0}]\n", nil, nil, []string{"rateLimits[0].rps", "above 0"}},
		{"registries", "registries: [{prefix: 'ghcr.io', pageSize: -1}]\n", nil, nil, []string{"registries[0].pageSize"}},
		{"not a mapping", "- a\n- b\n", nil, nil, []string{"mapping"}},
		{"env duration", "", nil, map[string]string{"IMAGE_RESOLVER_STALE_IF_ERROR": "-1h"}, []string{"IMAGE_RESOLVER_STALE_IF_ERROR", "-1h", "not negative"}},
		{"env rate", "", nil, map[string]string{"IMAGE_RESOLVER_RATE_LIMITS": "docker.io"}, []string{"IMAGE_RESOLVER_RATE_LIMITS", "PREFIX=RPS"}},
		{"flag size", "", []string{"--manifest-cache-size", "lots"}, nil, []string{"--manifest-cache-size", `"lots"`, "MiB"}},
		{"flag metrics", "", []string{"--metrics-addr", "localhost"}, nil, []string{"--metrics-addr", "HOST:PORT"}},
		{"long socket", "", []string{"--socket", "/" + strings.Repeat("s", 120)}, nil, []string{"--socket", "at most 107 bytes"}},
		{"refresh mode", "refresh: soft\n", nil, nil, []string{"refresh", `"soft"`, "hard or off"}},
		{"refresh interval", "", []string{"--refresh-interval", "0s"}, nil, []string{"--refresh-interval", "at least 1s"}},
		{"control-plane namespace", "", nil, map[string]string{"IMAGE_RESOLVER_CONTROL_PLANE_NAMESPACE": "Argo_CD"}, []string{"IMAGE_RESOLVER_CONTROL_PLANE_NAMESPACE", "Argo_CD", "namespace name"}},
		{"max tracked apps", "maxTrackedApps: 0\n", nil, nil, []string{"maxTrackedApps", "at least 1"}},
		{"git unknown key", "git: {autor: x}\n", nil, nil, []string{`unknown key "git.autor"; did you mean "author"?`, "(line 1, column 7)", "signingKeyFile"}},
		{"git author", "git: {author: nobody}\n", nil, nil, []string{"git.author", "nobody", "Name <email>"}},
		{"git credential prefix", "git: {credentials: [{prefix: git.example.com, passwordEnv: T}]}\n", nil, nil, []string{"git.credentials[0].prefix", "https://"}},
		{"git credential secret", "git: {credentials: [{prefix: 'https://g/', passwordEnv: T, passwordFile: /f}]}\n", nil, nil, []string{"git.credentials[0]", "exactly one of passwordFile and passwordEnv"}},
		{"git message", "git: {message: '{{.Apps'}\n", nil, nil, []string{"git.message", "text/template"}},
		{"git forge kind", "git: {forges: [{prefix: 'https://g/', kind: bitbucket, api: 'https://g', tokenFile: /t}]}\n", nil, nil, []string{"git.forges[0].kind", "bitbucket", "github, gitlab or gitea"}},
		{"git forge api", "git: {forges: [{prefix: 'https://g/', kind: gitea, api: 'https://bot:secret@g', tokenFile: /t}]}\n", nil, nil, []string{"git.forges[0].api", "https://bot:xxxxx@g", "without credentials"}},
		{"git forge token", "git: {forges: [{prefix: 'https://g/', kind: gitlab, api: 'https://g'}]}\n", nil, nil, []string{"git.forges[0].tokenFile", "API token"}},
		{"git forge app on gitea", "git: {forges: [{prefix: 'https://g/', kind: gitea, api: 'https://g', appID: 1, installationID: 2, privateKeyFile: /k}]}\n", nil, nil, []string{"git.forges[0].appID", "kind github"}},
		{"git forge app half", "git: {forges: [{prefix: 'https://g/', kind: github, api: 'https://g', appID: 1}]}\n", nil, nil, []string{"git.forges[0].appID", "all three"}},
		{"git forge unknown key", "git: {forges: [{prefix: 'https://g/', kind: github, api: 'https://g', token: x}]}\n", nil, nil, []string{`unknown key "git.forges[0].token"; did you mean "tokenFile"?`, "(accepted: prefix, kind, api, tokenFile"}},
		{"git batch window", "git: {batchWindow: soon}\n", nil, nil, []string{"soon", "Go duration"}},
		{"two registries sources", "registries: [{prefix: ghcr.io}]\n", nil, map[string]string{RegistriesConfigEnv: "/x.yaml"}, []string{RegistriesConfigEnv, "one place"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range tt.env {
				env[k] = v
			}
			if tt.file != "" {
				env[ConfigEnv] = writeFile(t, "config.yaml", tt.file)
			}
			_, err := load(t, tt.args, env)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1048576": 1 << 20, "32MiB": 32 << 20, "1.5GiB": 3 << 29, "100MB": 100e6, "64Mi": 64 << 20, "512 KiB": 512 << 10} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "MiB", "1TB", "NaN"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestValidateCatchesConfigBuiltInCode(t *testing.T) {
	c := DefaultConfig()
	c.HeadTTL = 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "headTTL") {
		t.Errorf("zero head TTL: %v", err)
	}
	c = DefaultConfig()
	c.RateLimits = append(c.RateLimits, resolve.RateLimit{Registry: "*", RPS: 1, Burst: 1}, resolve.RateLimit{Registry: "*", RPS: 2, Burst: 2})
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "each registry once") {
		t.Errorf("duplicate rate limit: %v", err)
	}
}

func TestExampleFileParses(t *testing.T) {
	c := DefaultConfig()
	if err := c.ParseFile("example", []byte(ExampleFile)); err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	for _, s := range Settings() {
		examples := s.Key == "rateLimits" || s.Key == "defaultPlatforms" || s.Key == "extraImagePaths" || s.Key == "kustomizeRemoteHosts" // examples, not defaults
		if !examples && c.Get(s.Key) != d.Get(s.Key) {
			t.Errorf("%s: example %s, default %s", s.Key, c.Get(s.Key), d.Get(s.Key))
		}
	}
	if got := c.Get("rateLimits"); got != "docker.io=2:10,*=100:200" {
		t.Errorf("rate limits %s", got)
	}
	if len(c.DefaultPlatforms) != 1 || len(c.ExtraImagePaths) != 1 {
		t.Errorf("examples: platforms %v, paths %v", c.DefaultPlatforms, c.ExtraImagePaths)
	}
	if len(c.Registries) != 1 || c.Validate() != nil {
		t.Errorf("registries %v, validate %v", c.Registries, c.Validate())
	}
}

func TestEffectiveRateLimits(t *testing.T) {
	c := DefaultConfig()
	err := c.ParseFile("c.yaml", []byte(`
rateLimits: [{registry: ghcr.io, rps: 9}]
registries:
  - {prefix: ghcr.io, rateLimit: 1}
  - {prefix: ghcr.io/org, rateLimit: 0.5}
  - {prefix: index.docker.io, rateLimit: 2}
  - {prefix: quay.io}
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rl := range c.EffectiveRateLimits() {
		got = append(got, rl.String())
	}
	if want := "ghcr.io=9:9 ghcr.io/org=0.5:1 docker.io=2:2 public.ecr.aws=1:5"; strings.Join(got, " ") != want {
		t.Errorf("effective limits %q, want %q (rateLimits win over a registries entry's rateLimit, both over the built-in ones)", strings.Join(got, " "), want)
	}
	var none []string
	d := DefaultConfig()
	for _, rl := range d.EffectiveRateLimits() {
		none = append(none, rl.String())
	}
	if want := "docker.io=10:20 public.ecr.aws=1:5"; strings.Join(none, " ") != want {
		t.Errorf("built-in limits %q, want %q (no bucket for other registries: the governor bounds them)", strings.Join(none, " "), want)
	}
}

func TestRenderSettings(t *testing.T) {
	file := writeFile(t, "config.yaml", `defaultPlatforms: [linux/amd64, linux/arm64]
extraImagePaths:
  - Workflow.argoproj.io:spec.templates[].container.image
  - ConfigMap:data.image
`)
	c, err := load(t, nil, map[string]string{ConfigEnv: file})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Get("defaultPlatforms"); got != "linux/amd64,linux/arm64" {
		t.Errorf("file defaultPlatforms = %q", got)
	}
	if got := c.Get("extraImagePaths"); got != "Workflow.argoproj.io:spec.templates[].container.image;ConfigMap:data.image" {
		t.Errorf("file extraImagePaths = %q", got)
	}
	// Platforms are normalised, sorted and de-duplicated.
	c, err = load(t, nil, map[string]string{DefaultPlatformsEnv: "linux/aarch64, linux/amd64,linux/amd64"})
	if err != nil || c.Get("defaultPlatforms") != "linux/amd64,linux/arm64" {
		t.Errorf("env defaultPlatforms = %q, %v", c.Get("defaultPlatforms"), err)
	}
	// The environment replaces the file's list, the flag the environment's.
	c, err = load(t, []string{"--default-platforms", "linux/s390x"}, map[string]string{ConfigEnv: file,
		DefaultPlatformsEnv: "linux/arm/v7", ExtraImagePathsEnv: "MyApp.example.com:spec.image"})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Get("defaultPlatforms"); got != "linux/s390x" {
		t.Errorf("flag defaultPlatforms = %q", got)
	}
	if len(c.ExtraImagePaths) != 1 || c.ExtraImagePaths[0].Kind != "MyApp" || c.ExtraImagePaths[0].Group != "example.com" {
		t.Errorf("env extraImagePaths = %+v", c.ExtraImagePaths)
	}
	// Load without flags (generate) reads the same file and environment.
	c, err = Load(func(k string) (string, bool) { v, ok := map[string]string{ConfigEnv: file}[k]; return v, ok })
	if err != nil || len(c.DefaultPlatforms) != 2 || len(c.ExtraImagePaths) != 2 {
		t.Errorf("Load: %+v, %v", c, err)
	}

	for _, tt := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"bad platform", map[string]string{DefaultPlatformsEnv: "linux/amd64,arm64"}, []string{DefaultPlatformsEnv, `"arm64"`, "os/arch"}},
		{"bad path", map[string]string{ExtraImagePathsEnv: "MyApp.example.com"}, []string{ExtraImagePathsEnv, `"MyApp.example.com"`, "Kind[.group]:path"}},
		{"bad file list", map[string]string{ConfigEnv: writeFile(t, "c.yaml", "defaultPlatforms: {linux: amd64}\n")}, []string{"defaultPlatforms", "list of strings"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, nil, tt.env)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestFlagsAreTyped(t *testing.T) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	AddFlags(fs)
	for flag, typ := range map[string]string{"tag-ttl": "duration", "manifest-cache-size": "bytes", "registry-concurrency": "int",
		"refresh-ahead": "fraction", "default-platforms": "platforms"} {
		if got := fs.Lookup(flag).Value.Type(); got != typ {
			t.Errorf("--%s is of type %q, want %q", flag, got, typ)
		}
	}
	if got := fs.Lookup("tag-ttl").DefValue; got != "2m" {
		t.Errorf("--tag-ttl default %q", got)
	}
}

// TestForgeFor: the longest prefix wins, and the repository's path on the
// forge comes from https and scp-like URLs; a repository no prefix matches is
// an error naming it and what is accepted.
func TestForgeFor(t *testing.T) {
	g := GitConfig{Forges: []GitForge{
		{Prefix: "https://github.com/", Kind: "github", API: "https://api.github.com", TokenFile: "/a"},
		{Prefix: "https://github.com/org/", Kind: "github", API: "https://ghe.example/api/v3", TokenFile: "/b"},
		{Prefix: "git@gitlab.example:", Kind: "gitlab", API: "https://gitlab.example", TokenFile: "/c"},
	}}
	for _, tc := range []struct{ url, api, repo, err string }{
		{url: "https://github.com/org/apps.git", api: "https://ghe.example/api/v3", repo: "org/apps"},
		{url: "https://github.com/other/apps", api: "https://api.github.com", repo: "other/apps"},
		{url: "git@gitlab.example:group/sub/apps.git", api: "https://gitlab.example", repo: "group/sub/apps"},
		{url: "https://gitea.example/org/apps.git", err: "no forge is configured for repository https://gitea.example/org/apps.git"},
		{url: "https://github.com/apps.git", err: `path "apps" is not owner/name`},
	} {
		f, repo, err := g.ForgeFor(tc.url)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, want an error containing %q", tc.url, err, tc.err)
		case tc.err == "" && (err != nil || f.API != tc.api || repo != tc.repo):
			t.Errorf("%s: %s %q %v, want %s %q", tc.url, f.API, repo, err, tc.api, tc.repo)
		}
	}
}

func TestGitCredentialFor(t *testing.T) {
	secret := writeFile(t, "token", "s3cret\n")
	t.Setenv("ORG_TOKEN", "env-token")
	g := GitConfig{Credentials: []GitCredential{
		{Prefix: "https://git.example.com/", Username: "bot", PasswordFile: secret},
		{Prefix: "https://git.example.com/org/", PasswordEnv: "ORG_TOKEN"},
		{Prefix: "https://git.example.com/unset/", PasswordEnv: "NOT_SET_ANYWHERE"},
	}}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url, user, pass string
		ok              bool
	}{
		{"https://git.example.com/team/apps.git", "bot", "s3cret", true},
		{"https://git.example.com/org/apps.git", "git", "env-token", true}, // the longest prefix wins
		{"https://other.example.com/apps.git", "", "", false},
	} {
		u, p, ok, err := g.CredentialFor(tc.url)
		if err != nil || u != tc.user || p != tc.pass || ok != tc.ok {
			t.Errorf("%s: %q %q %v %v", tc.url, u, p, ok, err)
		}
	}
	_, _, _, err := g.CredentialFor("https://git.example.com/unset/apps.git")
	if err == nil || !strings.Contains(err.Error(), "NOT_SET_ANYWHERE") {
		t.Errorf("unset variable: %v", err)
	}
	if name, email := (GitConfig{}).GitAuthor(); name != "argocd-image-resolver" || email != "argocd-image-resolver@localhost" {
		t.Errorf("default author %s <%s>", name, email)
	}
}
