package cache

import (
	"context"
	"errors"
	"time"
)

// The daemon keeps one small document beside the registry view in the same Redis,
// under the same prefix: the refresh loop's watch list, so that a restarted pod
// (every replica shares it) goes on watching the apps it had rendered. These two
// methods are all it needs: a hash of fields, written and read whole.

// errRedisDown is returned by the state methods while the circuit is open.
var errRedisDown = errors.New("redis unavailable")

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
			args = append(args, f, v)
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

// State returns every field of the hash name.
func (r *Redis) State(ctx context.Context, name string) (map[string][]byte, error) {
	if !r.Up() {
		return nil, errRedisDown
	}
	m, err := r.c.HGetAll(ctx, r.stateKey(name)).Result()
	if err != nil {
		r.failed(ctx, redisOpRead, err)
		return nil, err
	}
	out := make(map[string][]byte, len(m))
	for f, v := range m {
		out[f] = []byte(v)
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
