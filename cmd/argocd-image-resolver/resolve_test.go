package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// resolveCmd runs `argocd-image-resolver resolve args...` as a process with env
// (NAME=VALUE entries).
func resolveCmd(t testing.TB, env []string, args ...string) run {
	t.Helper()
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return runIn(t, "", m, binary, append([]string{"resolve"}, args...)...)
}

func TestResolveCommandJSONAndExitCodes(t *testing.T) {
	s, cfg := demoRegistry(t)
	env := []string{"IMAGE_RESOLVER_REGISTRIES_CONFIG=" + cfg}
	const web = "registry.demo.local/demo/web"

	r := resolveCmd(t, env, web, "--platforms", "linux/amd64", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var got struct {
		Image, Tag, Digest, Reference, Strategy string
		Platforms                               []string
		Candidates                              int
		Skipped                                 []struct{ Tag, Reason string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	digest := s.Digest(t, "demo/web", "1.1.0")
	if got.Image != web || got.Tag != "1.1.0" || got.Digest != digest || got.Reference != web+":1.1.0" ||
		got.Strategy != "semver" || strings.Join(got.Platforms, ",") != "linux/amd64" || got.Candidates != 3 ||
		len(got.Skipped) != 1 || got.Skipped[0].Tag != "1.2.0" || !strings.Contains(got.Skipped[0].Reason, "has linux/arm64") {
		t.Errorf("json = %+v", got)
	}

	r = resolveCmd(t, env, web, "--platforms", "linux/amd64", "--explain")
	for _, want := range []string{"skipped  1.2.0", "chosen   1.1.0", "left out (2):", "latest: not a semantic version", "1.3.0-rc.1: pre-release"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--explain lacks %q:\n%s", want, r.stdout)
		}
	}

	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no tag qualifies still says why", []string{web, "--platforms", "linux/s390x"}, 1, "no tag qualifies"},
		{"bad strategy", []string{web, "--strategy", "fastest"}, 2, `--strategy: invalid value "fastest"`},
		{"bad platform", []string{web, "--platforms", "linux"}, 2, `--platforms: invalid value "linux"`},
		{"mistyped architecture (docs/troubleshooting.md)", []string{web, "--platforms", "linux/amd65"}, 2, `--platforms: invalid value "linux/amd65" (accepted: an architecture Go and OCI images name (386, amd64,`},
		{"bad image", []string{"UPPER/case"}, 2, "IMAGE"},
		{"two constraints", []string{web + ":~1.0", "--constraint", "^2"}, 2, "--constraint"},
		{"a tag and a constraint under newest-build", []string{web + ":latest", "--strategy", "newest-build", "--constraint", "~1"}, 2, `--constraint: invalid value "~1"`},
		{"identity without issuer", []string{web, "--verify-identity", "https://github.com/org/web/.github/workflows/release.yml@refs/heads/main"}, 2, `--verify-issuer: invalid value "": verify-identity`},
		{"key material", []string{web, "--verify-key", "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----"}, 2, `--verify-key: invalid value "(not shown)"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := resolveCmd(t, env, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stdout+r.stderr, tt.want) {
				t.Errorf("exit %d (want %d), output %q %q lacks %q", r.code, tt.code, r.stdout, r.stderr, tt.want)
			}
		})
	}

	s.Close()
	r = resolveCmd(t, env, web)
	if r.code != 3 || !strings.Contains(r.stderr, "list tags of") {
		t.Errorf("registry down: exit %d, stderr %q; want 3 naming the failed list", r.code, r.stderr)
	}
}

// Credentials from the docker config keychain ($DOCKER_CONFIG/config.json).
func TestResolveCommandDockerConfig(t *testing.T) {
	const secret = "pw-7d1f0e"
	for _, mode := range []string{"basic", "bearer"} {
		t.Run(mode, func(t *testing.T) {
			opt := rt.WithBasicAuth("robot", secret)
			if mode == "bearer" {
				opt = rt.WithBearerAuth("robot", secret)
			}
			s := rt.New(t, opt)
			s.Push(t, "team/app", "1.0.0", rt.Image(time.Unix(0, 0), "linux/amd64"))
			for _, tc := range []struct {
				pass string
				code int
			}{{secret, 0}, {"not-" + secret, 3}} {
				dir := t.TempDir()
				auth := base64.StdEncoding.EncodeToString([]byte("robot:" + tc.pass))
				cfg := fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, s.Host, auth)
				if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o600); err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command(binary, "resolve", s.Ref("team/app"), "-o", "json")
				cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "DOCKER_CONFIG=" + dir}
				out, err := cmd.CombinedOutput()
				code := 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					code = ee.ExitCode()
				}
				if code != tc.code {
					t.Errorf("password %q: exit %d, want %d: %s", tc.pass, code, tc.code, out)
				}
				if strings.Contains(string(out), secret) || strings.Contains(string(out), auth) {
					t.Errorf("output leaks the credential: %s", out)
				}
			}
		})
	}
}

// Credentials from the registries file, scoped to apps, through the real binary.
func TestResolveCommandRegistriesCredentials(t *testing.T) {
	const secret = "tok-93b2c1"
	s := rt.New(t, rt.WithBearerAuth("robot", secret))
	s.Push(t, "team/app", "1.0.0", rt.Image(time.Unix(0, 0), "linux/amd64"))
	cfg := filepath.Join(t.TempDir(), "registries.yaml")
	body := fmt.Sprintf("registries:\n- prefix: %s\n  credentials: env:TEAM_REGISTRY\n  apps: [team-*]\n", s.Host)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"IMAGE_RESOLVER_REGISTRIES_CONFIG=" + cfg, "TEAM_REGISTRY=robot:" + secret}
	if r := resolveCmd(t, env, s.Ref("team/app"), "--app", "team-web"); r.code != 0 || !strings.Contains(r.stdout, ":1.0.0") {
		t.Errorf("allowed app: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	s.ResetCounts()
	r := resolveCmd(t, env, s.Ref("team/app"), "--app", "other-web")
	if r.code != 3 || !strings.Contains(r.stderr, "other-web") {
		t.Errorf("other app: exit %d, stderr %q; want 3 naming the app", r.code, r.stderr)
	}
	if s.Total() != 0 {
		t.Errorf("a refused app made %d registry requests", s.Total())
	}
	bad := []string{"IMAGE_RESOLVER_REGISTRIES_CONFIG=" + cfg, "TEAM_REGISTRY=robot:wrong-" + secret}
	r = resolveCmd(t, bad, s.Ref("team/app"), "--app", "team-web")
	if r.code != 3 || strings.Contains(r.stdout+r.stderr, secret) || !strings.Contains(r.stderr, "env:TEAM_REGISTRY") {
		t.Errorf("wrong credential: exit %d, output %q %q; want 3, naming the source, without the secret", r.code, r.stdout, r.stderr)
	}
}

// A registry that accepts connections and never answers costs `resolve` at most
// renderTimeout (its per-request bounds are far longer), and the error says so.
func TestResolveCommandBoundedByRenderTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	cfg := filepath.Join(t.TempDir(), "registries.yaml")
	body := fmt.Sprintf("registries:\n- prefix: silent.example\n  api: %q\n  insecure: true\n", ln.Addr().String())
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	r := resolveCmd(t, []string{"IMAGE_RESOLVER_REGISTRIES_CONFIG=" + cfg, "IMAGE_RESOLVER_RENDER_TIMEOUT=2s"}, "silent.example/team/app")
	if r.code == 0 || !strings.Contains(r.stderr, "the resolution did not finish within 2s (renderTimeout)") {
		t.Fatalf("exit %d, stderr %q; want a failure naming renderTimeout", r.code, r.stderr)
	}
}

// Without --platforms, resolve requires the operator's default platforms, as a render
// of a workload that names none does.
func TestResolveCommandDefaultPlatforms(t *testing.T) {
	_, cfg := demoRegistry(t)
	const web = "registry.demo.local/demo/web"
	env := []string{"IMAGE_RESOLVER_REGISTRIES_CONFIG=" + cfg, "IMAGE_RESOLVER_DEFAULT_PLATFORMS=linux/amd64"}
	def := resolveCmd(t, env, web, "-o", "json")
	named := resolveCmd(t, env[:1], web, "--platforms", "linux/amd64", "-o", "json")
	if def.code != 0 || def.stdout != named.stdout || !strings.Contains(def.stdout, `"tag": "1.1.0"`) {
		t.Errorf("default platforms: exit %d, %s; want the answer of --platforms linux/amd64: %s", def.code, def.stdout+def.stderr, named.stdout)
	}
}

// TestResolveIgnoresTagUnderTaglessStrategies: resolve IMAGE:TAG under newest-build,
// alphabetical or numeric answers as for IMAGE alone, with the warning the plugin
// gives for the same image-list entry, where it exited 2 before.
func TestResolveIgnoresTagUnderTaglessStrategies(t *testing.T) {
	_, cfg := demoRegistry(t)
	env := []string{"IMAGE_RESOLVER_REGISTRIES_CONFIG=" + cfg}
	const web = "registry.demo.local/demo/web"
	for _, st := range []string{"newest-build", "alphabetical", "numeric"} {
		t.Run(st, func(t *testing.T) {
			bare := resolveCmd(t, env, web, "--strategy", st, "-o", "json")
			tagged := resolveCmd(t, env, web+":latest", "--strategy", st, "-o", "json")
			if tagged.code == exitInput || tagged.code != bare.code {
				t.Fatalf("%s:latest: exit %d (%s), want %d as for %s alone", web, tagged.code, tagged.stderr, bare.code, web)
			}
			var b, g struct {
				Tag      string
				Warnings []string
			}
			if err := json.Unmarshal([]byte(bare.stdout), &b); err != nil {
				t.Fatalf("bare: %v: %q", err, bare.stdout)
			}
			if err := json.Unmarshal([]byte(tagged.stdout), &g); err != nil {
				t.Fatalf("tagged: %v: %q", err, tagged.stdout)
			}
			want := `IMAGE ` + web + `:latest: "latest" is ignored with update-strategy ` + st + ` (from --strategy), as argocd-image-updater ignores it; remove ":latest" from the entry, and filter tags with allow-tags/ignore-tags`
			if g.Tag != b.Tag || len(g.Warnings) == 0 || g.Warnings[0] != want {
				t.Errorf("tagged: tag %q, warnings %q; want tag %q and first warning %q", g.Tag, g.Warnings, b.Tag, want)
			}
			text := resolveCmd(t, env, web+":latest", "--strategy", st)
			if !strings.Contains(text.stdout, "warning  "+want) && !strings.Contains(text.stdout, want) {
				t.Errorf("text output lacks the warning:\n%s", text.stdout)
			}
		})
	}
	// Under semver and digest the tag is the constraint, as before.
	if r := resolveCmd(t, env, web+":latest", "--strategy", "digest", "-o", "json"); r.code != 0 || strings.Contains(r.stdout, "is ignored") {
		t.Errorf("digest: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
}
