package config

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
)

func TestRedisSettingsPrecedence(t *testing.T) {
	file := writeFile(t, "config.yaml", `
redis:
  address: redis-file:6379
  keyPrefix: "file:"
  tls: true
  serverName: redis.internal
  timeout: 300ms
`)
	pw := writeFile(t, "pw", "secret\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want RedisConfig
	}{
		{"defaults", nil, nil, DefaultRedisConfig()},
		{"file", nil, map[string]string{ConfigEnv: file}, RedisConfig{Address: "redis-file:6379", KeyPrefix: "file:", TLS: true, ServerName: "redis.internal",
			DialTimeout: 200 * time.Millisecond, Timeout: 300 * time.Millisecond, ContentTTL: 24 * time.Hour}},
		{"env over file", nil, map[string]string{ConfigEnv: file, "IMAGE_RESOLVER_REDIS_ADDR": "argocd-redis:6379", "IMAGE_RESOLVER_REDIS_TLS": "false",
			"IMAGE_RESOLVER_REDIS_SERVER_NAME": " ", "IMAGE_RESOLVER_REDIS_USERNAME": "resolver"},
			RedisConfig{Address: "argocd-redis:6379", Username: "resolver", KeyPrefix: "file:", DialTimeout: 200 * time.Millisecond, Timeout: 300 * time.Millisecond, ContentTTL: 24 * time.Hour}},
		{"flags over env", []string{"--redis-addr", "flag:1", "--redis-tls", "--redis-insecure-skip-verify", "--redis-dial-timeout", "50ms",
			"--redis-password-file", pw, "--redis-content-ttl", "1h"},
			map[string]string{"IMAGE_RESOLVER_REDIS_ADDR": "env:2"},
			RedisConfig{Address: "flag:1", PasswordFile: pw, TLS: true, InsecureSkipVerify: true, KeyPrefix: "argocd-image-resolver:",
				DialTimeout: 50 * time.Millisecond, Timeout: 200 * time.Millisecond, ContentTTL: time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			f := AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			env := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			got, err := f.Load(env)
			if err != nil {
				t.Fatal(err)
			}
			if got.Redis != tt.want {
				t.Errorf("redis config\n got %+v\nwant %+v", got.Redis, tt.want)
			}
		})
	}
}

func TestRedisSettingErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		args []string
		env  map[string]string
		want []string
	}{
		{"unknown key", "redis: {adress: x:1}\n", nil, nil, []string{"redis.adress", "address", "keyPrefix"}},
		{"flat key in file", "redis.address: x:1\n", nil, nil, []string{`unknown key "redis.address"`}},
		{"not a mapping", "redis: argocd-redis:6379\n", nil, nil, []string{"redis", "a mapping with keys address"}},
		{"no port", "redis: {address: argocd-redis}\n", nil, nil, []string{"redis.address", `"argocd-redis"`, "HOST:PORT"}},
		{"env address", "", nil, map[string]string{"IMAGE_RESOLVER_REDIS_ADDR": "redis://argocd-redis:6379"}, []string{"IMAGE_RESOLVER_REDIS_ADDR", "redis://argocd-redis:6379", "HOST:PORT"}},
		{"bool", "redis: {address: 'a:1', tls: yes-please}\n", nil, nil, []string{"redis.tls", "yes-please", "true or false"}},
		{"timeout too long", "", []string{"--redis-timeout", "1m"}, nil, []string{"--redis-timeout", "1m", "from 1ms to 10s"}},
		{"timeout zero", "", []string{"--redis-dial-timeout", "0s"}, nil, []string{"--redis-dial-timeout", "at least 1ms"}},
		{"prefix with space", "redis: {keyPrefix: 'my prefix:'}\n", nil, nil, []string{"redis.keyPrefix", "printable ASCII"}},
		{"ca without tls", "redis: {address: 'a:1', caFile: /etc/ca.pem}\n", nil, nil, []string{"redis.caFile", "/etc/ca.pem", "redis.tls: true"}},
		{"missing ca", "redis: {address: 'a:1', tls: true, caFile: /nonexistent/ca.pem}\n", nil, nil, []string{"redis.caFile", "/nonexistent/ca.pem"}},
		{"empty password file", "", []string{"--redis-addr", "a:1", "--redis-password-file", "/dev/null"}, nil, []string{"redis.passwordFile", "/dev/null is empty"}},
		{"missing password file", "", []string{"--redis-addr", "a:1", "--redis-password-file", "/nonexistent/pw"}, nil, []string{"redis.passwordFile", "/nonexistent/pw"}},
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
			t.Setenv(RedisPasswordEnv, tt.env)
			c := DefaultConfig()
			c.Redis.Address = rs.Addr
			if tt.file != "" {
				c.Redis.PasswordFile = writeFile(t, "pw", tt.file)
			}
			var logs strings.Builder
			m := cache.NewMetrics()
			rd, err := c.NewRedis(m, slog.New(slog.NewTextHandler(&logs, nil)))
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
	rd, err := DefaultConfig().NewRedis(cache.NewMetrics(), slog.New(slog.DiscardHandler))
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
		set    func(r *RedisConfig)
		wantUp float64
	}{
		{"trusted CA file", func(r *RedisConfig) { r.TLS, r.CAFile = true, rs.CAFile }, 1},
		{"server name in the certificate", func(r *RedisConfig) { r.TLS, r.CAFile, r.ServerName = true, rs.CAFile, "localhost" }, 1},
		{"server name not in the certificate", func(r *RedisConfig) { r.TLS, r.CAFile, r.ServerName = true, rs.CAFile, "redis.example.com" }, 0},
		{"untrusted certificate", func(r *RedisConfig) { r.TLS = true }, 0},
		{"insecureSkipVerify", func(r *RedisConfig) { r.TLS, r.InsecureSkipVerify = true, true }, 1},
		{"plain TCP to a TLS server", func(r *RedisConfig) {}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Redis.Address = rs.Addr
			tt.set(&c.Redis)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			m := cache.NewMetrics()
			rd, err := c.NewRedis(m, slog.New(slog.DiscardHandler))
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
