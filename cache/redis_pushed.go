package cache

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Pushes announced between daemons: a registry webhook reaches one replica (the
// Service picks one), but every replica may hold the repository's tag list and
// render apps that use it, so the one that heard it tells the others on a channel
// of the shared tier. A notice only makes a daemon read a tag list again, so a
// forged one costs a registry request, never a wrong answer; with a MAC key
// (redis.macKeyFile) notices are signed and unsigned ones are ignored.

// pushSeparator ends the announced text; the MAC and a nonce follow it.
const pushSeparator = "\x00"

// AnnouncePush tells the other daemons sharing this Redis of a push, msg being
// what the caller makes of it (OnPush's function is given it as sent). The daemon
// that announces does not hear its own notice.
func (r *Redis) AnnouncePush(ctx context.Context, msg string) error {
	if r == nil || !r.Up() {
		return nil
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	payload := msg + pushSeparator + hex.EncodeToString(nonce[:]) + pushSeparator + r.pushMAC(msg, nonce[:])
	r.sentPush(payload)
	if err := r.c.Publish(ctx, r.pushed, payload).Err(); err != nil {
		r.failed(ctx, redisOpWrite, err)
		return err
	}
	return nil
}

// OnPush sets the function told of pushes other daemons announce. It is called
// from the subscription's goroutine: it must be quick.
func (r *Redis) OnPush(f func(msg string)) {
	if r != nil {
		r.onPushed.Store(&f)
	}
}

// pushMAC is the hex MAC of an announced push with the current key ("" without
// one).
func (r *Redis) pushMAC(msg string, nonce []byte) string {
	if !r.keys.on() {
		return ""
	}
	return hex.EncodeToString(pushMACWith(r.keys.cur.Load().key, msg, nonce))
}

func pushMACWith(key []byte, msg string, nonce []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("pushed" + pushSeparator + msg + pushSeparator))
	h.Write(nonce)
	return h.Sum(nil)
}

// heardPush hands a notice of another daemon to the OnPush function, if it is
// not this daemon's own and (with a MAC key) it is authentic.
func (r *Redis) heardPush(payload string) {
	if r.ownPush(payload) {
		return
	}
	msg, rest, ok1 := strings.Cut(payload, pushSeparator)
	nonceHex, macHex, ok2 := strings.Cut(rest, pushSeparator)
	nonce, err := hex.DecodeString(nonceHex)
	if !ok1 || !ok2 || err != nil {
		r.ignoredPush(rejectCorrupt)
		return
	}
	if r.keys.on() {
		got, err := hex.DecodeString(macHex)
		st := r.keys.cur.Load()
		ok := err == nil && (hmac.Equal(got, pushMACWith(st.key, msg, nonce)) ||
			(st.prev != nil && r.keys.now().Before(st.prevUntil) && hmac.Equal(got, pushMACWith(st.prev, msg, nonce))))
		switch {
		case macHex == "":
			r.ignoredPush(rejectUnauthenticated)
			return
		case !ok:
			r.ignoredPush(rejectForged)
			return
		}
	}
	if f := r.onPushed.Load(); f != nil {
		(*f)(msg)
	}
}

// ignoredPush counts and logs a notice not acted on.
func (r *Redis) ignoredPush(reason string) {
	r.m.rejected.WithLabelValues(layerPushed, reason).Inc()
	r.log.Warn("ignoring a push notice in redis", "reason", reason)
}

// layerPushed is the layer label of cache_redis_rejected_total for push notices.
const layerPushed = "pushed"

// sentPush remembers a notice this daemon published, so that it skips it when
// it comes back on the subscription.
func (r *Redis) sentPush(payload string) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.ownPushes == nil {
		r.ownPushes = map[string]struct{}{}
	}
	if len(r.ownPushes) >= maxOwnPushes {
		clear(r.ownPushes) // a lost echo must not keep one forever
	}
	r.ownPushes[payload] = struct{}{}
}

func (r *Redis) ownPush(payload string) bool {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_, ok := r.ownPushes[payload]
	delete(r.ownPushes, payload)
	return ok
}

// maxOwnPushes bounds the notices remembered until their echo comes back.
const maxOwnPushes = 4096
