package cache

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

func (r *Redis) valueKey(layer, key string) string {
	return r.o.KeyPrefix + redisValueFormat + ":" + layer + ":" + key
}

func (r *Redis) leaseKey(layer, key string) string {
	return r.o.KeyPrefix + redisValueFormat + ":lease:" + layer + ":" + key
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

// valueAge is the age of a value written with TTL wttl whose lookup, sent at
// asked, found pttl left: how long ago the fetch that read it was sent (the
// writer gives it what is left of wttl then), never less. Redis counts in whole
// milliseconds (one added), and the time since the lookup was sent (the answer's
// way back, its decoding) is time the value aged. Revalidation takes a value
// only if it is younger than a push: an age too small would take a list read
// before it.
func valueAge(wttl, pttl time.Duration, asked time.Time) time.Duration {
	return max(wttl-pttl, 0) + time.Millisecond + time.Since(asked)
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
	var bad []byte // a rejected value already counted
	force := false // Redis holds a value this fetch does not take
	for rd.Up() {
		asked := time.Now() // Redis reads the TTL after this: an age counted from here is never short
		raw, pttl, tok, err := rd.lookup(ctx, vkey, lkey, force)
		if err != nil {
			break
		}
		if raw != nil && !bytes.Equal(raw, bad) {
			v, wttl, reason, err := decodeFrom(ctx, rd, c, vkey, key, raw)
			if reason != "" {
				bad = raw
				rd.rejected(layer, key, reason, err)
			} else if age := valueAge(wttl, pttl, asked); accept(age) {
				if tok != "" {
					rd.release(ctx, lkey, tok, vkey)
				}
				rd.m.hits.WithLabelValues(layer).Inc()
				return v, valueAge(wttl, pttl, asked), nil // as of now: the release took a round trip
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
			if rd.onLeaseWait != nil {
				rd.onLeaseWait(layer, key)
			}
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
	sent := time.Now()
	v, err := fetch(ctx)
	if stop != nil {
		stop()
	}
	wctx := context.WithoutCancel(ctx) // a fetch that made it is written even if its context just ended
	// The value is as old as the fetch that read it, not as its write: a fetch
	// sent before a push and answered after it is not younger than the push.
	// Redis counts the age from the write, so it is given what is left of ttl.
	left := ttl - time.Since(sent)
	if err == nil && rd.Up() && left >= time.Millisecond {
		if val, ok := encodeFor(rd, c, vkey, key, v, ttl); ok {
			rd.write(wctx, vkey, val, left, lkey, token)
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
	vkey := rd.valueKey(layer, key)
	if val, ok := encodeFor(rd, c, vkey, key, v, rd.o.ContentTTL); ok {
		rd.write(context.WithoutCancel(ctx), vkey, val, rd.o.ContentTTL, "", "")
	}
}
