package cache

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// The heads layer holds one entry per tag: its size is the layer's memory.
func TestHeadEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(headVal{}); n != 48 {
		t.Errorf("headVal is %d bytes, want 48", n)
	}
	if n := unsafe.Sizeof(entry[headVal]{}); n != 80 {
		t.Errorf("entry[headVal] is %d bytes, want 80 (a size class of its own: 96 past it)", n)
	}
}

func TestTTLStoreExpiresAsGoCacheDid(t *testing.T) {
	s := newTTLStore[int](30*time.Millisecond, false)
	s.set("k", &entry[int]{val: 1})
	if e := s.get("k"); e == nil || e.val != 1 {
		t.Fatalf("get = %v, want the entry", e)
	}
	time.Sleep(60 * time.Millisecond)
	if e := s.get("k"); e != nil {
		t.Fatalf("get after expiry = %v, want none", e)
	}
	if n := s.ItemCount(); n != 1 {
		t.Fatalf("ItemCount = %d before the janitor ran, want 1 (expired entries count until deleted)", n)
	}
	s.deleteExpired()
	if n := s.ItemCount(); n != 0 {
		t.Fatalf("ItemCount = %d after deleteExpired, want 0", n)
	}

	never := newTTLStore[int](0, false)
	never.set("k", &entry[int]{val: 2})
	never.deleteExpired()
	if e := never.get("k"); e == nil {
		t.Fatal("an entry of a store without expiry expired")
	}
}

func TestTTLStoreGroupedKeys(t *testing.T) {
	s := newTTLStore[string](time.Hour, true)
	keys := []string{"registry:5000/org/app:1.0.0", "registry:5000/org/app:1.0.1", "registry:5000/org/app", "registry:5000/org/app:",
		"registry/org/app:1.0.0", "no-colon", ":lead", "", "a:b:c"}
	for _, k := range keys {
		s.set(k, &entry[string]{val: k})
	}
	if n := s.ItemCount(); n != len(keys) {
		t.Fatalf("ItemCount = %d, want %d", n, len(keys))
	}
	for _, k := range keys {
		if e := s.get(k); e == nil || e.val != k {
			t.Errorf("get(%q) = %v, want its own entry", k, e)
		}
	}
	s.set(keys[0], &entry[string]{val: "again"})
	if n := s.ItemCount(); n != len(keys) {
		t.Fatalf("ItemCount = %d after replacing an entry, want %d", n, len(keys))
	}
	for _, k := range keys {
		s.delete(k)
		s.delete(k) // deleting what is gone is a no-op
	}
	if n := s.ItemCount(); n != 0 || len(s.groups) != 0 {
		t.Fatalf("ItemCount = %d, %d groups after deleting every key, want none", n, len(s.groups))
	}
	s.set(keys[0], &entry[string]{val: keys[0]})
	s.Flush()
	if s.get(keys[0]) != nil || s.ItemCount() != 0 {
		t.Fatal("Flush left an entry")
	}
}

// A key kept must not pin the string it was cut from (a request's, say).
func TestTTLStoreKeepsCopiesOfKeys(t *testing.T) {
	big := strings.Repeat("x", 1<<10) + "registry/org/app:1.0.0"
	key := big[1<<10:]
	s := newTTLStore[int](time.Hour, true)
	s.set(key, &entry[int]{})
	within := func(str string) bool {
		p, b := uintptr(unsafe.Pointer(unsafe.StringData(str))), uintptr(unsafe.Pointer(unsafe.StringData(big)))
		return p >= b && p < b+uintptr(len(big))
	}
	for p, g := range s.groups {
		if within(p) {
			t.Error("the group's key is a part of the caller's string")
		}
		for sfx := range g {
			if within(sfx) {
				t.Error("the tag kept is a part of the caller's string")
			}
		}
	}
}

func TestEntryStateKeepsExpiryAndRefreshMark(t *testing.T) {
	var e entry[int]
	e.setExpiry(1001) // odd: rounded up
	if e.expiredAt(1002) || !e.expiredAt(1003) {
		t.Fatalf("expiry 1001 (kept as 1002): expiredAt(1002) %v, expiredAt(1003) %v", e.expiredAt(1002), e.expiredAt(1003))
	}
	if !e.startRefresh() || e.startRefresh() {
		t.Fatal("startRefresh must succeed once")
	}
	if e.expiredAt(1002) || !e.expiredAt(1003) {
		t.Fatal("the refresh mark moved the expiry")
	}
	e.cancelRefresh()
	if !e.startRefresh() {
		t.Fatal("startRefresh after cancelRefresh failed")
	}
	var never entry[int]
	never.setExpiry(0)
	never.startRefresh()
	if never.expiredAt(1 << 62) {
		t.Fatal("an entry without expiry expired once marked as refreshing")
	}
}

func TestJanitorDeletesExpiredUntilDone(t *testing.T) {
	s := newTTLStore[int](time.Millisecond, false)
	done := make(chan struct{})
	defer close(done)
	janitor(s, 5*time.Millisecond, done)
	s.set("k", &entry[int]{})
	deadline := time.Now().Add(5 * time.Second)
	for s.ItemCount() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the janitor did not delete an expired entry")
		}
		time.Sleep(5 * time.Millisecond)
	}

	stopped := newTTLStore[int](time.Millisecond, false)
	closed := make(chan struct{})
	close(closed)
	janitor(stopped, 20*time.Millisecond, closed)
	stopped.set("k", &entry[int]{})
	time.Sleep(200 * time.Millisecond)
	if stopped.ItemCount() != 1 {
		t.Fatal("the janitor ran after done was closed")
	}
}

func TestKeepManifestSharesItsKey(t *testing.T) {
	d := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	raw := make([]byte, 10, 200)
	m := &resolve.Manifest{Digest: v1.Hash{Algorithm: strings.Clone(d.Algorithm), Hex: strings.Clone(d.Hex)},
		MediaType: types.MediaType(strings.Clone(string(types.OCIManifestSchema1))), Raw: raw}
	key := d.String()
	if got := keepManifest(m, key); got != key {
		t.Fatalf("keepManifest = %q, want %q", got, key)
	}
	if m.Digest != d {
		t.Fatalf("digest %v, want %v", m.Digest, d)
	}
	if unsafe.StringData(m.Digest.Hex) != unsafe.StringData(key[len("sha256:"):]) {
		t.Error("the digest's hex is a copy of the key's")
	}
	if spare := cap(m.Raw) - len(m.Raw); spare > 64 {
		t.Errorf("raw keeps %d spare bytes", spare)
	}
	other := types.MediaType(strings.Clone(string(types.OCIManifestSchema1)))
	if unsafe.StringData(string(m.MediaType)) != unsafe.StringData(string(resolve.InternMediaType(other))) {
		t.Error("the media type is not interned")
	}
}

// The LRU's own list against a model of it: the same entries, in the same order
// of use, evicted in the same order, whatever is added, replaced and read.
func TestLRUMatchesModel(t *testing.T) {
	size := func(_ string, v int) int64 { return int64(v) }
	c := newLRU(2000, size)
	var model []string // most recently used first
	vals := map[string]int{}
	var modelBytes int64
	cost := func(k string, v int) int64 { return int64(v) + int64(len(k)) + lruOverhead }
	touch := func(k string) {
		for i, m := range model {
			if m == k {
				model = append(model[:i], model[i+1:]...)
				break
			}
		}
		model = append([]string{k}, model...)
	}
	rnd := uint64(1)
	next := func(n int) int {
		rnd = rnd*6364136223846793005 + 1442695040888963407
		return int(rnd>>33) % n
	}
	for step := range 5000 {
		k := fmt.Sprint(next(40))
		if next(3) == 0 {
			got, ok := c.get(k)
			want, had := vals[k]
			if ok != had || got != want {
				t.Fatalf("step %d: get(%s) = %d %v, want %d %v", step, k, got, ok, want, had)
			}
			if had {
				touch(k)
			}
			continue
		}
		v := next(400)
		if old, had := vals[k]; had {
			modelBytes += cost(k, v) - cost(k, old)
			touch(k)
		} else if cost(k, v) <= 2000 {
			modelBytes += cost(k, v)
			model = append([]string{k}, model...)
		} else {
			continue
		}
		vals[k] = v
		wantEvicted := 0
		for modelBytes > 2000 && len(model) > 0 {
			last := model[len(model)-1]
			model = model[:len(model)-1]
			modelBytes -= cost(last, vals[last])
			delete(vals, last)
			wantEvicted++
		}
		if got := c.add(k, v); got != wantEvicted {
			t.Fatalf("step %d: add(%s) evicted %d, want %d", step, k, got, wantEvicted)
		}
		if n, b := c.stats(); n != len(model) || b != modelBytes {
			t.Fatalf("step %d: %d entries, %d bytes; want %d, %d", step, n, b, len(model), modelBytes)
		}
	}
	// The list, walked both ways, is the model's order.
	i := 0
	for it := c.root.next; it != &c.root; it = it.next {
		if it.key != model[i] || it.next.prev != it {
			t.Fatalf("list position %d holds %s, want %s", i, it.key, model[i])
		}
		i++
	}
}
