package cache

import "sync"

// memStore is a layer's memory that lruGet reads and fills: an lru, or the facts
// layer's, which holds its values in a form of its own.
type memStore[V any] interface {
	get(key string) (V, bool)
	add(key string, v V) int
}

// lru is a least-recently-used map bounded by the bytes its values hold. It has no
// time expiry: it holds content-addressed data (manifests and blobs by digest), which
// never goes stale. Safe for concurrent use.
//
// Its items are linked to one another directly (no container/list element, with
// its interface-typed value, beside each): an LRU holds one item per manifest and
// per image config of the view, 20,000 of each in a large one.
type lru[V any] struct {
	mu       sync.Mutex
	maxBytes int64
	bytes    int64
	root     lruItem[V] // sentinel: root.next is the most recently used, root.prev the least
	items    map[string]*lruItem[V]
	sizeOf   func(key string, v V) int64
}

// lruItem is an entry. Its size is not kept but computed again when it is
// replaced or evicted (sizeOf is a function of key and value): the facts layer
// holds two entries per tag, and without the field its item fits the 96-byte
// size class rather than 112.
type lruItem[V any] struct {
	prev, next *lruItem[V]
	key        string
	val        V
}

// lruOverhead approximates the bookkeeping bytes of one entry (map slot, item
// header) on top of its key and value. It decides how many entries a bound holds,
// so it stays what it was when a list element was counted in it too.
const lruOverhead = 160

func newLRU[V any](maxBytes int64, sizeOf func(string, V) int64) *lru[V] {
	c := &lru[V]{maxBytes: maxBytes, items: map[string]*lruItem[V]{}, sizeOf: sizeOf}
	c.root.prev, c.root.next = &c.root, &c.root
	return c
}

// unlink takes it out of the recency list.
func (c *lru[V]) unlink(it *lruItem[V]) {
	it.prev.next, it.next.prev = it.next, it.prev
	it.prev, it.next = nil, nil
}

// pushFront links it as the most recently used.
func (c *lru[V]) pushFront(it *lruItem[V]) {
	it.prev, it.next = &c.root, c.root.next
	c.root.next.prev = it
	c.root.next = it
}

// get returns the value for key and marks it used.
func (c *lru[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if it, ok := c.items[key]; ok {
		c.unlink(it)
		c.pushFront(it)
		return it.val, true
	}
	var zero V
	return zero, false
}

// add stores a value, evicting the least recently used entries until the cache fits
// its bound. A value larger than the whole bound is not stored. It returns how many
// entries were evicted.
func (c *lru[V]) add(key string, v V) int {
	size := c.size(key, v)
	c.mu.Lock()
	defer c.mu.Unlock()
	if it, ok := c.items[key]; ok {
		c.bytes += size - c.size(it.key, it.val)
		it.val = v
		c.unlink(it)
		c.pushFront(it)
	} else {
		if size > c.maxBytes {
			return 0
		}
		it := &lruItem[V]{key: key, val: v}
		c.items[key] = it
		c.pushFront(it)
		c.bytes += size
	}
	evicted := 0
	for c.bytes > c.maxBytes {
		it := c.root.prev
		if it == &c.root {
			break
		}
		c.unlink(it)
		delete(c.items, it.key)
		c.bytes -= c.size(it.key, it.val)
		evicted++
	}
	return evicted
}

// size is what an entry is accounted for.
func (c *lru[V]) size(key string, v V) int64 {
	return c.sizeOf(key, v) + int64(len(key)) + lruOverhead
}

// stats returns the number of entries and the bytes they are accounted for.
func (c *lru[V]) stats() (entries int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items), c.bytes
}
