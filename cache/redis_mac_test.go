package cache

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
)

// rotatingKey is a key file as the tier sees it: what load returns can change.
type rotatingKey struct {
	mu  sync.Mutex
	key []byte
	err error
}

func (k *rotatingKey) set(key []byte, err error) { k.mu.Lock(); k.key, k.err = key, err; k.mu.Unlock() }
func (k *rotatingKey) load() ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.key, k.err
}

func TestRedisMACKeyTooShort(t *testing.T) {
	_, err := NewRedis(RedisOptions{Addr: "127.0.0.1:1", MACKey: keyFunc([]byte("short")), Logger: slog.New(slog.DiscardHandler)}, nil)
	if err == nil || !strings.Contains(err.Error(), "5 bytes, want at least 32") || strings.Contains(err.Error(), "short") {
		t.Errorf("short key: %v", err)
	}
	_, err = NewRedis(RedisOptions{Addr: "127.0.0.1:1", MACKey: func() ([]byte, error) { return nil, errors.New("open /k: no such file") },
		Logger: slog.New(slog.DiscardHandler)}, nil)
	if err == nil || !strings.Contains(err.Error(), "open /k") {
		t.Errorf("missing key: %v", err)
	}
}

// A rotated key signs from the next reload on; values signed with the previous
// one are still taken for macPreviousFor, then they are forged. A key that
// cannot be read is logged once, without its content, and the old key kept.
func TestRedisMACKeyRotation(t *testing.T) {
	rs := redistest.Start(t)
	var logs syncBuffer
	key1, key2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 40)
	k := &rotatingKey{key: key1}
	rd, err := NewRedis(RedisOptions{Addr: rs.Addr, MACKey: k.load, RetryInterval: 5 * time.Millisecond, Timeout: healthyRedisTimeout,
		DialTimeout: healthyRedisTimeout, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	read := func(rkey string, v []byte) string {
		_, _, reason, _ := decodeFrom(context.Background(), rd, tagsCodec, rkey, "k", v)
		return reason
	}
	old, _ := encodeFor(rd, tagsCodec, "t", "k", []string{"1.0.0"}, time.Minute)

	k.set([]byte("too short"), nil)
	waitFor(t, "the short key logged", func() bool { return strings.Contains(logs.String(), "not reloaded") })
	if r := read("t", old); r != "" {
		t.Errorf("after a bad reload, a value of the key in use: %q", r)
	}
	k.set(key2, nil)
	waitFor(t, "the new key", func() bool { return bytes.Equal(rd.keys.cur.Load().key, key2) })
	fresh, _ := encodeFor(rd, tagsCodec, "t", "k", []string{"1.0.0"}, time.Minute)
	if r1, r2 := read("t", old), read("t", fresh); r1 != "" || r2 != "" {
		t.Errorf("just after the rotation: old key %q, new key %q; want both taken", r1, r2)
	}
	// macPreviousFor later
	st := rd.keys.cur.Load()
	rd.keys.cur.Store(&macState{key: st.key, prev: st.prev, prevUntil: time.Now().Add(-time.Second)})
	if r1, r2 := read("t", old), read("t", fresh); r1 != rejectForged || r2 != "" {
		t.Errorf("%v after the rotation: old key %q, new key %q; want forged and taken", macPreviousFor, r1, r2)
	}
	if n := strings.Count(logs.String(), "not reloaded"); n != 1 {
		t.Errorf("the unreadable key was logged %d times, want once", n)
	}
	if strings.Contains(logs.String(), "too short") || strings.Contains(logs.String(), string(key2)) {
		t.Errorf("a key is in the logs:\n%s", logs.String())
	}
}

// The watch list's fields are signed too: a field written by another party, or
// moved to another field, is dropped and counted.
func TestRedisStateFieldsAreAuthenticated(t *testing.T) {
	rs := redistest.Start(t)
	rd := newTier(t, rs.Addr, RedisOptions{})
	ctx := context.Background()
	if err := rd.PutState(ctx, "watched", map[string][]byte{"a": []byte(`{"app":"a"}`)}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	c := newRedisClient(t, rs.Addr)
	hash := rd.stateKey("watched")
	signedA, err := c.HGet(ctx, hash, "a").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, hash, "b", `{"app":"b"}`, "c", signedA).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := rd.State(ctx, "watched")
	if err != nil || len(got) != 1 || string(got["a"]) != `{"app":"a"}` {
		t.Errorf("state: %q %v, want a alone", got, err)
	}
	if u, f := testCount(rd, rejectUnauthenticated, LayerState), testCount(rd, rejectForged, LayerState); u != 1 || f != 1 {
		t.Errorf("rejected: %v unauthenticated, %v forged; want 1 and 1", u, f)
	}
	// a daemon without a key reads both forms
	plain, err := NewRedis(RedisOptions{Addr: rs.Addr, Timeout: healthyRedisTimeout, DialTimeout: healthyRedisTimeout, Logger: slog.New(slog.DiscardHandler)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	got, err = plain.State(ctx, "watched")
	if err != nil || len(got) != 3 || string(got["a"]) != `{"app":"a"}` || string(got["b"]) != `{"app":"b"}` {
		t.Errorf("state without a key: %q %v", got, err)
	}
}
