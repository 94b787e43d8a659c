package config

import (
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/spf13/pflag"
)

func TestRedisSettingsPrecedence(t *testing.T) {
	file := writeFile(t, "config.yaml", `
redis:
  address: redis-file:6379
  keyPrefix: "file:"
  tls: true
  serverName: redis.internal
  timeout: 300ms
  maxReply: 32MiB
`)
	pw := writeFile(t, "pw", "secret\n")
	key := writeFile(t, "mac-key", strings.Repeat("k", 32)+"\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want RedisConfig
	}{
		{"defaults", nil, nil, DefaultRedisConfig()},
		{"file", nil, map[string]string{ConfigEnv: file}, RedisConfig{Address: "redis-file:6379", KeyPrefix: "file:", TLS: true, ServerName: "redis.internal",
			DialTimeout: 200 * time.Millisecond, Timeout: 300 * time.Millisecond, ContentTTL: 24 * time.Hour, DecodeMemory: cache.DefaultRedisDecodeMemory, MaxReply: 32 << 20}},
		{"env over file", nil, map[string]string{ConfigEnv: file, "IMAGE_RESOLVER_REDIS_ADDR": "argocd-redis:6379", "IMAGE_RESOLVER_REDIS_TLS": "false",
			"IMAGE_RESOLVER_REDIS_SERVER_NAME": " ", "IMAGE_RESOLVER_REDIS_USERNAME": "resolver", "IMAGE_RESOLVER_REDIS_DECODE_MEMORY": "256MiB",
			"IMAGE_RESOLVER_REDIS_MAC_KEY_FILE": key},
			RedisConfig{Address: "argocd-redis:6379", Username: "resolver", KeyPrefix: "file:", DialTimeout: 200 * time.Millisecond, Timeout: 300 * time.Millisecond,
				ContentTTL: 24 * time.Hour, MACKeyFile: key, DecodeMemory: 256 << 20, MaxReply: 32 << 20}},
		{"flags over env", []string{"--redis-addr", "flag:1", "--redis-tls", "--redis-insecure-skip-verify", "--redis-dial-timeout", "50ms",
			"--redis-password-file", pw, "--redis-content-ttl", "1h", "--redis-max-reply", "16MiB", "--redis-mac-key-file", key},
			map[string]string{"IMAGE_RESOLVER_REDIS_ADDR": "env:2", "IMAGE_RESOLVER_REDIS_MAC_KEY_FILE": "/nonexistent"},
			RedisConfig{Address: "flag:1", PasswordFile: pw, TLS: true, InsecureSkipVerify: true, KeyPrefix: "argocd-image-resolver:",
				DialTimeout: 50 * time.Millisecond, Timeout: 200 * time.Millisecond, ContentTTL: time.Hour, MACKeyFile: key, DecodeMemory: cache.DefaultRedisDecodeMemory, MaxReply: 16 << 20}},
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
	shortKey := writeFile(t, "short-key", strings.Repeat("k", 31)+"\n")
	tests := []struct {
		name string
		file string
		args []string
		env  map[string]string
		want []string
	}{
		{"unknown key", "redis: {adress: x:1}\n", nil, nil, []string{"redis.adress", "address", "keyPrefix"}},
		{"flat key in file", "redis.address: x:1\n", nil, nil, []string{`unknown key "redis.address"; write it in its section: redis: {address: ...}`}},
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
		{"missing mac key file", "", []string{"--redis-addr", "a:1", "--redis-mac-key-file", "/nonexistent/key"}, nil, []string{"redis.macKeyFile", "/nonexistent/key"}},
		{"short mac key", "", []string{"--redis-addr", "a:1", "--redis-mac-key-file", shortKey}, nil,
			[]string{"redis.macKeyFile", shortKey, "a key of 31 bytes, want at least 32"}},
		{"endless mac key file", "", []string{"--redis-addr", "a:1", "--redis-mac-key-file", "/dev/zero"}, nil,
			[]string{"redis.macKeyFile", "/dev/zero holds more than 65536 bytes"}},
		{"decode memory too small", "redis: {decodeMemory: 1MiB}\n", nil, nil, []string{"redis.decodeMemory", "1MiB", "from 4MiB to 16GiB"}},
		{"max reply too large", "", nil, map[string]string{"IMAGE_RESOLVER_REDIS_MAX_REPLY": "2GiB"}, []string{"IMAGE_RESOLVER_REDIS_MAX_REPLY", "2GiB", "from 1MiB to 1GiB"}},
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
