package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/semaphore"
)

// Decompression is bounded per value and per process. Each value announces its
// decompressed length (authenticated with the rest when the daemon has a key);
// before anything is decompressed, that length (times the copies parsing makes,
// plus a decoder's history) is taken from the tier's decode budget, a weighted
// semaphore of DecodeMemory bytes: a value over the budget is refused
// (too-large), and a decode that cannot get its bytes within the lookup's wait
// (the command timeout, at most its context) is a miss (busy). Then the frame is
// decompressed by a streaming decoder into a buffer of exactly that length; a
// frame that holds more is refused as soon as it gives one byte more, so a
// decompression bomb costs its announced length and a little CPU, never what it
// expands to.

// DefaultRedisDecodeMemory is the default decode budget of the tier.
const DefaultRedisDecodeMemory = 64 << 20

// decoderMemory is what a decoder in use holds besides its output: its history
// (at most zstdWindow, as decoders refuse larger windows) and two blocks.
const decoderMemory = zstdWindow + 2*128<<10

// maxIdleDecoders bounds the decoders kept between decodes.
const maxIdleDecoders = 4

var (
	errTooLarge   = errors.New("too large")
	errBudgetBusy = errors.New("decode budget busy")
)

// decodeBudget is the bytes values may take while being decoded, process-wide
// (one tier per daemon), and the decoders.
type decodeBudget struct {
	size int64
	sem  *semaphore.Weighted
	wait time.Duration
	idle chan *zstd.Decoder

	inUse, peak atomic.Int64 // bytes taken now and at most (for tests)
}

func newDecodeBudget(size int64, wait time.Duration) *decodeBudget {
	return &decodeBudget{size: size, sem: semaphore.NewWeighted(size), wait: wait, idle: make(chan *zstd.Decoder, maxIdleDecoders)}
}

// acquire takes n bytes of the budget: at once, or waiting at most the budget's
// wait within ctx. errTooLarge: n is more than the whole budget; errBudgetBusy:
// not within the wait.
func (b *decodeBudget) acquire(ctx context.Context, n int64) error {
	if n > b.size {
		return fmt.Errorf("%w: decoding takes %d bytes, over the decode budget of %d bytes (setting redis.decodeMemory)", errTooLarge, n, b.size)
	}
	if !b.sem.TryAcquire(n) {
		wctx, cancel := context.WithTimeout(ctx, b.wait)
		defer cancel()
		if err := b.sem.Acquire(wctx, n); err != nil {
			return fmt.Errorf("%w: %d bytes not free within %s (setting redis.decodeMemory)", errBudgetBusy, n, b.wait)
		}
	}
	now := b.inUse.Add(n)
	for p := b.peak.Load(); now > p && !b.peak.CompareAndSwap(p, now); p = b.peak.Load() {
	}
	return nil
}

func (b *decodeBudget) release(n int64) {
	b.inUse.Add(-n)
	b.sem.Release(n)
}

// onlyReader hides bytes.Reader's Bytes, with which the zstd decoder would
// decompress a small input whole instead of into the caller's buffer.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func (b *decodeBudget) decoder() *zstd.Decoder {
	select {
	case d := <-b.idle:
		return d
	default:
	}
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(zstdWindow), zstd.WithDecoderMaxMemory(maxRedisValue))
	if err != nil {
		panic(err) // only for bad options
	}
	return d
}

func (b *decodeBudget) putDecoder(d *zstd.Decoder) {
	_ = d.Reset(nil) // drops the input
	select {
	case b.idle <- d:
	default:
		d.Close()
	}
}

// decompress returns the size bytes frame holds: errTooLarge when it holds more,
// an error when fewer or when it is not zstd.
func (b *decodeBudget) decompress(frame []byte, size int64) ([]byte, error) {
	d := b.decoder()
	defer b.putDecoder(d)
	if err := d.Reset(onlyReader{bytes.NewReader(frame)}); err != nil {
		return nil, err
	}
	p := make([]byte, size)
	if _, err := io.ReadFull(d, p); err != nil {
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
			return nil, fmt.Errorf("%w: %v", errTooLarge, err)
		}
		return nil, fmt.Errorf("decompressing %d bytes: %w", size, err)
	}
	var one [1]byte
	switch n, err := io.ReadFull(d, one[:]); {
	case n > 0:
		return nil, fmt.Errorf("%w: the frame holds more than the %d bytes announced", errTooLarge, size)
	case err != io.EOF:
		return nil, fmt.Errorf("after %d bytes: %w", size, err)
	}
	return p, nil
}

// encodeFor returns the value stored for v under the Redis key rkey: signed when
// the daemon has a key; false when v is not shared, or is larger than a daemon
// with this one's bounds would read back.
func encodeFor[V any](r *Redis, c valueCodec[V], rkey, key string, v V, ttl time.Duration) ([]byte, bool) {
	raw, ok := c.encode(key, v, ttl, r.keys.on())
	if !ok || int64(len(raw)) > r.maxWrite() {
		return nil, false
	}
	sv, err := split(raw)
	if err != nil || decodeCost(c, sv.size) > r.budget.size {
		return nil, false
	}
	if r.keys.on() {
		r.keys.sign(rkey, raw)
	}
	return raw, true
}

// decodeCost is what decoding a payload of size bytes takes of the budget.
func decodeCost[V any](c valueCodec[V], size int64) int64 {
	return size*(1+c.copies) + decoderMemory
}

// decodeFrom reads the value raw stored under the Redis key rkey (key in the
// layer), returning it and the TTL it was written with; or why it is refused
// (a reject* reason) and the error.
func decodeFrom[V any](ctx context.Context, r *Redis, c valueCodec[V], rkey, key string, raw []byte) (V, time.Duration, string, error) {
	var zero V
	sv, err := split(raw)
	if err == nil && sv.layer != c.layer {
		err = fmt.Errorf("%w: layer %q, want %q", errMalformed, sv.layer, c.layer)
	}
	if err != nil {
		return zero, 0, rejectCorrupt, err
	}
	if reason := r.keys.check(rkey, raw, sv.hasMAC); reason != "" {
		return zero, 0, reason, fmt.Errorf("value without a valid MAC (%s)", reason)
	}
	if age := time.Since(sv.at); sv.ttl > 0 && age > sv.ttl+maxClockSkew {
		return zero, 0, rejectReplayed, fmt.Errorf("written %s ago with a TTL of %s", age.Round(time.Second), sv.ttl)
	}
	if sv.size > c.maxSize() {
		return zero, 0, rejectTooLarge, fmt.Errorf("payload of %d bytes announced, over the %d a %q value may hold", sv.size, c.maxSize(), c.layer)
	}
	cost := decodeCost(c, sv.size)
	if err := r.budget.acquire(ctx, cost); err != nil {
		if errors.Is(err, errTooLarge) {
			return zero, 0, rejectTooLarge, err
		}
		return zero, 0, rejectBusy, err
	}
	defer r.budget.release(cost)
	p, err := r.budget.decompress(sv.body, sv.size)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			return zero, 0, rejectTooLarge, err
		}
		return zero, 0, rejectCorrupt, fmt.Errorf("%w: %v", errMalformed, err)
	}
	v, err := c.parse(key, p)
	if err != nil {
		return zero, 0, rejectCorrupt, fmt.Errorf("%w: %v", errMalformed, err)
	}
	return v, sv.ttl, "", nil
}

// rejected counts and logs a value read and not served; the caller fetches it
// again (and overwrites it).
func (r *Redis) rejected(layer, key, reason string, err error) {
	r.m.rejected.WithLabelValues(layer, reason).Inc()
	if reason == rejectBusy { // the daemon's load, not the value: no line per lookup
		r.log.Debug("redis value not decoded: decode budget busy; fetching it", "layer", layer, "key", key, "err", err)
		return
	}
	r.log.Warn("ignoring a value in redis; fetching it again", "layer", layer, "key", key, "reason", reason, "err", err)
}
