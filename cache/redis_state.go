package cache

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The daemon keeps one small document beside the registry view in the same Redis,
// under the same prefix: the refresh loop's watch list, so that a restarted pod
// (every replica shares it) goes on watching the apps it had rendered. These two
// methods are all it needs: a hash of fields, written and read whole.

// errRedisDown is returned by the state methods while the circuit is open.
var errRedisDown = errors.New("redis unavailable")

// LayerState is the layer label of rejected state fields in
// cache_redis_rejected_total.
const LayerState = "state"

// With a MAC key, a state field is stored as the bytes stateVersion, authHMAC, 0,
// the HMAC-SHA256 of the hash's Redis key, the field's name and the field's bytes
// (these but the MAC), then the value; a field read without a valid MAC is dropped (counted). Without a key,
// fields are stored as they are given (the daemon's JSON, never starting with
// stateVersion), and a signed field's value is read without checking its MAC.
const stateVersion = 2

// stateMACKey is what a field's MAC covers besides its value: the hash and the
// field, each length-prefixed so that no two pairs give the same bytes.
func stateMACKey(key, field string) string {
	return fmt.Sprintf("%d:%s%d:%s", len(key), key, len(field), field)
}

func (r *Redis) sealField(key, field string, v []byte) []byte {
	if !r.keys.on() {
		return v
	}
	out := make([]byte, macAt+macSize, macAt+macSize+len(v))
	out[0], out[1] = stateVersion, authHMAC
	out = append(out, v...)
	r.keys.sign(stateMACKey(key, field), out)
	return out
}

// openField returns a field's value, or why it is refused.
func (r *Redis) openField(key, field string, v []byte) ([]byte, string) {
	signed := len(v) >= macAt+macSize && v[0] == stateVersion && v[1] == authHMAC
	if reason := r.keys.check(stateMACKey(key, field), v, signed); reason != "" {
		return nil, reason
	}
	if signed {
		return v[macAt+macSize:], ""
	}
	return v, ""
}

// stateKey is the hash named by name.
func (r *Redis) stateKey(name string) string { return r.o.KeyPrefix + redisFormat + ":state:" + name }

// PutState sets fields of the hash name and deletes the fields in del, and makes
// the whole hash expire ttl after this write (0: no expiry).
func (r *Redis) PutState(ctx context.Context, name string, set map[string][]byte, del []string, ttl time.Duration) error {
	if !r.Up() {
		return errRedisDown
	}
	key := r.stateKey(name)
	// three commands, not a pipeline (the client keeps none); a failure between
	// them leaves fields the next write or the expiry settles
	var err error
	if len(del) > 0 {
		err = r.c.HDel(ctx, key, del...).Err()
	}
	if err == nil && len(set) > 0 {
		args := make([]any, 0, 2*len(set))
		for f, v := range set {
			args = append(args, f, r.sealField(key, f, v))
		}
		err = r.c.HSet(ctx, key, args...).Err()
	}
	if err == nil && ttl > 0 {
		err = r.c.Expire(ctx, key, ttl).Err()
	}
	if err != nil {
		r.failed(ctx, redisOpWrite, err)
	}
	return err
}

// State returns every field of the hash name; with a MAC key, only those whose
// MAC is valid (the others are counted, and logged once per call).
func (r *Redis) State(ctx context.Context, name string) (map[string][]byte, error) {
	if !r.Up() {
		return nil, errRedisDown
	}
	key := r.stateKey(name)
	m, err := r.c.HGetAll(ctx, key).Result()
	if err != nil {
		r.failed(ctx, redisOpRead, err)
		return nil, err
	}
	out := make(map[string][]byte, len(m))
	dropped := map[string]int{}
	for f, v := range m {
		val, reason := r.openField(key, f, []byte(v))
		if reason != "" {
			r.m.rejected.WithLabelValues(LayerState, reason).Inc()
			dropped[reason]++
			continue
		}
		out[f] = val
	}
	if len(dropped) > 0 {
		r.log.Warn("ignoring state fields in redis without a valid MAC", "key", key, "dropped", dropped)
	}
	return out, nil
}

// Claim takes name for ttl if no daemon holds it: true when this call took it.
// Replicas use it so that one of them acts on what they all see (a refresh of an
// app for one change). While Redis is unavailable it returns an error and the
// caller acts on its own.
func (r *Redis) Claim(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	if !r.Up() {
		return false, errRedisDown
	}
	ok, err := r.c.SetNX(ctx, r.o.KeyPrefix+redisFormat+":claim:"+name, "1", ttl).Result()
	if err != nil {
		r.failed(ctx, redisOpWrite, err)
		return false, err
	}
	return ok, nil
}
