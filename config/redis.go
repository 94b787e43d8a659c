package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/suggest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// RedisPasswordEnv holds the Redis password when no password file is set: the
// variable Argo CD's own components read from the argocd-redis secret.
const RedisPasswordEnv = "REDIS_PASSWORD"

// RedisConfig is the shared tier of several daemons (one per repo-server replica):
// the redis: section of the configuration file, its variables and flags. An empty
// Address means no shared tier. The password is never part of it: it is read from
// PasswordFile, else $REDIS_PASSWORD, each time a connection is made.
type RedisConfig struct {
	Address            string // HOST:PORT
	Username           string
	PasswordFile       string
	TLS                bool
	CAFile             string // PEM bundle trusted beside the system's
	ServerName         string // expected in the server's certificate (default: the address's host)
	InsecureSkipVerify bool
	KeyPrefix          string
	DialTimeout        time.Duration
	Timeout            time.Duration // per command, read and write
	ContentTTL         time.Duration // manifests and configs by digest
	// MACKeyFile holds the key values in Redis are authenticated with ("": not
	// authenticated); read by MACKey.
	MACKeyFile   string
	DecodeMemory int64 // bytes of values being decompressed at once
	MaxReply     int64 // bytes of one reply
}

// DefaultRedisConfig is no shared tier, and the settings it gets once an address
// is given.
func DefaultRedisConfig() RedisConfig {
	return RedisConfig{
		KeyPrefix:   cache.DefaultRedisKeyPrefix,
		DialTimeout: cache.DefaultRedisDialTimeout,
		Timeout:     cache.DefaultRedisTimeout,
		ContentTTL:  cache.DefaultRedisContentTTL,

		DecodeMemory: cache.DefaultRedisDecodeMemory,
		MaxReply:     cache.DefaultRedisMaxReply,
	}
}

const redisSection = "redis."

// redisSettings are the redis.* settings; in the file they are the keys of the
// redis: section.
func redisSettings() []Setting {
	str := func(key, env, flag, usage, typ string, field func(*Config) *string, check func(string) error) Setting {
		return Setting{Key: redisSection + key, Env: env, Flag: flag, Usage: usage, Type: typ,
			set: func(c *Config, v string) error {
				v = strings.TrimSpace(v)
				if check != nil {
					if err := check(v); err != nil {
						return err
					}
				}
				*field(c) = v
				return nil
			},
			get: func(c *Config) string { return *field(c) },
		}
	}
	boolean := func(key, env, flag, usage string, field func(*Config) *bool) Setting {
		return boolSetting(redisSection+key, env, flag, usage, field)
	}
	timeout := func(key, env, flag, usage string, field func(*Config) *time.Duration, lo, hi time.Duration) Setting {
		s := durationSetting(redisSection+key, env, flag, usage, field, lo)
		set := s.set
		s.set = func(c *Config, v string) error {
			var scratch Config
			if err := set(&scratch, v); err != nil {
				return err
			}
			if d := *field(&scratch); d > hi {
				return &resolve.InputError{Value: v, Accepted: fmt.Sprintf("%s, from %s to %s", durationAccepted, lo, hi)}
			}
			return set(c, v)
		}
		return s
	}
	return []Setting{
		str("address", "IMAGE_RESOLVER_REDIS_ADDR", "redis-addr",
			`HOST:PORT of the Redis the daemons of several repo-server replicas share their registry view through, e.g. argocd-redis:6379 ("": none)`, "address",
			func(c *Config) *string { return &c.Redis.Address }, checkRedisAddress),
		str("username", "IMAGE_RESOLVER_REDIS_USERNAME", "redis-username", "Redis ACL user (default: the default user)", "string",
			func(c *Config) *string { return &c.Redis.Username }, nil),
		str("passwordFile", "IMAGE_RESOLVER_REDIS_PASSWORD_FILE", "redis-password-file",
			"file holding the Redis password, read at each connection (default: $"+RedisPasswordEnv+", as Argo CD's argocd-redis secret sets it)", "path",
			func(c *Config) *string { return &c.Redis.PasswordFile }, nil),
		boolean("tls", "IMAGE_RESOLVER_REDIS_TLS", "redis-tls", "speak TLS to Redis",
			func(c *Config) *bool { return &c.Redis.TLS }),
		str("caFile", "IMAGE_RESOLVER_REDIS_CA_FILE", "redis-ca-file", "PEM certificates trusted for Redis's TLS certificate, beside the system's", "path",
			func(c *Config) *string { return &c.Redis.CAFile }, nil),
		str("serverName", "IMAGE_RESOLVER_REDIS_SERVER_NAME", "redis-server-name", "name expected in Redis's TLS certificate (default: the address's host)", "string",
			func(c *Config) *string { return &c.Redis.ServerName }, nil),
		boolean("insecureSkipVerify", "IMAGE_RESOLVER_REDIS_INSECURE_SKIP_VERIFY", "redis-insecure-skip-verify",
			"do not check Redis's TLS certificate (anyone on the path can read and change the shared view)",
			func(c *Config) *bool { return &c.Redis.InsecureSkipVerify }),
		str("keyPrefix", "IMAGE_RESOLVER_REDIS_KEY_PREFIX", "redis-key-prefix",
			"start of every key the daemons write (daemons sharing a prefix must share their registries configuration)", "string",
			func(c *Config) *string { return &c.Redis.KeyPrefix }, checkKeyPrefix),
		timeout("dialTimeout", "IMAGE_RESOLVER_REDIS_DIAL_TIMEOUT", "redis-dial-timeout", "time to connect to Redis; past it the daemon goes on without it",
			func(c *Config) *time.Duration { return &c.Redis.DialTimeout }, time.Millisecond, 10*time.Second),
		timeout("timeout", "IMAGE_RESOLVER_REDIS_TIMEOUT", "redis-timeout", "time one Redis command may take; past it the daemon goes on without Redis until it answers again",
			func(c *Config) *time.Duration { return &c.Redis.Timeout }, time.Millisecond, 10*time.Second),
		timeout("contentTTL", "IMAGE_RESOLVER_REDIS_CONTENT_TTL", "redis-content-ttl", "how long manifests and configs by digest stay in Redis (not extended by reads)",
			func(c *Config) *time.Duration { return &c.Redis.ContentTTL }, time.Minute, 30*24*time.Hour),
		str("macKeyFile", "IMAGE_RESOLVER_REDIS_MAC_KEY_FILE", "redis-mac-key-file",
			`file holding the key (32 bytes or more, e.g. a mounted Secret) every replica authenticates the values it shares in Redis with, read at start and every 10s ("": values not authenticated; see docs/redis.md)`, "path",
			func(c *Config) *string { return &c.Redis.MACKeyFile }, nil),
		byteRangeSetting(redisSection+"decodeMemory", "IMAGE_RESOLVER_REDIS_DECODE_MEMORY", "redis-decode-memory",
			"bytes the Redis values being decompressed may hold at once in the daemon; a value over it, or that finds it full, is fetched from the registry instead",
			func(c *Config) *int64 { return &c.Redis.DecodeMemory }, 4<<20, 16<<30),
		byteRangeSetting(redisSection+"maxReply", "IMAGE_RESOLVER_REDIS_MAX_REPLY", "redis-max-reply",
			"bytes of one Redis reply at most; a larger one is refused before it is read and the daemon goes on without Redis until it answers again",
			func(c *Config) *int64 { return &c.Redis.MaxReply }, 1<<20, 1<<30),
	}
}

func checkRedisAddress(v string) error {
	if v == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(v)
	if p, perr := strconv.Atoi(port); err != nil || perr != nil || host == "" || p < 1 || p > 65535 {
		return &resolve.InputError{Value: v, Accepted: `HOST:PORT, e.g. argocd-redis:6379, or "" for no shared tier`}
	}
	return nil
}

func checkKeyPrefix(v string) error {
	if v == "" || len(v) > 128 || strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return &resolve.InputError{Value: v, Accepted: "1 to 128 printable ASCII characters without spaces, e.g. argocd-image-resolver:"}
	}
	return nil
}

// parseRedis reads the redis: section of a configuration file: the redis.*
// settings by their key in the section.
func (c *Config) parseRedis(source string, raw json.RawMessage) error {
	return c.parseSection(source, redisSection, redisSettings(), raw, nil)
}

// parseSection reads a section of a configuration file (section is its name with
// a dot: "redis."): each key is the setting section+key of settings, given a
// scalar; special reads the keys whose value is not one (nil: none).
func (c *Config) parseSection(source, section string, settings []Setting, raw json.RawMessage,
	special map[string]func(field string, v json.RawMessage) error) error {
	name := strings.TrimSuffix(section, ".")
	var sec map[string]json.RawMessage
	var keys []string
	for _, s := range settings {
		keys = append(keys, strings.TrimPrefix(s.Key, section))
	}
	if err := json.Unmarshal(raw, &sec); err != nil {
		return &resolve.InputError{Field: source + ": " + name, Value: string(raw), Accepted: "a mapping with keys " + strings.Join(keys, ", ")}
	}
	names := make([]string, 0, len(sec))
	for k := range sec {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		field := source + ": " + section + k
		if !slices.Contains(keys, k) {
			return &FileError{Source: "config " + source, Key: section + k, Msg: "unknown key" + suggest.DidYouMean(k, keys) + " (accepted: " + strings.Join(keys, ", ") + ")"}
		}
		v := sec[k]
		if f := special[k]; f != nil {
			if err := f(field, v); err != nil {
				return err
			}
			continue
		}
		var b bool
		s, err := scalar(v)
		if err != nil && json.Unmarshal(v, &b) == nil {
			s, err = strconv.FormatBool(b), nil
		}
		if err != nil {
			return &resolve.InputError{Field: field, Value: string(v), Accepted: "a single value"}
		}
		if err := c.Set(section+k, s, field); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks what each setting cannot check alone: TLS options need TLS, and
// the password and CA files must be readable (their content is never shown).
func (r RedisConfig) Validate() error {
	if r.Address == "" {
		return nil
	}
	if !r.TLS {
		switch {
		case r.CAFile != "":
			return &resolve.InputError{Field: "redis.caFile", Value: r.CAFile, Accepted: "a CA file only with redis.tls: true"}
		case r.ServerName != "":
			return &resolve.InputError{Field: "redis.serverName", Value: r.ServerName, Accepted: "a server name only with redis.tls: true"}
		case r.InsecureSkipVerify:
			return &resolve.InputError{Field: "redis.insecureSkipVerify", Value: "true", Accepted: "only with redis.tls: true"}
		}
	}
	if r.PasswordFile != "" {
		if _, err := readSecretFile(r.PasswordFile); err != nil {
			return fmt.Errorf("redis.passwordFile: %w", err)
		}
	}
	if r.MACKeyFile != "" {
		if _, err := r.MACKey(); err != nil {
			return err
		}
	}
	if _, err := r.TLSConfig(); err != nil {
		return err
	}
	return nil
}

// readSecretFile reads a one-line secret; errors name the file, never its content.
func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err // *PathError: operation, path and reason
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// TLSConfig is the TLS configuration of the connections to Redis: nil without
// TLS; else TLS 1.2 at least, the server name expected (default: the address's
// host), and the CA file's certificates trusted beside the system's (read now).
func (r RedisConfig) TLSConfig() (*tls.Config, error) {
	if !r.TLS {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: r.ServerName, InsecureSkipVerify: r.InsecureSkipVerify} //nolint:gosec // the operator's choice, documented
	if tc.ServerName == "" {
		tc.ServerName, _, _ = net.SplitHostPort(r.Address)
	}
	if r.CAFile != "" {
		pem, err := os.ReadFile(r.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redis.caFile: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &resolve.InputError{Field: "redis.caFile", Value: r.CAFile, Accepted: "a file of PEM certificates"}
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// Password returns the Redis password, read at each call (a connection calls it
// when it is made): the password file's, else $REDIS_PASSWORD ("" for none).
// Errors name the file, never its content.
func (r RedisConfig) Password() (string, error) {
	if r.PasswordFile != "" {
		p, err := readSecretFile(r.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("redis.passwordFile: %w", err)
		}
		return p, nil
	}
	return os.Getenv(RedisPasswordEnv), nil
}

// maxMACKeyFile bounds what is read of the MAC key file (a key is far shorter).
const maxMACKeyFile = 64 << 10

// MACKey returns the key of the values' HMAC, read from MACKeyFile at each call
// (the tier calls it at start and every 10s, to follow a rotated Secret): the
// file's bytes without a trailing newline, at least cache.MinRedisMACKey of them.
// Errors name the file and the key's length, never its content.
func (r RedisConfig) MACKey() ([]byte, error) {
	f, err := os.Open(r.MACKeyFile)
	if err != nil {
		return nil, fmt.Errorf("redis.macKeyFile: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMACKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("redis.macKeyFile: %w", err)
	}
	if len(b) > maxMACKeyFile {
		return nil, fmt.Errorf("redis.macKeyFile: %s holds more than %d bytes; a key is %d to %d bytes (e.g. openssl rand -base64 48)",
			r.MACKeyFile, maxMACKeyFile, cache.MinRedisMACKey, maxMACKeyFile)
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) < cache.MinRedisMACKey {
		return nil, fmt.Errorf("redis.macKeyFile: %s holds a key of %d bytes, want at least %d (e.g. openssl rand -base64 48)",
			r.MACKeyFile, len(b), cache.MinRedisMACKey)
	}
	return b, nil
}
