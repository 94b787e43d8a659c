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
	"strconv"
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
//     PX, kept alive while its holder fetches) that the others wait on, woken by the
//     holder's notice on a pub/sub channel (or polling, should a notice be lost),
//     then read what the holder wrote; a holder that dies stops renewing, its lease
//     expires and a waiter takes it;
//   - values carry a format version, their layer and (for TTL layers) the TTL they
//     were written with, compressed with zstd; a value that does not decode, has the
//     wrong shape or (content) bytes whose sha256 is not the digest it is stored
//     under is ignored, counted and fetched again;
//   - Redis down, slow or flushed: the daemon resolves from memory and registries; a
//     failed command opens a circuit (one log line, the up gauge at 0), no command is
//     sent while it is open, and a probe every RetryInterval closes it again (a
//     health check every 10 RetryIntervals opens it for an idle daemon).
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

	// leasePollMin and leasePollMax bound the wait between two reads of a waiter
	// when no notice of the holder's write arrives (pub/sub is best effort).
	leasePollMin = 10 * time.Millisecond
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

	up atomic.Bool

	// Waiters for a key another daemon fetches, woken by its notice on the
	// channel (the holder publishes the key after writing or releasing it).
	channel string
	wmu     sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
	ps      *redis.PubSub

	ctx    context.Context // cancelled by Close: probes and lease renewals
	cancel context.CancelFunc
	gmu    sync.Mutex // guards closed and wg.Add against Close's wg.Wait
	closed bool
	wg     sync.WaitGroup
}

// goBackground runs f in a goroutine Close waits for; false once closed.
func (r *Redis) goBackground(f func()) bool {
	r.gmu.Lock()
	defer r.gmu.Unlock()
	if r.closed {
		return false
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
	return true
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
		PoolSize:         64,
		PoolTimeout:      o.Timeout + o.DialTimeout,
		PipelinePoolSize: -1, // no pipelines: every exchange is one script
		// values are a few KiB compressed: go-redis's 32 KiB per connection and
		// direction would hold megabytes for nothing
		ReadBufferSize:           8 << 10,
		WriteBufferSize:          8 << 10,
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
	r := &Redis{c: redis.NewClient(opts), o: o, m: newRedisMetrics(m), log: log, ctx: ctx, cancel: cancel,
		channel: o.KeyPrefix + redisFormat + ":filled", waiters: map[string]map[chan struct{}]struct{}{}}
	if err := r.ping(); err != nil {
		r.m.errors.WithLabelValues(redisOpPing).Inc()
		r.m.up.Set(0)
		log.Warn("redis unavailable: resolving from memory and registries until it answers", "err", redisErrText(err))
	} else {
		r.up.Store(true)
		r.m.up.Set(1)
		log.Info("redis shared tier connected", "keyPrefix", o.KeyPrefix)
	}
	r.listen()
	r.monitor()
	return r, nil
}

// listen subscribes to the notices of filled keys and wakes their waiters;
// go-redis resubscribes after a lost connection.
func (r *Redis) listen() {
	r.ps = r.c.Subscribe(r.ctx, r.channel)
	ch := r.ps.Channel(redis.WithChannelSize(1024))
	r.goBackground(func() {
		for {
			select {
			case <-r.ctx.Done():
				return
			case msg, ok := <-ch:
				if !ok {
					return
				}
				r.wake(msg.Payload)
			}
		}
	})
}

// wait registers for the notice of key; done unregisters.
func (r *Redis) wait(key string) (notice <-chan struct{}, done func()) {
	ch := make(chan struct{}, 1)
	r.wmu.Lock()
	set := r.waiters[key]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		r.waiters[key] = set
	}
	set[ch] = struct{}{}
	r.wmu.Unlock()
	return ch, func() {
		r.wmu.Lock()
		delete(set, ch)
		if len(set) == 0 && r.waiters[key] != nil && len(r.waiters[key]) == 0 {
			delete(r.waiters, key)
		}
		r.wmu.Unlock()
	}
}

func (r *Redis) wake(key string) {
	r.wmu.Lock()
	for ch := range r.waiters[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	r.wmu.Unlock()
}

// Close stops probes and lease renewals and closes the connections.
func (r *Redis) Close() error {
	if r == nil {
		return nil
	}
	r.gmu.Lock()
	r.closed = true
	r.gmu.Unlock()
	r.cancel()
	if r.ps != nil {
		_ = r.ps.Close()
	}
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
func (r *Redis) failed(ctx context.Context, op string, err error) {
	if r.ctx.Err() != nil || ctx.Err() != nil {
		return // closing, or the fetch ended (its deadline, the Registry's Close): not Redis's failure
	}
	r.m.errors.WithLabelValues(op).Inc()
	// An answer refusing a write (out of memory, a read-only replica) leaves reads
	// working: keep using them. All connections busy says the daemon is busy, not
	// that Redis is gone.
	if op == redisOpWrite && (redis.HasErrorPrefix(err, "OOM") || redis.HasErrorPrefix(err, "READONLY")) ||
		errors.Is(err, redis.ErrPoolTimeout) {
		return
	}
	if r.up.CompareAndSwap(true, false) {
		r.m.up.Set(0)
		r.log.Warn("redis unavailable: resolving from memory and registries until it answers", "op", op, "err", redisErrText(err))
	}
}

// monitor probes Redis: every RetryInterval while it is out of use, to bring it
// back as soon as it answers; every 10 RetryIntervals while in use, so that an
// idle daemon too reports a Redis that went away.
func (r *Redis) monitor() {
	r.goBackground(func() {
		t := time.NewTicker(r.o.RetryInterval)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-r.ctx.Done():
				return
			case <-t.C:
			}
			if r.up.Load() {
				if n%10 == 0 {
					if err := r.ping(); err != nil {
						r.failed(r.ctx, redisOpPing, err)
					}
				}
				continue
			}
			if err := r.ping(); err != nil {
				continue
			}
			if r.up.CompareAndSwap(false, true) {
				r.m.up.Set(1)
				r.log.Info("redis available again: sharing the registry view")
			}
		}
	})
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

// Every exchange with Redis on a lookup is one script, so one command and one
// round trip: Redis's throughput, not the daemons', bounds a busy installation.

// lookupScript returns a value with its remaining TTL (PTTL) and, when the value
// is absent (or ARGV[3] is "1": the caller will not take the value there is),
// tries to take the fetch lease (token ARGV[1], TTL ARGV[2] ms): {value or "",
// pttl, 1 if the lease was taken}.
var lookupScript = redis.NewScript(`
local v = redis.call("GET", KEYS[1])
local ttl = -2
if v then ttl = redis.call("PTTL", KEYS[1]) end
local got = 0
if not v or ARGV[3] == "1" then
  if redis.call("SET", KEYS[2], ARGV[1], "NX", "PX", ARGV[2]) then got = 1 end
end
return {v or "", ttl, got}`)

// writeScript stores a value with its TTL (ms) and, for a lease holder (ARGV[3]
// its token), releases the lease and tells waiters on channel ARGV[4].
var writeScript = redis.NewScript(`
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
if ARGV[3] ~= "" then
  if redis.call("GET", KEYS[2]) == ARGV[3] then redis.call("DEL", KEYS[2]) end
  redis.call("PUBLISH", ARGV[4], KEYS[1])
end
return 1`)

// releaseScript gives a lease up if the caller still holds it and tells the
// key's waiters on channel ARGV[2], so that one takes it at once.
var releaseScript = redis.NewScript(`
if redis.call("GET", KEYS[2]) == ARGV[1] then redis.call("DEL", KEYS[2]) end
redis.call("PUBLISH", ARGV[2], KEYS[1])
return 1`)

// renewScript extends a lease only if the caller still holds it.
var renewScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) end return 0`)

// lookup reads key's value and its remaining TTL (nil when absent) and tries to
// take the key's fetch lease when there is no value, or whatever there is with
// force. It returns the token of a lease taken, else "".
func (r *Redis) lookup(ctx context.Context, key, lease string, force bool) ([]byte, time.Duration, string, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token, ttlArg, forceArg := hex.EncodeToString(b[:]), strconv.FormatInt(r.o.LeaseTTL.Milliseconds(), 10), "0"
	if force {
		forceArg = "1"
	}
	res, err := lookupScript.Run(ctx, r.c, []string{key, lease}, token, ttlArg, forceArg).Slice()
	if err != nil {
		r.failed(ctx, redisOpRead, err)
		return nil, 0, "", err
	}
	if len(res) != 3 {
		err := fmt.Errorf("redis lookup: %d results, want 3", len(res))
		r.failed(ctx, redisOpRead, err)
		return nil, 0, "", err
	}
	v, _ := res[0].(string)
	pttl, _ := res[1].(int64)
	if got, _ := res[2].(int64); got != 1 {
		token = ""
	}
	if v == "" {
		return nil, 0, token, nil
	}
	return []byte(v), time.Duration(pttl) * time.Millisecond, token, nil
}

// write stores a value with a TTL and, when token is set, releases the lease
// and tells the key's waiters.
func (r *Redis) write(ctx context.Context, key string, val []byte, ttl time.Duration, lease, token string) {
	err := writeScript.Run(ctx, r.c, []string{key, lease}, val, ttl.Milliseconds(), token, r.channel).Err()
	if err != nil {
		r.failed(ctx, redisOpWrite, err)
	}
}

// release gives a lease up; key's waiters are told, so one takes it at once.
func (r *Redis) release(ctx context.Context, lease, token, key string) {
	if err := releaseScript.Run(ctx, r.c, []string{key, lease}, token, r.channel).Err(); err != nil {
		r.failed(ctx, redisOpLease, err)
	}
}

// keepLease renews a held lease until the returned stop is called, so that it
// outlives a slow fetch but not a dead holder.
func (r *Redis) keepLease(lease, token string) (stop func()) {
	done := make(chan struct{})
	r.goBackground(func() {
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
			// bounded by the client's command timeout
			err := renewScript.Run(r.ctx, r.c, []string{lease}, token, r.o.LeaseTTL.Milliseconds()).Err()
			if err != nil && !errors.Is(err, redis.Nil) {
				r.failed(r.ctx, redisOpLease, err)
			}
		}
	})
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
	var notice <-chan struct{}
	var bad []byte // a malformed value already counted
	force := false // Redis holds a value this fetch does not take
	for rd.Up() {
		raw, pttl, tok, err := rd.lookup(ctx, vkey, lkey, force)
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
					rd.release(ctx, lkey, tok, vkey)
				}
				rd.m.hits.WithLabelValues(layer).Inc()
				return v, age, nil
			}
		}
		answered = true
		if tok != "" {
			token = tok
			break
		}
		if raw != nil && !force {
			force = true // a value not taken, and no one fetching: take the lease
			continue
		}
		// Another daemon fetches it: wait for its notice, or read again shortly.
		if notice == nil {
			var done func()
			notice, done = rd.wait(vkey)
			defer done()
			// registered after the read above: read again before waiting, so a
			// notice sent in between is not missed
			continue
		}
		if timer == nil {
			rd.m.leaseWaits.WithLabelValues(layer).Inc()
			timer = time.NewTimer(poll)
			defer timer.Stop()
		} else {
			timer.Reset(poll)
		}
		select {
		case <-notice:
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
		rd.release(wctx, lkey, token, vkey) // a waiter takes it and fetches in turn
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
