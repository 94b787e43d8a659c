package cache

import (
	"context"
	"crypto/tls"
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
//     PX, kept alive while its holder fetches) that the others wait on, woken by the
//     holder's notice on a pub/sub channel (or polling, should a notice be lost),
//     then read what the holder wrote; a holder that dies stops renewing, its lease
//     expires and a waiter takes it;
//   - values carry a format version, their layer, (for TTL layers) the TTL they
//     were written with and their length, compressed with zstd, and, when the
//     daemons share a key, an HMAC of the Redis key and the value (redis_mac.go);
//     a value without a valid MAC, over the bounds of decompression
//     (redis_decode.go), that does not decode, has the wrong shape or (content)
//     bytes whose sha256 is not the digest it is stored under is ignored, counted
//     and fetched again;
//   - replies over a bound are refused before the client allocates them
//     (redis_reply.go);
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
	// redisValueFormat names the value format in the keys of values and leases: a
	// daemon of another format neither reads nor overwrites these values during a
	// rolling upgrade. v2: values carry their length and may carry a MAC.
	redisValueFormat = "v2"
	// redisFormat names the format of the other keys (state, claims, the channel
	// of fill notices), which v2 did not change.
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
	// MACKey returns the key values are authenticated with (at least
	// MinRedisMACKey bytes), shared by every daemon of the installation. It is
	// called when the tier is made (an error stops it from being made) and every
	// 10 RetryIntervals after, so that a rotated key is used without a restart.
	// Its error is logged, never the key. nil: values are not authenticated.
	MACKey func() ([]byte, error)
	// DecodeMemory bounds the bytes the values being decoded hold at once, in
	// this process (default DefaultRedisDecodeMemory).
	DecodeMemory int64
	// MaxReply bounds the bytes of one reply from Redis (default
	// DefaultRedisMaxReply); a larger one is refused before it is read.
	MaxReply int64
}

// Redis is the shared tier of the registry view (see WithRedis). Safe for
// concurrent use; Close it when done (a Registry given it closes it).
type Redis struct {
	c   *redis.Client
	o   RedisOptions
	m   *redisMetrics
	log *slog.Logger

	keys   *macKeys
	budget *decodeBudget

	up atomic.Bool

	// Waiters for a key another daemon fetches, woken by its notice on the
	// channel (the holder publishes the key after writing or releasing it).
	channel string
	wmu     sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
	ps      *redis.PubSub
	// pushed is the channel of pushes announced (AnnouncePush); onPushed hears
	// the other daemons' ones.
	pushed    string
	onPushed  atomic.Pointer[func(string)]
	ownPushes map[string]struct{} // notices this daemon sent, until their echo (guarded by wmu)

	// onLeaseWait, when set (a test hook, before the Redis is used), is told when
	// a fetch starts waiting for the lease another daemon holds.
	onLeaseWait func(layer, key string)

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
	o = o.withDefaults()
	if m == nil {
		m = NewMetrics()
	}
	log := o.Logger.With("redis", o.Addr)
	keys, err := newMACKeys(o.MACKey, log)
	if err != nil {
		return nil, err
	}
	rm := newRedisMetrics(m)
	opts := o.clientOptions()
	opts.Dialer = boundedDialer(redis.NewDialer(opts), o.MaxReply, func(err error) {
		rm.refused.Inc()
		log.Warn("redis reply refused: closing the connection", "err", err)
	})
	redisLogOnce.Do(func() { redis.SetLogger(debugLogger{}) })
	ctx, cancel := context.WithCancel(context.Background())
	r := &Redis{c: redis.NewClient(opts), o: o, m: rm, log: log, ctx: ctx, cancel: cancel, keys: keys,
		budget:  newDecodeBudget(o.DecodeMemory, o.Timeout),
		channel: o.KeyPrefix + redisFormat + ":filled", pushed: o.KeyPrefix + redisFormat + ":pushed", waiters: map[string]map[chan struct{}]struct{}{}}
	if !keys.on() {
		log.Warn("redis values are not authenticated: any writer to this Redis can make the daemons believe tag lists, " +
			"the digests tags point at and signature verdicts; set redis.macKeyFile (docs/redis.md)")
	}
	r.connect()
	r.listen()
	r.monitor()
	return r, nil
}

// withDefaults fills the options left zero with the defaults.
func (o RedisOptions) withDefaults() RedisOptions {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.DialTimeout, DefaultRedisDialTimeout)
	def(&o.Timeout, DefaultRedisTimeout)
	def(&o.ContentTTL, DefaultRedisContentTTL)
	def(&o.LeaseTTL, DefaultRedisLeaseTTL)
	def(&o.RetryInterval, DefaultRedisRetryInterval)
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultRedisKeyPrefix
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.DecodeMemory <= 0 {
		o.DecodeMemory = DefaultRedisDecodeMemory
	}
	if o.MaxReply <= 0 {
		o.MaxReply = DefaultRedisMaxReply
	}
	return o
}

// clientOptions are go-redis's options for o (its Dialer is set by NewRedis).
func (o RedisOptions) clientOptions() *redis.Options {
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
	return opts
}

// connect pings Redis once at start: unreachable, the daemon goes on without it
// until the monitor sees it answer.
func (r *Redis) connect() {
	if err := r.ping(); err != nil {
		r.m.errors.WithLabelValues(redisOpPing).Inc()
		r.m.up.Set(0)
		r.log.Warn("redis unavailable: resolving from memory and registries until it answers", "err", redisErrText(err))
		return
	}
	r.up.Store(true)
	r.m.up.Set(1)
	r.log.Info("redis shared tier connected", "keyPrefix", r.o.KeyPrefix)
}

// listen subscribes to the notices of filled keys and wakes their waiters;
// go-redis resubscribes after a lost connection.
func (r *Redis) listen() {
	r.ps = r.c.Subscribe(r.ctx, r.channel, r.pushed)
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
				if msg.Channel == r.pushed {
					r.heardPush(msg.Payload)
					continue
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

// maxWrite bounds the values written: one read back in a reply (an array of the
// value, its TTL and a flag) stays within MaxReply.
func (r *Redis) maxWrite() int64 { return r.o.MaxReply - 1<<10 }

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
			if n%macReloadEvery == 0 {
				r.keys.reload()
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
