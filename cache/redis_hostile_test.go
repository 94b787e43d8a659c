package cache

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"maps"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache/redistest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// Values another party writes into the Redis the daemons share: a daemon with the
// MAC key serves none of them, counts each by reason, asks the registry instead
// (exactly what a daemon without Redis would ask for that key) and overwrites
// the value, so that the next daemon reads its own.

var (
	testMACKey  = []byte("0123456789abcdef0123456789abcdef-test-key")
	otherMACKey = []byte("another key of at least thirty-two bytes!!")
)

func keyFunc(k []byte) func() ([]byte, error) { return func() ([]byte, error) { return k, nil } }

// signedRaw is v (stored with room for a MAC) signed with key for the Redis key
// rkey, as a daemon holding key would write it.
func signedRaw(key []byte, rkey string, v []byte) []byte {
	copy(v[macAt:macAt+macSize], macOf(key, rkey, v))
	return v
}

// rleBomb is a zstd frame without a content size that expands to blocks×128 KiB
// of b: four bytes per block (1 GiB in 32 KiB).
func rleBomb(blocks int, b byte) []byte {
	f := binary.LittleEndian.AppendUint32(nil, 0xFD2FB528)
	f = append(f, 0x00, 0x50) // no content size, not single segment; window 1 MiB
	for i := range blocks {
		h := uint32(1)<<1 | uint32(128<<10)<<3 // RLE block of 128 KiB
		if i == blocks-1 {
			h |= 1 // last
		}
		f = append(f, byte(h), byte(h>>8), byte(h>>16), b)
	}
	return f
}

const gib = 1 << 30

// allocated runs f and returns the bytes the process allocated meanwhile.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

func TestRedisValuesOfAnotherWriterAreNotServed(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	pushTags(t, s, "other", "linux/amd64", "3.0.0")
	d100, d110 := s.Digest(t, "app", "1.0.0"), s.Digest(t, "app", "1.1.0")
	appKey, otherKey := resolve.RepoKey(mustRepo(t, s.Ref("app"))), resolve.RepoKey(mustRepo(t, s.Ref("other")))
	rkey := func(layer, k string) string { return DefaultRedisKeyPrefix + redisValueFormat + ":" + layer + ":" + k }
	c := newRedisClient(t, rs.Addr)
	ctx := context.Background()
	signed := RedisOptions{MACKey: keyFunc(testMACKey)}
	enc := func(layer string, codec valueCodec[[]string], key string, tags []string, mac []byte) []byte {
		v, _ := codec.encode(key, tags, time.Hour, mac != nil)
		if mac != nil {
			return signedRaw(mac, rkey(layer, key), v)
		}
		return v
	}
	fakeTags := []string{"1.0.0", "9.9.9"} // 9.9.9 does not exist: semver would choose it
	forgedHead := func(key []byte) []byte {
		v, _ := headCodec.encode("", newHeadVal(mustHash(t, d100), "application/vnd.oci.image.manifest.v1+json", 500), time.Hour, key != nil)
		if key != nil {
			return signedRaw(key, rkey(LayerHead, appKey+":1.1.0"), v)
		}
		return v
	}
	// the tag list of other, signed with the right key, for its own key
	movedTags := func() []byte { return enc(LayerTags, tagsCodec, otherKey, []string{"1.0.0", "9.9.9"}, testMACKey) }
	bomb := rleBomb(8192, 'a') // 1 GiB of "a"
	// a tag list signed with the right key an hour ago (captured then), written again
	replayed := func() []byte {
		p := []byte("1.0.0")
		v := storedRawAt('t', authHMAC, nil, DefaultTagTTL, time.Now().Add(-time.Hour), int64(len(p)), zstdEncoder().EncodeAll(p, nil))
		return signedRaw(testMACKey, rkey(LayerTags, appKey), v)
	}
	cases := []struct {
		name, key, layer, reason string
		val                      []byte
		kind                     rt.Kind // the one request the daemon makes instead
	}{
		{"no MAC", rkey(LayerTags, appKey), LayerTags, rejectUnauthenticated, enc(LayerTags, tagsCodec, appKey, fakeTags, nil), rt.Tags},
		{"MAC of another key", rkey(LayerTags, appKey), LayerTags, rejectForged, enc(LayerTags, tagsCodec, appKey, fakeTags, otherMACKey), rt.Tags},
		{"value moved from another key", rkey(LayerTags, appKey), LayerTags, rejectForged, movedTags(), rt.Tags},
		{"old signed value written again", rkey(LayerTags, appKey), LayerTags, rejectReplayed, replayed(), rt.Tags},
		{"descriptor without MAC", rkey(LayerHead, appKey+":1.1.0"), LayerHead, rejectUnauthenticated, forgedHead(nil), rt.ManifestHead},
		{"descriptor with a forged MAC", rkey(LayerHead, appKey+":1.1.0"), LayerHead, rejectForged, forgedHead(otherMACKey), rt.ManifestHead},
		{"bomb without MAC", rkey(LayerTags, appKey), LayerTags, rejectUnauthenticated, storedRaw('t', authNone, nil, time.Hour, 10, bomb), rt.Tags},
		{"bomb with a forged MAC", rkey(LayerTags, appKey), LayerTags, rejectForged, storedRaw('t', authHMAC, bytes.Repeat([]byte{7}, macSize), time.Hour, 10, bomb), rt.Tags},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			fill := newSharedFixture(t, s, rs.Addr, signed)
			fill.mustResolve(t, "app", resolve.PolicySpec{})
			fill.reg.Close()
			if err := c.Set(ctx, tc.key, tc.val, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			s.ResetCounts()
			f := newSharedFixture(t, s, rs.Addr, signed)
			var res *resolve.Result
			mem := allocated(func() { res = f.mustResolve(t, "app", resolve.PolicySpec{}) })
			if res.Tag != "1.1.0" || res.Digest != d110 {
				t.Errorf("resolved %s@%s, want 1.1.0@%s", res.Tag, res.Digest, d110)
			}
			if got := redisCount(f, tc.reason, tc.layer); got != 1 {
				t.Errorf("rejected %s %s: %v, want 1; %s", tc.layer, tc.reason, got, redisAsked(f))
			}
			if got := redisCount(f, rejectTooLarge, tc.layer) + redisCount(f, rejectCorrupt, tc.layer); got != 0 {
				t.Errorf("decoded before its MAC was checked: %v too-large or corrupt", got)
			}
			// a new daemon pings the registry before its first request
			if want := map[rt.Kind]int{rt.Ping: 1, tc.kind: 1}; !maps.Equal(s.Counts(), want) {
				t.Errorf("registry: %s, want %v", describeCounts(s), want)
			}
			if mem > 64<<20 {
				t.Errorf("the lookup allocated %d MiB", mem>>20)
			}
			// overwritten with the daemon's own, signed value: the next daemon asks nothing
			s.ResetCounts()
			third := newSharedFixture(t, s, rs.Addr, signed)
			third.mustResolve(t, "app", resolve.PolicySpec{})
			if s.Total() != 0 || redisCount(third, tc.reason, tc.layer) != 0 {
				t.Errorf("after the overwrite: %d requests (%s), %v rejected", s.Total(), describeCounts(s), redisCount(third, tc.reason, tc.layer))
			}
		})
	}
}

func mustHash(t *testing.T, d string) v1.Hash {
	t.Helper()
	h, err := parseDigest(d)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A daemon without a key serves what is in Redis, signed or not (it cannot tell),
// and says so once at start.
func TestRedisWithoutKeyWarnsOnce(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	signedDaemon := newSharedFixture(t, s, rs.Addr, RedisOptions{MACKey: keyFunc(testMACKey), Logger: log})
	signedDaemon.mustResolve(t, "app", resolve.PolicySpec{})
	signedDaemon.reg.Close()
	if strings.Contains(logs.String(), "not authenticated") {
		t.Errorf("a daemon with a key warned:\n%s", logs.String())
	}
	s.ResetCounts()
	plain := newSharedFixture(t, s, rs.Addr, RedisOptions{Logger: log})
	plain.mustResolve(t, "app", resolve.PolicySpec{})
	if s.Total() != 0 {
		t.Errorf("a daemon without a key did not read signed values: %s", describeCounts(s))
	}
	if n := strings.Count(logs.String(), "redis values are not authenticated"); n != 1 {
		t.Errorf("%d warnings that values are not authenticated, want 1:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), string(testMACKey)) {
		t.Error("the MAC key is in the logs")
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A decompression bomb is refused having cost its announced length at most,
// whether its MAC is right (a key holder wrote it) or there is no key: it never
// costs what it expands to.
func TestRedisDecompressionBombIsBounded(t *testing.T) {
	rs := redistest.Start(t)
	s := rt.New(t)
	pushTags(t, s, "app", "linux/amd64", "1.0.0", "1.1.0")
	d110 := s.Digest(t, "app", "1.1.0")
	tagKey := DefaultRedisKeyPrefix + redisValueFormat + ":" + LayerTags + ":" + resolve.RepoKey(mustRepo(t, s.Ref("app")))
	c := newRedisClient(t, rs.Addr)
	ctx := context.Background()
	bomb := rleBomb(8192, 'a') // 1 GiB
	cases := []struct {
		name      string
		key       []byte // the daemon's key and the bomb's MAC (nil: none)
		announced int64
		maxAlloc  uint64
	}{
		{"signed, announcing 10 bytes", testMACKey, 10, 32 << 20},
		{"signed, announcing 32 MiB", testMACKey, 32 << 20, 2*32<<20 + 32<<20},
		{"signed, announcing 1 GiB", testMACKey, gib, 32 << 20},
		{"signed, announcing over the decode budget", testMACKey, 80 << 20, 32 << 20}, // a tag list holds twice its size
		{"no key, announcing 10 bytes", nil, 10, 32 << 20},
		{"no key, announcing 1 GiB", nil, gib, 32 << 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			var ro RedisOptions
			if tc.key != nil {
				ro.MACKey = keyFunc(tc.key)
			}
			fill := newSharedFixture(t, s, rs.Addr, ro)
			fill.mustResolve(t, "app", resolve.PolicySpec{})
			fill.reg.Close()
			auth := byte(authNone)
			if tc.key != nil {
				auth = authHMAC
			}
			v := storedRaw('t', auth, nil, time.Hour, tc.announced, bomb)
			if tc.key != nil {
				v = signedRaw(tc.key, tagKey, v)
			}
			if err := c.Set(ctx, tagKey, v, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			s.ResetCounts()
			f := newSharedFixture(t, s, rs.Addr, ro)
			runtime.GC()
			var res *resolve.Result
			start := time.Now()
			mem := allocated(func() { res = f.mustResolve(t, "app", resolve.PolicySpec{}) })
			t.Logf("%d-byte value expanding to 1 GiB, announcing %d bytes: refused in %v, %.1f MiB allocated by the whole lookup",
				len(v), tc.announced, time.Since(start).Round(time.Millisecond), float64(mem)/(1<<20))
			if res.Tag != "1.1.0" || res.Digest != d110 {
				t.Errorf("resolved %s@%s, want 1.1.0@%s", res.Tag, res.Digest, d110)
			}
			if got := redisCount(f, rejectTooLarge, LayerTags); got != 1 {
				t.Errorf("too-large: %v, want 1; %s", got, redisAsked(f))
			}
			if want := map[rt.Kind]int{rt.Ping: 1, rt.Tags: 1}; !maps.Equal(s.Counts(), want) {
				t.Errorf("registry: %s, want %v", describeCounts(s), want)
			}
			if mem > tc.maxAlloc {
				t.Errorf("the lookup allocated %.0f MiB, want at most %d MiB", float64(mem)/(1<<20), tc.maxAlloc>>20)
			}
		})
	}
}
