package credentials

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

const (
	testUser  = "robot$team"
	testPass  = "pa55-Secret-7f3a"
	wrongPass = "wrong-Secret-9c1d"
)

var testSecrets = []string{testPass, wrongPass,
	base64.StdEncoding.EncodeToString([]byte(testUser + ":" + testPass)),
	base64.StdEncoding.EncodeToString([]byte(testUser + ":" + wrongPass))}

// source sets up a credential source of kind holding user:pass and returns its
// credentials value and the keychain options it needs.
func source(t *testing.T, kind, host, user, pass string) (string, []Option) {
	t.Helper()
	switch kind {
	case "dockerconfig":
		p := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(p, dockerConfigJSON(host, user, pass), 0o600); err != nil {
			t.Fatal(err)
		}
		return "dockerconfig:" + p, nil
	case "pullsecret":
		api := newKubeAPI(t)
		api.put("argocd", "regcred", corev1.SecretTypeDockerConfigJson,
			map[string][]byte{corev1.DockerConfigJsonKey: dockerConfigJSON("https://"+host+"/v1/", user, pass)})
		return "pullsecret:argocd/regcred", []Option{WithKubernetesConfig(&rest.Config{Host: api.URL})}
	case "secret":
		api := newKubeAPI(t)
		api.put("argocd", "robot", corev1.SecretTypeOpaque, map[string][]byte{"creds": []byte(user + ":" + pass + "\n")})
		return "secret:argocd/robot#creds", []Option{WithKubernetesConfig(&rest.Config{Host: api.URL})}
	case "env":
		t.Setenv("TEST_REGISTRY_CREDS", user+":"+pass)
		return "env:TEST_REGISTRY_CREDS", nil
	case "ext":
		return "ext:" + script(t, fmt.Sprintf("echo '%s:%s'\n", user, pass)), nil
	}
	t.Fatalf("unknown kind %s", kind)
	return "", nil
}

func TestSourcesOverBasicAndBearer(t *testing.T) {
	for _, mode := range []string{"basic", "bearer"} {
		for _, kind := range []string{"dockerconfig", "pullsecret", "secret", "env", "ext"} {
			t.Run(mode+"/"+kind, func(t *testing.T) {
				opt := rt.WithBasicAuth(testUser, testPass)
				if mode == "bearer" {
					opt = rt.WithBearerAuth(testUser, testPass)
				}
				s := newRegistry(t, opt)

				creds, opts := source(t, kind, s.Host, testUser, testPass)
				e := newEnv(t, fmt.Sprintf("registries:\n- prefix: %q\n  credentials: %q\n", s.Host, creds), opts...)
				a := e.resolve(t, "app", s.Ref("team/app"))
				if a.Error != "" || a.Result.Tag != "1.1.0" {
					t.Fatalf("right credentials: %+v", a)
				}
				authorized := 0
				for _, r := range s.Requests() {
					if r.Kind != rt.Ping && r.Authorization {
						authorized++
					}
				}
				if authorized == 0 {
					t.Errorf("no request carried the credential")
				}
				noSecrets(t, testSecrets, e.channels(a))

				creds, opts = source(t, kind, s.Host, testUser, wrongPass)
				e = newEnv(t, fmt.Sprintf("registries:\n- prefix: %q\n  credentials: %q\n", s.Host, creds), opts...)
				a = e.resolve(t, "app", s.Ref("team/app"))
				if a.ErrorKind != resolve.KindRegistry {
					t.Fatalf("wrong credentials: kind %q, error %q; want registry (exit status 3)", a.ErrorKind, a.Error)
				}
				for _, want := range []string{s.Host, creds} {
					if !strings.Contains(a.Error, want) {
						t.Errorf("error %q does not name %q", a.Error, want)
					}
				}
				noSecrets(t, testSecrets, e.channels(a))

				// The typed error, as the direct resolve command sees it.
				repo, _ := name.NewRepository(s.Ref("team/app"))
				_, err := resolve.NewResolver(e.remote).Resolve(context.Background(), repo, s.Ref("team/app"), resolve.PolicySpec{}.MustCompile())
				var re *resolve.RegistryError
				var ae *resolve.AuthError
				if !errors.As(err, &re) || !errors.As(err, &ae) || ae.Source != creds || ae.Registry != s.Host {
					t.Errorf("err = %v; want a *RegistryError wrapping an *AuthError for %s, %s", err, s.Host, creds)
				}
				noSecrets(t, testSecrets, map[string]string{"typed error": fmt.Sprintf("%v %+v %#v", err, err, ae)})
			})
		}
	}
}

// TestRejectedCredentialFetchedOnceMore: a script whose first answer is stale; the
// registry's 401 makes the keychain run it once more, and the request is retried.
func TestRejectedCredentialFetchedOnceMore(t *testing.T) {
	for _, mode := range []string{"basic", "bearer"} {
		t.Run(mode, func(t *testing.T) {
			opt := rt.WithBasicAuth(testUser, testPass)
			if mode == "bearer" {
				opt = rt.WithBearerAuth(testUser, testPass)
			}
			s := newRegistry(t, opt)
			count := filepath.Join(t.TempDir(), "runs")
			sh := script(t, fmt.Sprintf(`echo run >> %q
if [ "$(wc -l < %q)" -le 1 ]; then echo '%s:%s'; else echo '%s:%s'; fi
`, count, count, testUser, wrongPass, testUser, testPass))
			e := newEnv(t, fmt.Sprintf("registries:\n- prefix: %q\n  credentials: ext:%s\n", s.Host, sh))
			a := e.resolve(t, "app", s.Ref("team/app"))
			if a.Error != "" || a.Result.Tag != "1.1.0" {
				t.Fatalf("after one rejection: %+v", a)
			}
			if n := runs(t, count); n != 2 {
				t.Errorf("script ran %d times, want 2 (once, then once more after the 401)", n)
			}
			if !strings.Contains(e.logs.String(), "rejected") {
				t.Errorf("log does not say the credential was rejected:\n%s", e.logs)
			}
			noSecrets(t, testSecrets, e.channels(a))

			// Always wrong: fetched exactly once more, then an error naming the source.
			count2 := filepath.Join(t.TempDir(), "runs")
			sh2 := script(t, fmt.Sprintf("echo run >> %q\necho '%s:%s'\n", count2, testUser, wrongPass))
			e = newEnv(t, fmt.Sprintf("registries:\n- prefix: %q\n  credentials: ext:%s\n", s.Host, sh2))
			a = e.resolve(t, "app", s.Ref("team/app"))
			if a.ErrorKind != resolve.KindRegistry || !strings.Contains(a.Error, "ext:"+sh2) || !strings.Contains(a.Error, "refused") {
				t.Errorf("always wrong: %+v", a)
			}
			if n := runs(t, count2); n != 2 {
				t.Errorf("script ran %d times, want 2", n)
			}
			noSecrets(t, testSecrets, e.channels(a))
		})
	}
}

// TestCredentialNeverFollowsRedirect: the registry redirects blob GETs to a second
// loopback server (as registries redirect to blob storage); that server never
// sees an Authorization header, and a registry on another host gets none either.
func TestCredentialNeverFollowsRedirect(t *testing.T) {
	s := newRegistry(t, rt.WithBasicAuth(testUser, testPass))
	var mu sync.Mutex
	var blobReqs, blobAuth int
	storage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		blobReqs++
		if r.Header.Get("Authorization") != "" {
			blobAuth++
		}
		mu.Unlock()
		// Blob storage serves the bytes (fetched here with the test's own access).
		req, _ := http.NewRequest(http.MethodGet, s.URL+r.URL.Path, nil)
		req.SetBasicAuth(testUser, testPass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(storage.Close)
	target, _ := url.Parse(s.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/sha256:") {
			http.Redirect(w, r, storage.URL+r.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	frontHost := strings.TrimPrefix(front.URL, "http://")

	other := newRegistry(t) // anonymous, another host
	t.Setenv("TEST_REGISTRY_CREDS", testUser+":"+testPass)
	e := newEnv(t, fmt.Sprintf("registries:\n- prefix: %q\n  credentials: env:TEST_REGISTRY_CREDS\n", frontHost))
	a := e.resolve(t, "app", frontHost+"/team/app")
	if a.Error != "" || a.Result.Tag != "1.1.0" {
		t.Fatalf("through the redirecting front: %+v", a)
	}
	mu.Lock()
	defer mu.Unlock()
	if blobReqs == 0 {
		t.Fatalf("blob storage saw no request: the test does not exercise the redirect")
	}
	if blobAuth != 0 {
		t.Errorf("blob storage got an Authorization header on %d of %d requests", blobAuth, blobReqs)
	}
	if a := e.resolve(t, "app", other.Ref("team/app")); a.Error != "" {
		t.Fatalf("anonymous registry: %+v", a)
	}
	for _, r := range other.Requests() {
		if r.Authorization {
			t.Errorf("another registry host got an Authorization header: %+v", r)
		}
	}
}

func TestExtScript(t *testing.T) {
	const secret = "S3cr3t-token-value"
	tests := []struct {
		name, body string
		timeout    time.Duration
		wantErr    string
	}{
		{"success", "echo 'AWS:" + secret + "'\n", time.Minute, ""},
		{"success after blank lines and stderr noise", "echo >&2 " + secret + "\necho\necho '  AWS:" + secret + "  '\n", time.Minute, ""},
		{"timeout", "echo 'AWS:" + secret + "'\nsleep 30\n", 300 * time.Millisecond, "timed out after 300ms"},
		{"timeout with a child holding stdout", "(sleep 30; echo x) &\nsleep 30\n", 300 * time.Millisecond, "timed out"},
		{"garbage", "echo 'token " + secret + "'\n", time.Minute, "not user:password"},
		{"empty password", "echo 'AWS:'\n", time.Minute, "not user:password"},
		{"no output", "true\n", time.Minute, "not user:password"},
		{"non-zero exit", "echo 'AWS:" + secret + "'\necho " + secret + " >&2\nexit 3\n", time.Minute, "exit status 3"},
		{"too much output", "i=0; while [ $i -lt 5000 ]; do echo 'AWS:" + secret + "'; i=$((i+1)); done\n", time.Minute, "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			m, err := extScript(script(t, tt.body), tt.timeout, "registry.example.com")(context.Background())
			if elapsed := time.Since(start); elapsed > 10*time.Second {
				t.Errorf("took %s", elapsed)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				ac, _ := m.lookup(context.Background(), name.Repository{})
				if ac.Username != "AWS" || ac.Password != secret {
					t.Errorf("credential = %s:<%d bytes>", ac.Username, len(ac.Password))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			noSecrets(t, []string{secret}, map[string]string{"error": fmt.Sprintf("%v %+v", err, err)})
		})
	}

	t.Run("timeout from the registries file, through the Remote", func(t *testing.T) {
		s := newRegistry(t, rt.WithBasicAuth(testUser, testPass))
		sh := script(t, "echo '"+testUser+":"+testPass+"'\nexec sleep 30\n")
		e := newEnv(t, fmt.Sprintf("registries:\n- prefix: %q\n  credentials: ext:%s\n  credentialsTimeout: 200ms\n", s.Host, sh))
		start := time.Now()
		a := e.resolve(t, "app", s.Ref("team/app"))
		if time.Since(start) > 10*time.Second || a.ErrorKind != resolve.KindRegistry ||
			!strings.Contains(a.Error, "timed out after 200ms") || !strings.Contains(a.Error, "ext:"+sh) {
			t.Errorf("after %s: %+v", time.Since(start), a)
		}
		noSecrets(t, testSecrets, e.channels(a))
	})

	t.Run("script gets the registry and is cached until rejected or credentialsExpire", func(t *testing.T) {
		s := newRegistry(t, rt.WithBasicAuth(testUser, testPass))
		count := filepath.Join(t.TempDir(), "runs")
		sh := script(t, fmt.Sprintf("echo \"$IMAGE_RESOLVER_REGISTRY\" >> %q\necho '%s:%s'\n", count, testUser, testPass))
		c := newClock()
		e := newEnv(t, fmt.Sprintf("registries:\n- prefix: %q\n  credentials: ext:%s\n  credentialsExpire: 1h\n", s.Host, sh), WithClock(c.Now))
		for range 3 {
			if a := e.resolve(t, "app", s.Ref("team/app")); a.Error != "" {
				t.Fatal(a.Error)
			}
		}
		if n := runs(t, count); n != 1 {
			t.Errorf("script ran %d times for 3 resolutions within credentialsExpire, want 1", n)
		}
		c.Advance(61 * time.Minute)
		if a := e.resolve(t, "app", s.Ref("team/app")); a.Error != "" {
			t.Fatal(a.Error)
		}
		if n := runs(t, count); n != 2 {
			t.Errorf("script ran %d times after credentialsExpire, want 2", n)
		}
		if b, _ := os.ReadFile(count); !strings.HasPrefix(string(b), s.Host+"\n") {
			t.Errorf("IMAGE_RESOLVER_REGISTRY = %q, want %s", b, s.Host)
		}
	})
}

func TestPullSecret(t *testing.T) {
	// Basic auth: every request asks for the credential (with bearer, the token
	// is reused and the secret needed again only when the token is).
	s := newRegistry(t, rt.WithBasicAuth(testUser, testPass))
	api := newKubeAPI(t)
	api.put("argocd", "regcred", corev1.SecretTypeDockerConfigJson,
		map[string][]byte{corev1.DockerConfigJsonKey: dockerConfigJSON(s.Host, testUser, testPass)})
	c := newClock()
	e := newEnv(t, fmt.Sprintf("registries:\n- prefix: %q\n  credentials: pullsecret:argocd/regcred\n", s.Host),
		WithKubernetesConfig(&rest.Config{Host: api.URL}), WithClock(c.Now))
	for range 2 {
		if a := e.resolve(t, "app", s.Ref("team/app")); a.Error != "" {
			t.Fatal(a.Error)
		}
	}
	if n := api.gets.Load(); n != 1 {
		t.Errorf("secret read %d times, want 1 (cached)", n)
	}
	c.Advance(DefaultSecretExpire + time.Second)
	if a := e.resolve(t, "app", s.Ref("team/app")); a.Error != "" {
		t.Fatal(a.Error)
	}
	if n := api.gets.Load(); n != 2 {
		t.Errorf("secret read %d times after it expired, want 2", n)
	}

	t.Run("secret for another registry", func(t *testing.T) {
		api.put("argocd", "other", corev1.SecretTypeDockerConfigJson,
			map[string][]byte{corev1.DockerConfigJsonKey: dockerConfigJSON("registry.example.com", testUser, testPass)})
		e := newEnv(t, fmt.Sprintf("registries:\n- prefix: %q\n  credentials: pullsecret:argocd/other\n", s.Host),
			WithKubernetesConfig(&rest.Config{Host: api.URL}))
		a := e.resolve(t, "app", s.Ref("team/app"))
		for _, want := range []string{"pullsecret:argocd/other", "no entry for " + s.Host + "/team/app", "registry.example.com"} {
			if !strings.Contains(a.Error, want) {
				t.Errorf("error %q does not say %q", a.Error, want)
			}
		}
		noSecrets(t, testSecrets, e.channels(a))
	})
	t.Run("missing secret", func(t *testing.T) {
		e := newEnv(t, fmt.Sprintf("registries:\n- prefix: %q\n  credentials: pullsecret:argocd/gone\n", s.Host),
			WithKubernetesConfig(&rest.Config{Host: api.URL}))
		a := e.resolve(t, "app", s.Ref("team/app"))
		if a.ErrorKind != resolve.KindRegistry || !strings.Contains(a.Error, `"gone" not found`) {
			t.Errorf("%+v", a)
		}
	})
	t.Run("secret without docker config", func(t *testing.T) {
		api.put("argocd", "opaque", corev1.SecretTypeOpaque, map[string][]byte{"password": []byte(testPass)})
		e := newEnv(t, fmt.Sprintf("registries:\n- prefix: %q\n  credentials: pullsecret:argocd/opaque\n", s.Host),
			WithKubernetesConfig(&rest.Config{Host: api.URL}))
		a := e.resolve(t, "app", s.Ref("team/app"))
		if !strings.Contains(a.Error, "has neither .dockerconfigjson nor .dockercfg") {
			t.Errorf("%+v", a)
		}
		noSecrets(t, testSecrets, e.channels(a))
	})
}

// TestAppScoping: an app the entry's apps do not match is refused before anything
// is read, even through a cached view that would otherwise answer from memory.
func TestAppScoping(t *testing.T) {
	s := newRegistry(t, rt.WithBasicAuth(testUser, testPass))
	t.Setenv("TEST_REGISTRY_CREDS", testUser+":"+testPass)
	e := newEnv(t, fmt.Sprintf("registries:\n- prefix: %q\n  credentials: env:TEST_REGISTRY_CREDS\n  apps: [team-a-*, platform]\n", s.Host))
	for _, app := range []string{"team-a-web", "platform"} {
		if a := e.resolve(t, app, s.Ref("team/app")); a.Error != "" {
			t.Fatalf("%s: %s", app, a.Error)
		}
	}
	for _, app := range []string{"team-b-web", "team-a", ""} {
		s.ResetCounts()
		a := e.resolve(t, app, s.Ref("team/app"))
		if a.ErrorKind != resolve.KindRegistry || !strings.Contains(a.Error, "team-a-*, platform") {
			t.Errorf("app %q: %+v; want a registry error naming the entry's apps", app, a)
		}
		if app != "" && !strings.Contains(a.Error, fmt.Sprintf("%q", app)) {
			t.Errorf("error %q does not name the app", a.Error)
		}
		if n := s.Total(); n != 0 {
			t.Errorf("app %q: %d registry requests; want none before the refusal", app, n)
		}
	}

	// A cached view (the daemon's) hides the Remote; WithAuthorizer checks first.
	cached := &countingRegistry{Registry: e.remote}
	r := resolve.NewResolver(cached, resolve.WithAuthorizer(resolve.NewRegistryTable(e.cfgs).Authorize))
	repo, _ := name.NewRepository(s.Ref("team/app"))
	if _, err := r.Resolve(resolve.WithApp(context.Background(), "team-a-x"), repo, "", resolve.PolicySpec{}.MustCompile()); err != nil {
		t.Fatal(err)
	}
	calls := cached.calls
	_, err := r.Resolve(resolve.WithApp(context.Background(), "team-b-x"), repo, "", resolve.PolicySpec{}.MustCompile())
	var ae *resolve.AuthError
	if !errors.As(err, &ae) || ae.App != "team-b-x" || cached.calls != calls {
		t.Errorf("err = %v, registry calls %d -> %d; want an *AuthError and no call", err, calls, cached.calls)
	}

	// The keychain refuses too, for a caller that reaches it with the app.
	_, err = e.kc.ResolveContext(resolve.WithApp(context.Background(), "team-b-x"), repo)
	if !errors.As(err, &ae) {
		t.Errorf("keychain for a refused app: err = %v", err)
	}
}

type countingRegistry struct {
	resolve.Registry
	mu    sync.Mutex
	calls int
}

func (c *countingRegistry) ListTags(ctx context.Context, repo name.Repository) ([]string, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return c.Registry.ListTags(ctx, repo)
}

func TestLongestPrefixAndDockerHubAliases(t *testing.T) {
	s := newRegistry(t, rt.WithBasicAuth(testUser, testPass))
	s.Push(t, "other/app", "1.0.0", rt.Image(t0, "linux/amd64"))
	t.Setenv("TEST_RIGHT", testUser+":"+testPass)
	t.Setenv("TEST_WRONG", testUser+":"+wrongPass)
	e := newEnv(t, fmt.Sprintf(`registries:
- prefix: %q
  credentials: env:TEST_WRONG
- prefix: %q
  credentials: env:TEST_RIGHT
- prefix: index.docker.io/acme
  credentials: env:TEST_RIGHT
`, s.Host, s.Host+"/team"))
	if a := e.resolve(t, "app", s.Ref("team/app")); a.Error != "" {
		t.Errorf("longest prefix: %s", a.Error)
	}
	a := e.resolve(t, "app", s.Ref("other/app"))
	if !strings.Contains(a.Error, "env:TEST_WRONG") || !strings.Contains(a.Error, "registry "+s.Host+" ") {
		t.Errorf("shorter prefix: %+v", a)
	}
	noSecrets(t, testSecrets, e.channels(a))
	for image, want := range map[string]string{
		"acme/web":                      "env:TEST_RIGHT",
		"docker.io/acme/web":            "env:TEST_RIGHT",
		"index.docker.io/acme/web":      "env:TEST_RIGHT",
		"registry-1.docker.io/acme/web": "env:TEST_RIGHT",
		"docker.io/acmecorp/web":        "",
		"nginx":                         "",
		"ghcr.io/acme/web":              "",
		s.Ref("teamwork/app"):           "env:TEST_WRONG",
		s.Ref("team/app/nested"):        "env:TEST_RIGHT",
		strings.Replace(s.Host, "127.0.0.1", "localhost", 1) + "/team/app": "",
	} {
		repo, err := name.NewRepository(image)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.kc.CredentialSource(repo); got != want {
			t.Errorf("source of %s = %q, want %q", image, got, want)
		}
	}
}

func TestDockerConfigMatching(t *testing.T) {
	raw := []byte(`{"auths": {
		"https://index.docker.io/v1/": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("hub:1")) + `"},
		"registry.example.com": {"username": "plain", "password": "2"},
		"https://registry.example.com/team": {"username": "team", "password": "3"},
		"*.corp.example": {"username": "glob", "password": "4"},
		"registry.example.com:5000": {"username": "port", "password": "5"},
		"acr.azurecr.io": {"identitytoken": "6"}
	}}`)
	ring, err := parseDockerConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	for image, want := range map[string]string{
		"nginx":                             "hub",
		"docker.io/library/nginx":           "hub",
		"registry-1.docker.io/acme/web":     "hub",
		"registry.example.com/app":          "plain",
		"registry.example.com/team/app":     "team",
		"registry.example.com/teamwork/app": "plain",
		"registry.example.com:5000/app":     "port",
		"registry.example.com:5001/app":     "",
		"git.corp.example/app":              "glob",
		"a.b.corp.example/app":              "",
		"corp.example/app":                  "",
		"ghcr.io/acme/app":                  "",
		"acr.azurecr.io/app":                "<token>",
	} {
		repo, err := name.NewRepository(image)
		if err != nil {
			t.Fatal(err)
		}
		ac, ok := ring.lookup(repo)
		got := ""
		switch {
		case ok && ac.IdentityToken != "":
			got = "<token>"
		case ok:
			got = ac.Username
		}
		if got != want {
			t.Errorf("%s: got %q, want %q", image, got, want)
		}
	}
	legacy, err := parseDockerConfig([]byte(`{"registry.example.com": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("old:7")) + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if ac, ok := legacy.lookup(name.MustParseReference("registry.example.com/app").Context()); !ok || ac.Username != "old" {
		t.Errorf("legacy .dockercfg: %v %v", ac, ok)
	}
	for _, bad := range []string{`not json`, `{"auths": {"x": {"auth": "%%%"}}}`, `{"auths": {"x": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("nocolon")) + `"}}}`} {
		if _, err := parseDockerConfig([]byte(bad)); err == nil || strings.Contains(err.Error(), "nocolon") {
			t.Errorf("parseDockerConfig(%q) = %v", bad, err)
		}
	}
}

func TestDockerConfigFileReReadWhenChanged(t *testing.T) {
	s := newRegistry(t, rt.WithBasicAuth(testUser, testPass))
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, dockerConfigJSON(s.Host, testUser, wrongPass), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, fmt.Sprintf("registries:\n- prefix: %q\n  credentials: dockerconfig:%s\n", s.Host, p))
	if a := e.resolve(t, "app", s.Ref("team/app")); a.Error == "" {
		t.Fatal("wrong password resolved")
	}
	// The kubelet updates a mounted secret by swapping files: a new file.
	tmp := p + ".new"
	if err := os.WriteFile(tmp, dockerConfigJSON(s.Host, testUser, testPass+"-rotated-longer"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	if a := e.resolve(t, "app", s.Ref("team/app")); !strings.Contains(a.Error, "refused") {
		t.Fatalf("rotated to another wrong password: %+v", a)
	}
	if err := os.WriteFile(tmp, dockerConfigJSON(s.Host, testUser, testPass), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	if a := e.resolve(t, "app", s.Ref("team/app")); a.Error != "" {
		t.Fatalf("after the secret was fixed: %s", a.Error)
	}
}

func TestEnvAndGitHub(t *testing.T) {
	s := newRegistry(t, rt.WithBasicAuth("unset", testPass))
	t.Setenv("GITHUB_TOKEN", testPass)
	t.Setenv("GITHUB_ACTOR", "")
	e := newEnv(t, fmt.Sprintf("registries:\n- prefix: ghcr.io\n  api: %q\n  credentials: github\n", s.Host))
	a := e.resolve(t, "app", "ghcr.io/team/app")
	if a.Error != "" || a.Result.Reference != "ghcr.io/team/app:1.1.0" {
		t.Fatalf("%+v", a)
	}
	noSecrets(t, testSecrets, e.channels(a))
	t.Setenv("GITHUB_TOKEN", "")
	e = newEnv(t, fmt.Sprintf("registries:\n- prefix: ghcr.io\n  api: %q\n  credentials: github\n", s.Host))
	if a := e.resolve(t, "app", "ghcr.io/team/app"); !strings.Contains(a.Error, "GITHUB_TOKEN is not set") {
		t.Errorf("%+v", a)
	}
	t.Setenv("TEST_GARBAGE", testPass)
	e = newEnv(t, fmt.Sprintf("registries:\n- prefix: %q\n  credentials: env:TEST_GARBAGE\n", s.Host))
	a = e.resolve(t, "app", s.Ref("team/app"))
	if !strings.Contains(a.Error, "TEST_GARBAGE") || !strings.Contains(a.Error, "not user:password") {
		t.Errorf("%+v", a)
	}
	noSecrets(t, testSecrets, e.channels(a))
}
