package compose

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// TestDirectResolverCredentials: a registries file naming an env: source; the
// right credential resolves, a wrong one is a registry error (exit status 3)
// whose message names the registry and the source, not the secret; an app outside
// the entry's apps is refused, a registry error too, before any request.
func TestDirectResolverCredentials(t *testing.T) {
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
		c, err := config.Load(func(k string) (string, bool) {
			return map[string]string{config.RegistriesConfigEnv: cfg}[k], k == config.RegistriesConfigEnv
		})
		if err != nil {
			t.Fatal(err)
		}
		resolver, err := NewDirectResolver(c, nil, resolve.WithRetry(resolve.RetryPolicy{Attempts: 1}))
		if err != nil {
			t.Fatal(err)
		}
		answers, err := resolver.ResolveBatch(context.Background(), app, []resolve.Request{{Image: s.Ref("team/app")}})
		if err != nil {
			t.Fatal(err)
		}
		return answers[0]
	}
	if a := resolveAs("team-web", secret); a.Error != "" || a.Result.Tag != "1.2.3" {
		t.Fatalf("right credential: %+v", a)
	}
	for _, tc := range []struct {
		app, pass, want string
		requests        int
	}{
		{"team-web", wrong, "credentials env:TEST_CMD_CREDS", -1},
		{"other-web", secret, `app "other-web" may not use`, 0},
	} {
		s.ResetCounts()
		a := resolveAs(tc.app, tc.pass)
		err := a.Err()
		if tc.requests >= 0 && s.Total() != tc.requests {
			t.Errorf("%s: %d registry requests, want %d", tc.app, s.Total(), tc.requests)
		}
		var re *resolve.RegistryError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), s.Host) {
			t.Errorf("%s: err = %v, want a registry error naming %s and %q", tc.app, err, s.Host, tc.want)
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), wrong) {
			t.Errorf("error leaks the secret: %v", err)
		}
	}
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := config.Load(func(k string) (string, bool) { return missing, k == config.RegistriesConfigEnv }); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing registries file: %v", err)
	}
}

// TestTagListCapFromConfig: the tag list caps of the configuration reach the
// registry client: 5 tags one per page with tagListMaxPages 2 fail, naming the cap.
func TestTagListCapFromConfig(t *testing.T) {
	s := rt.New(t, rt.WithPageSize(1))
	for _, tag := range []string{"1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"} {
		s.Push(t, "app", tag, rt.Image(time.Unix(0, 0), "linux/amd64", rt.WithSeed(tag)))
	}
	c, err := config.Load(func(k string) (string, bool) {
		v, ok := map[string]string{"IMAGE_RESOLVER_TAG_LIST_MAX_PAGES": "2"}[k]
		return v, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := NewDirectResolver(c, nil, resolve.WithRetry(resolve.RetryPolicy{Attempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	a, err := resolver.ResolveBatch(context.Background(), "", []resolve.Request{{Image: s.Ref("app")}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(a[0].Error, "over the cap of 2 pages") || a[0].Result != nil && a[0].Result.Tag != "" {
		t.Errorf("answer %+v", a[0])
	}
}
