package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// TestConfiguredRemoteCredentials: a registries file naming an env: source; the
// right credential resolves, a wrong one is a registry error (exit status 3)
// whose message names the registry and the source, not the secret; an app outside
// the entry's apps is refused with exit status 3 too.
func TestConfiguredRemoteCredentials(t *testing.T) {
	const secret, wrong = "cmd-Secret-pass-3e1", "cmd-Wrong-pass-77a"
	s := rt.New(t, rt.WithBearerAuth("robot", secret))
	s.Push(t, "team/app", "1.2.3", rt.Image(time.Unix(0, 0), "linux/amd64"))
	cfg := filepath.Join(t.TempDir(), "registries.yaml")
	body := fmt.Sprintf("registries:\n- prefix: %q\n  credentials: env:TEST_CMD_CREDS\n  apps: [team-*]\n", s.Host)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	resolveAs := func(app, pass string) resolve.Answer {
		t.Helper()
		t.Setenv("TEST_CMD_CREDS", "robot:"+pass)
		reg, err := newConfiguredRemote(cfg, resolve.WithRetry(resolve.RetryPolicy{Attempts: 1}))
		if err != nil {
			t.Fatal(err)
		}
		answers, err := resolve.NewResolver(reg).ResolveBatch(context.Background(), app, []resolve.Request{{Image: s.Ref("team/app")}})
		if err != nil {
			t.Fatal(err)
		}
		return answers[0]
	}
	if a := resolveAs("team-web", secret); a.Error != "" || a.Result.Tag != "1.2.3" {
		t.Fatalf("right credential: %+v", a)
	}
	for _, tc := range []struct{ app, pass, want string }{
		{"team-web", wrong, "credentials env:TEST_CMD_CREDS"},
		{"other-web", secret, `app "other-web" may not use`},
	} {
		a := resolveAs(tc.app, tc.pass)
		err := a.Err()
		if code := exitCode(err); code != exitRegistry {
			t.Errorf("%s: exit status %d, want %d: %v", tc.app, code, exitRegistry, err)
		}
		var re *resolve.RegistryError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), s.Host) {
			t.Errorf("%s: err = %v, want a registry error naming %s and %q", tc.app, err, s.Host, tc.want)
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), wrong) {
			t.Errorf("error leaks the secret: %v", err)
		}
	}
	if _, err := newConfiguredRemote(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Errorf("missing registries file: no error")
	}
}
