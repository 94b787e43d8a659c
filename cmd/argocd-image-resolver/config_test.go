package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// TestConfigOnlyInDaemonsFile: the operator's configuration is in the daemon's
// file alone (IMAGE_RESOLVER_CONFIG: a private registry behind an api: mirror,
// insecure, credentials from env:TEAM_CREDS, scoped to apps team-a-*, and default
// platforms). With the daemon down, generate falls back and resolves with all of
// it; an app outside the scope is refused before any request to the registry. The
// same two renders through a live daemon give byte-identical output.
func TestConfigOnlyInDaemonsFile(t *testing.T) {
	const secret = "team-Secret-9f2"
	s := rt.New(t, rt.WithBearerAuth("robot", secret))
	s.Push(t, "team/app", "1.1.0", rt.Image(time.Unix(0, 0), "linux/arm64", rt.WithSeed("a")))
	s.Push(t, "team/app", "1.2.0", rt.Image(time.Unix(0, 0), "linux/amd64", rt.WithSeed("b")))

	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config.yaml")
	cfg := fmt.Sprintf(`registries:
  - prefix: registry.team.local
    api: %q
    insecure: true
    credentials: env:TEAM_CREDS
    apps: ["team-a-*"]
defaultPlatforms: [linux/arm64]
`, s.Host)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "app")
	if err := os.MkdirAll(app, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: registry.team.local/team/app:1.0.0
`
	if err := os.WriteFile(filepath.Join(app, "deployment.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	sidecarEnv := map[string]string{"IMAGE_RESOLVER_CONFIG": cfgFile, "TEAM_CREDS": "robot:" + secret}
	envFor := func(appName, socket string) map[string]string {
		env := maps.Clone(sidecarEnv)
		maps.Copy(env, map[string]string{"IMAGE_RESOLVER_SOCKET": socket, "ARGOCD_APP_NAME": appName,
			"ARGOCD_APP_NAMESPACE": "web", "ARGOCD_APP_PARAMETERS": params("image-list", "web=registry.team.local/team/app:~1")})
		return env
	}
	render := func(appName, socket string) run {
		t.Helper()
		return delegateEnv(t, app, envFor(appName, socket))
	}

	// Daemon down: generate resolves directly, with the daemon's configuration.
	none := filepath.Join(t.TempDir(), "none.sock")
	s.ResetCounts()
	allowed := render("team-a-web", none)
	if allowed.code != 0 || !strings.Contains(allowed.stdout, "image: registry.team.local/team/app:1.1.0") {
		t.Fatalf("team-a-web without the daemon: exit %d, stderr %q, stdout:\n%s", allowed.code, allowed.stderr, allowed.stdout)
	}
	if !strings.Contains(allowed.stderr, "daemon unreachable") || s.Total() == 0 {
		t.Errorf("fallback: stderr %q, %d registry requests", allowed.stderr, s.Total())
	}
	s.ResetCounts()
	refused := render("team-b-web", none)
	if refused.code != 1 || refused.stdout != "" || !strings.Contains(refused.stderr, `app "team-b-web" may not use`) {
		t.Errorf("team-b-web without the daemon: exit %d, stdout %q, stderr %q", refused.code, refused.stdout, refused.stderr)
	}
	if n := s.Total(); n != 0 {
		t.Errorf("refused app cost %d registry requests (%v), want 0", n, s.Counts())
	}
	if strings.Contains(allowed.stderr+refused.stderr, secret) {
		t.Error("a render's stderr shows the credential")
	}

	// Daemon up, configured the same way (its file and environment only).
	socket, _ := startDaemonEnv(t, sidecarEnv)
	s.ResetCounts()
	viaDaemon := render("team-a-web", socket)
	if viaDaemon.code != 0 || viaDaemon.stdout != allowed.stdout {
		t.Errorf("team-a-web through the daemon: exit %d, stderr %q; output differs from the fallback's:\n%s\n---\n%s",
			viaDaemon.code, viaDaemon.stderr, viaDaemon.stdout, allowed.stdout)
	}
	if strings.Contains(viaDaemon.stderr, "unreachable") {
		t.Errorf("daemon not used: %q", viaDaemon.stderr)
	}
	s.ResetCounts()
	refusedViaDaemon := render("team-b-web", socket)
	fallbackLine := func(stderr string) string { // the fallback's own notice aside
		var out []string
		for _, l := range strings.Split(stderr, "\n") {
			if !strings.Contains(l, "daemon unreachable") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	if refusedViaDaemon.code != 1 || refusedViaDaemon.stdout != "" || refusedViaDaemon.stderr != fallbackLine(refused.stderr) {
		t.Errorf("team-b-web through the daemon: exit %d, stderr %q, want %q", refusedViaDaemon.code, refusedViaDaemon.stderr, fallbackLine(refused.stderr))
	}
	if n := s.Total(); n != 0 {
		t.Errorf("refused app through the daemon cost %d registry requests (%v), want 0", n, s.Counts())
	}
	// plugin.yaml's generate command hands the whole render to the daemon
	// (POST /v1/generate): the same answers again.
	for _, tc := range []struct {
		app  string
		want run
	}{{"team-a-web", viaDaemon}, {"team-b-web", refusedViaDaemon}} {
		thin := runIn(t, app, envFor(tc.app, socket), thinBinary)
		if thin != tc.want {
			t.Errorf("%s through the thin generate: %+v, want %+v", tc.app, thin, tc.want)
		}
	}
}
