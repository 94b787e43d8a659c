package cache

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// The shared tier: the registry view of every daemon of an installation (one per
// argocd-repo-server replica) in one Redis, between each daemon's memory and the
// registries. Lookups go memory -> Redis -> registry:
//
//   - tag lists, tag->descriptor answers and content by digest (manifests, configs)
//     are written to Redis by the daemon that fetched them, with a TTL: the layer's
//     (tag lists: the tag TTL; descriptors: the head TTL), and ContentTTL for content
//     by digest (not refreshed on read: a digest still in use is fetched again by one
//     daemon when it expires);
//   - a fetch of one key is taken by one daemon of the installation: a lease (SET NX
//     PX, kept alive while its holder fetches) that the others wait on, polling, then
//     read what the holder wrote; a holder that dies stops renewing, its lease expires
//     and a waiter takes it;
//   - values carry a format version, their layer and (for TTL layers) the TTL they
//     were written with, compressed with zstd; a value that does not decode, has the
//     wrong shape or (content) bytes whose sha256 is not the digest it is stored
//     under is ignored, counted and fetched again;
//   - Redis down, slow or flushed: the daemon resolves from memory and registries; a
//     failed command opens a circuit (one log line, the up gauge at 0), no command is
//     sent while it is open, and a probe every RetryInterval closes it again.
//
// Stale-if-error stays the memory layer's decision: Redis only holds fresh answers.

// Defaults of the shared tier.
const (
	DefaultRedisKeyPrefix     = "argocd-image-resolver:"
	DefaultRedisDialTimeout   = 200 * time.Millisecond
	DefaultRedisTimeout       = 200 * time.Millisecond
	DefaultRedisContentTTL    = 24 * time.Hour
	DefaultRedisLeaseTTL      = 5 * time.Second
	DefaultRedisRetryInterval = time.Second

	// leasePollMin and leasePollMax bound the wait between two reads of a waiter.
	leasePollMin = 5 * time.Millisecond
	leasePollMax = 100 * time.Millisecond
	// redisFormat names the value format in keys: a daemon of another format neither
	// reads nor overwrites these values during a rolling upgrade.
	redisFormat = "v1"
)

// Operations counted in cache_redis_errors_total.
const (
	redisOpRead  = "read"
	redisOpWrite = "write"
	redisOpLease = "lease"
	redisOpPing  = "ping"
)

// RedisOptions configure the shared tier.
type RedisOptions struct {
	Addr     string // HOST:PORT
	Username string // "" for the default user
	// Password returns the password each time a connection is made (so a rotated
	// secret is used by the next one); nil or "" for none. Its error is logged,
	// never the password.
	Password func() (string, error)
	// TLS is the client's TLS configuration; nil for plain TCP.
	TLS *tls.Config
	// KeyPrefix starts every key (default DefaultRedisKeyPrefix).
	KeyPrefix string
	// DialTimeout bounds a connection; Timeout one command's read and write.
	DialTimeout, Timeout time.Duration
	// ContentTTL is how long content by digest stays in Redis (default 24h).
	ContentTTL time.Duration
	// LeaseTTL is how long a fetch lease outlives a holder that stopped renewing
	// it: how long waiters wait for a daemon that died (default 5s).
	LeaseTTL time.Duration
	// RetryInterval is how often an unavailable Redis is probed (default 1s).
	RetryInterval time.Duration
	// Logger gets one line per change of availability (default slog.Default()).
	Logger *slog.Logger
}

// Redis is the shared tier of the registry view (see WithRedis). Safe for
// concurrent use; Close it when done (a Registry given it closes it).
type Redis struct {
	c   *redis.Client
	o   RedisOptions
	m   *redisMetrics
	log *slog.Logger

	up      atomic.Bool
	probing atomic.Bool

	ctx    context.Context // cancelled by Close: probes and lease renewals
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewRedis connects to the shared tier and records into m (nil: metrics of its
// own). Redis being unreachable is not an error: the daemon starts without it and
// joins when it answers.
func NewRedis(o RedisOptions, m *Metrics) (*Redis, error) {
	if o.Addr == "" {
		return nil, errors.New("redis: no address")
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultRedisKeyPrefix
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultRedisDialTimeout
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultRedisTimeout
	}
	if o.ContentTTL <= 0 {
		o.ContentTTL = DefaultRedisContentTTL
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultRedisLeaseTTL
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRedisRetryInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if m == nil {
		m = NewMetrics()
	}
	log := o.Logger.With("redis", o.Addr)
	opts := &redis.Options{
		Addr:         o.Addr,
		DialTimeout:  o.DialTimeout,
		ReadTimeout:  o.Timeout,
		WriteTimeout: o.Timeout,
		// one attempt per dial and at most one retry per command: a Redis that is
		// gone must cost a lookup one short timeout, and the circuit then opens
		DialerRetries:   1,
		MaxRetries:      1,
		MinRetryBackoff: 5 * time.Millisecond,
		MaxRetryBackoff: 20 * time.Millisecond,
		// enough connections for the daemon's fetches in flight, and no long
		// queue for one when they are all busy
		PoolSize:                 64,
		PoolTimeout:              o.Timeout + o.DialTimeout,
		TLSConfig:                o.TLS,
		DisableIdentity:          true, // no CLIENT SETINFO: older servers and proxies refuse it
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if o.Username != "" || o.Password != nil {
		user, pw := o.Username, o.Password
		opts.CredentialsProviderContext = func(context.Context) (string, string, error) {
			if pw == nil {
				return user, "", nil
			}
			p, err := pw()
			if err != nil {
				return "", "", fmt.Errorf("redis password: %w", err)
			}
			return user, p, nil
		}
	}
	redisLogOnce.Do(func() { redis.SetLogger(debugLogger{}) })
	ctx, cancel := context.WithCancel(context.Background())
	r := &Redis{c: redis.NewClient(opts), o: o, m: newRedisMetrics(m), log: log, ctx: ctx, cancel: cancel}
	if err := r.ping(); err != nil {
		r.m.errors.WithLabelValues(redisOpPing).Inc()
		r.m.up.Set(0)
		log.Warn("redis unavailable: resolving from memory and registries until it answers", "err", redisErrText(err))
		r.startProbe()
	} else {
		r.up.Store(true)
		r.m.up.Set(1)
		log.Info("redis shared tier connected", "keyPrefix", o.KeyPrefix)
	}
	return r, nil
}

// Close stops probes and lease renewals and closes the connections.
func (r *Redis) Close() error {
	if r == nil {
		return nil
	}
	r.cancel()
	r.wg.Wait()
	return r.c.Close()
}

// Up reports whether the shared tier is in use (its circuit is closed).
func (r *Redis) Up() bool { return r != nil && r.up.Load() }

// ContentTTL is how long content by digest stays in Redis.
func (r *Redis) ContentTTL() time.Duration { return r.o.ContentTTL }

func (r *Redis) ping() error {
	ctx, cancel := context.WithTimeout(r.ctx, r.o.DialTimeout+r.o.Timeout)
	defer cancel()
	return r.c.Ping(ctx).Err()
}

// failed records a failed command; a failure that says Redis is unreachable or
// too slow opens the circuit.
func (r *Redis) failed(op string, err error) {
	if r.ctx.Err() != nil {
		return // closing
	}
	r.m.errors.WithLabelValues(op).Inc()
	// An answer refusing a write (out of memory, a read-only replica) leaves reads
	// working: keep using them.
	if op == redisOpWrite && (redis.HasErrorPrefix(err, "OOM") || redis.HasErrorPrefix(err, "READONLY")) {
		return
	}
	if r.up.CompareAndSwap(true, false) {
		r.m.up.Set(0)
		r.log.Warn("redis unavailable: resolving from memory and registries until it answers", "op", op, "err", redisErrText(err))
		r.startProbe()
	}
}

// startProbe pings Redis every RetryInterval until it answers, then closes the
// circuit.
func (r *Redis) startProbe() {
	if !r.probing.CompareAndSwap(false, true) {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.probing.Store(false)
		t := time.NewTicker(r.o.RetryInterval)
		defer t.Stop()
		for {
			select {
			case <-r.ctx.Done():
				return
			case <-t.C:
			}
			if err := r.ping(); err != nil {
				continue
			}
			r.up.Store(true)
			r.m.up.Set(1)
			r.log.Info("redis available again: sharing the registry view")
			return
		}
	}()
}

// redisLogOnce routes go-redis's own log (one line per failed dial, process-wide)
// to slog at debug level: the daemon logs each change of availability itself.
var redisLogOnce sync.Once

type debugLogger struct{}

func (debugLogger) Printf(ctx context.Context, format string, v ...any) {
	slog.Default().DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}

// redisErrText is a failure's text for logs: go-redis errors carry the address and
// the server's reply, never the password.
func redisErrText(err error) string {
	return strings.TrimSpace(err.Error())
}

func (r *Redis) valueKey(layer, key string) string {
	return r.o.KeyPrefix + redisFormat + ":" + layer + ":" + key
}

func (r *Redis) leaseKey(layer, key string) string {
	return r.o.KeyPrefix + redisFormat + ":lease:" + layer + ":" + key
}

// read returns the value of key and its remaining TTL; nil when absent.
func (r *Redis) read(ctx context.Context, key string) ([]byte, time.Duration, error) {
	var get *redis.StringCmd
	var ttl *redis.DurationCmd
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		ttl = p.PTTL(ctx, key)
		return nil
	})
	if errors.Is(get.Err(), redis.Nil) {
		return nil, 0, nil
	}
	if err != nil {
		r.failed(redisOpRead, err)
		return nil, 0, err
	}
	b, _ := get.Bytes()
	return b, ttl.Val(), nil
}

// releaseSrc deletes a lease only if the caller still holds it.
const releaseSrc = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`

var releaseScript = redis.NewScript(releaseSrc)

// renewScript extends a lease only if the caller still holds it.
var renewScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) end return 0`)

// write stores a value with a TTL and, when token is set, releases the lease
// in the same round trip.
func (r *Redis) write(ctx context.Context, key string, val []byte, ttl time.Duration, lease, token string) {
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, val, ttl)
		if token != "" {
			// EVAL, not EVALSHA: a pipeline cannot fall back when the script is not
			// loaded yet
			p.Eval(ctx, releaseSrc, []string{lease}, token)
		}
		return nil
	})
	if err != nil {
		r.failed(redisOpWrite, err)
	}
}

// acquire tries to take the fetch lease of a key and reads its value after, in
// one round trip. It returns the token that holds the lease ("" when another
// daemon holds it) and the value with its remaining TTL (nil when absent). The
// value is read after the lease is taken: a holder writes its value before it
// releases, so a lease taken just after another daemon's fetch sees that fetch's
// value rather than fetching again.
func (r *Redis) acquire(ctx context.Context, lease, key string) (string, []byte, time.Duration, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	var setnx *redis.BoolCmd
	var get *redis.StringCmd
	var ttl *redis.DurationCmd
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		setnx = p.SetNX(ctx, lease, token, r.o.LeaseTTL)
		get = p.Get(ctx, key)
		ttl = p.PTTL(ctx, key)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		r.failed(redisOpLease, err)
		return "", nil, 0, err
	}
	if !setnx.Val() {
		token = ""
	}
	val, _ := get.Bytes() // nil when absent
	return token, val, ttl.Val(), nil
}

func (r *Redis) release(ctx context.Context, lease, token string) {
	if err := releaseScript.Run(ctx, r.c, []string{lease}, token).Err(); err != nil && !errors.Is(err, redis.Nil) {
		r.failed(redisOpLease, err)
	}
}

// keepLease renews a held lease until the returned stop is called, so that it
// outlives a slow fetch but not a dead holder.
func (r *Redis) keepLease(lease, token string) (stop func()) {
	done := make(chan struct{})
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(r.o.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-r.ctx.Done():
				return
			case <-t.C:
			}
			if !r.Up() {
				continue
			}
			ctx, cancel := context.WithTimeout(r.ctx, r.o.Timeout*2)
			err := renewScript.Run(ctx, r.c, []string{lease}, token, r.o.LeaseTTL.Milliseconds()).Err()
			cancel()
			if err != nil && !errors.Is(err, redis.Nil) {
				r.failed(redisOpLease, err)
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// sharedFill answers a fetch of key from Redis when it holds a value that accept
// takes (given its age), else fetches it, under the installation-wide lease of
// the key when Redis is up, and writes what was fetched for the others. It
// returns the value and its age (0 when fetched here). With Redis down it only
// fetches.
func sharedFill[V any](ctx context.Context, rd *Redis, layer, key string, ttl time.Duration, c valueCodec[V],
	accept func(age time.Duration) bool, fetch func(context.Context) (V, error)) (V, time.Duration, error) {
	var zero V
	vkey, lkey := rd.valueKey(layer, key), rd.leaseKey(layer, key)
	token := ""
	answered := false // Redis answered: this fetch is a shared miss
	poll := leasePollMin
	var timer *time.Timer
	var bad []byte // a malformed value already counted
	for first := true; rd.Up(); first = false {
		// First a plain read (the common case: a hit); then, each time, take the
		// lease and read again in one round trip.
		var raw []byte
		var pttl time.Duration
		var tok string
		var err error
		if first {
			raw, pttl, err = rd.read(ctx, vkey)
		} else {
			tok, raw, pttl, err = rd.acquire(ctx, lkey, vkey)
		}
		if err != nil {
			break
		}
		if raw != nil && !bytes.Equal(raw, bad) {
			v, wttl, err := c.decode(key, raw)
			if err != nil {
				bad = raw
				rd.m.malformed.WithLabelValues(layer).Inc()
				rd.log.Warn("ignoring a malformed value in redis; fetching it again", "layer", layer, "key", key, "err", err)
			} else if age := max(wttl-pttl, 0); accept(age) {
				if tok != "" {
					rd.release(ctx, lkey, tok)
				}
				rd.m.hits.WithLabelValues(layer).Inc()
				return v, age, nil
			}
		}
		answered = true
		if first {
			continue
		}
		if tok != "" {
			token = tok
			break
		}
		// Another daemon fetches it: read again shortly.
		if timer == nil {
			rd.m.leaseWaits.WithLabelValues(layer).Inc()
			timer = time.NewTimer(poll)
			defer timer.Stop()
		} else {
			timer.Reset(poll)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return zero, 0, ctx.Err()
		}
		poll = min(poll*2, leasePollMax)
	}
	if answered {
		rd.m.misses.WithLabelValues(layer).Inc()
	}
	var stop func()
	if token != "" {
		stop = rd.keepLease(lkey, token)
	}
	v, err := fetch(ctx)
	if stop != nil {
		stop()
	}
	wctx := context.WithoutCancel(ctx) // a fetch that made it is written even if its context just ended
	if err == nil && rd.Up() {
		if val, ok := c.encode(key, v, ttl); ok {
			rd.write(wctx, vkey, val, ttl, lkey, token)
			return v, 0, nil
		}
	}
	if token != "" && rd.Up() {
		rd.release(wctx, lkey, token) // a waiter takes it and fetches in turn
	}
	return v, 0, err
}

// putContent writes content by digest fetched outside sharedFill (a manifest read
// by tag), so the other daemons need not fetch it by digest.
func putContent[V any](ctx context.Context, rd *Redis, layer, key string, c valueCodec[V], v V) {
	if !rd.Up() {
		return
	}
	if val, ok := c.encode(key, v, rd.o.ContentTTL); ok {
		rd.write(context.WithoutCancel(ctx), rd.valueKey(layer, key), val, rd.o.ContentTTL, "", "")
	}
}
