package cache

import (
	"container/list"
	"sync"
)

// lru is a least-recently-used map bounded by the bytes its values hold. It has no
// time expiry: it holds content-addressed data (manifests and blobs by digest), which
// never goes stale. Safe for concurrent use.
type lru[V any] struct {
	mu       sync.Mutex
	maxBytes int64
	bytes    int64
	ll       *list.List // front: most recently used
	items    map[string]*list.Element
	sizeOf   func(key string, v V) int64
}

type lruItem[V any] struct {
	key  string
	val  V
	size int64
}

// lruOverhead approximates the bookkeeping bytes of one entry (map slot, list
// element, item header) on top of its key and value.
const lruOverhead = 160

func newLRU[V any](maxBytes int64, sizeOf func(string, V) int64) *lru[V] {
	return &lru[V]{maxBytes: maxBytes, ll: list.New(), items: map[string]*list.Element{}, sizeOf: sizeOf}
}

// get returns the value for key and marks it used.
func (c *lru[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.ll.MoveToFront(el)
		return el.Value.(*lruItem[V]).val, true
	}
	var zero V
	return zero, false
}

// add stores a value, evicting the least recently used entries until the cache fits
// its bound. A value larger than the whole bound is not stored. It returns how many
// entries were evicted.
func (c *lru[V]) add(key string, v V) int {
	size := c.sizeOf(key, v) + int64(len(key)) + lruOverhead
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		it := el.Value.(*lruItem[V])
		c.bytes += size - it.size
		it.val, it.size = v, size
		c.ll.MoveToFront(el)
	} else {
		if size > c.maxBytes {
			return 0
		}
		c.items[key] = c.ll.PushFront(&lruItem[V]{key: key, val: v, size: size})
		c.bytes += size
	}
	evicted := 0
	for c.bytes > c.maxBytes {
		el := c.ll.Back()
		if el == nil {
			break
		}
		it := el.Value.(*lruItem[V])
		c.ll.Remove(el)
		delete(c.items, it.key)
		c.bytes -= it.size
		evicted++
	}
	return evicted
}

// stats returns the number of entries and the bytes they are accounted for.
func (c *lru[V]) stats() (entries int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items), c.bytes
}
