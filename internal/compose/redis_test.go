package compose

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
	"github.com/argocd-image-resolver/argocd-image-resolver/config"
)

func TestRedisPasswordFromFileOrEnv(t *testing.T) {
	const secret = "argocd-redis-secret-value"
	rs := redistest.Start(t, "--requirepass", secret)
	tests := []struct {
		name   string
		file   string // content of the password file; "" for none
		env    string // $REDIS_PASSWORD
		wantUp float64
	}{
		{"file", secret + "\n", "", 1},
		{"env (argocd-redis secret)", "", secret, 1},
		{"file wins over env", secret, "wrong", 1},
		{"wrong password", "not-" + secret, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(config.RedisPasswordEnv, tt.env)
			c := config.DefaultConfig()
			c.Redis.Address = rs.Addr
			if tt.file != "" {
				c.Redis.PasswordFile = filepath.Join(t.TempDir(), "pw")
				if err := os.WriteFile(c.Redis.PasswordFile, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var logs strings.Builder
			m := cache.NewMetrics()
			rd, err := NewRedis(c, m, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			if up := gaugeValue(t, m, "argocd_image_resolver_cache_redis_up"); up != tt.wantUp {
				t.Errorf("redis up %v, want %v; logs:\n%s", up, tt.wantUp, logs.String())
			}
			if strings.Contains(logs.String(), secret) {
				t.Errorf("password in the logs:\n%s", logs.String())
			}
		})
	}
}

func TestNoRedisAddressNoTier(t *testing.T) {
	rd, err := NewRedis(config.DefaultConfig(), cache.NewMetrics(), slog.New(slog.DiscardHandler))
	if rd != nil || err != nil {
		t.Errorf("no address: %v %v, want no tier", rd, err)
	}
}

// gaugeValue reads a gauge the metrics' registry holds.
func gaugeValue(t *testing.T, m *cache.Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

func TestRedisTLS(t *testing.T) {
	rs := redistest.StartTLS(t)
	tests := []struct {
		name   string
		set    func(r *config.RedisConfig)
		wantUp float64
	}{
		{"trusted CA file", func(r *config.RedisConfig) { r.TLS, r.CAFile = true, rs.CAFile }, 1},
		{"server name in the certificate", func(r *config.RedisConfig) { r.TLS, r.CAFile, r.ServerName = true, rs.CAFile, "localhost" }, 1},
		{"server name not in the certificate", func(r *config.RedisConfig) { r.TLS, r.CAFile, r.ServerName = true, rs.CAFile, "redis.example.com" }, 0},
		{"untrusted certificate", func(r *config.RedisConfig) { r.TLS = true }, 0},
		{"insecureSkipVerify", func(r *config.RedisConfig) { r.TLS, r.InsecureSkipVerify = true, true }, 1},
		{"plain TCP to a TLS server", func(r *config.RedisConfig) {}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.DefaultConfig()
			c.Redis.Address = rs.Addr
			tt.set(&c.Redis)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			m := cache.NewMetrics()
			rd, err := NewRedis(c, m, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			if up := gaugeValue(t, m, "argocd_image_resolver_cache_redis_up"); up != tt.wantUp {
				t.Errorf("redis up %v, want %v", up, tt.wantUp)
			}
		})
	}
}
