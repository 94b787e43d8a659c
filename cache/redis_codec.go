package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unique"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// How values are stored in Redis:
//
//	byte 0     format version (redisVersion)
//	byte 1     layer: 't' tag list, 'h' descriptor, 'm' manifest, 'b' blob,
//	           'v' signature verdict
//	byte 2     authentication: 0 none, 1 HMAC-SHA256
//	32 bytes   the HMAC-SHA256, when byte 2 is 1 (redis_mac.go: of the Redis key
//	           and of the value without these 32 bytes)
//	uvarint    the TTL the writer gave the key, in milliseconds (0 for content by
//	           digest): with the key's remaining TTL it gives the value's age
//	           without comparing clocks of different pods
//	uvarint    when it was written, Unix milliseconds by the writer's clock: a
//	           value with a TTL read more than its TTL (and maxClockSkew) after
//	           is a replay of an old value (its MAC is right, its answer old)
//	uvarint    the payload's length, decompressed
//	rest       zstd frame of the payload:
//	           tag list:   tags joined by "\n" (tags never contain one)
//	           descriptor: digest "\n" media type "\n" size
//	           manifest:   media type "\n" manifest bytes
//	           blob:       the blob's bytes
//	           verdict:    JSON
//
// A value is read in this order, each step refusing it before the next costs
// anything: its header; its MAC (when the daemon has a key); its announced length
// against the bound of one value and the process's decode budget (redis_decode.go);
// then it is decompressed into exactly that many bytes (a frame that holds more
// is refused when it has given one byte more); then its payload is checked: a
// tag outside the OCI grammar, a digest that does not parse, or content whose
// sha256 is not the digest it is stored under is an error, and the caller
// fetches the key again.

const redisVersion = 2

// Authentication byte of a value.
const (
	authNone = 0
	authHMAC = 1
	macAt    = 3 // offset of the MAC in a value that has one
)

// maxRedisValue bounds a value after decompression: a tag list at the largest
// tagListMaxTags (500,000 tags of up to 128 bytes) fits.
const maxRedisValue = 96 << 20

// zstdWindow is the window of the frames the tier writes and the largest a decoder
// accepts, so that a decoder holds at most that much history whatever a frame
// says.
const zstdWindow = 1 << 20

var zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithLowerEncoderMem(true), zstd.WithWindowSize(zstdWindow))
	if err != nil {
		panic(err) // only for bad options
	}
	return e
})

// valueCodec turns one layer's values into Redis values and back.
type valueCodec[V any] struct {
	layer byte
	// payload returns what is stored, false when the value must not be shared
	// (content whose digest cannot be checked).
	payload func(key string, v V) ([]byte, bool)
	// parse reads and checks a payload stored under key.
	parse func(key string, p []byte) (V, error)
	// copies is how many times its payload's size parsing holds besides the
	// payload (a tag list's strings are a copy), for the decode budget.
	copies int64
	// max bounds the payload (0: maxRedisValue).
	max int64
}

// maxSize is the largest payload of the layer.
func (c valueCodec[V]) maxSize() int64 {
	if c.max > 0 {
		return c.max
	}
	return maxRedisValue
}

var errMalformed = errors.New("malformed value")

// encode returns the value stored for v, with room for a MAC when signed (the
// caller fills it); false when v is not shared or its payload is over
// maxRedisValue.
func (c valueCodec[V]) encode(key string, v V, ttl time.Duration, signed bool) ([]byte, bool) {
	p, ok := c.payload(key, v)
	if !ok || int64(len(p)) > c.maxSize() {
		return nil, false
	}
	hdr := make([]byte, 0, 3+macSize+2*binary.MaxVarintLen64)
	hdr = append(hdr, redisVersion, c.layer, authNone)
	if signed {
		hdr[2] = authHMAC
		hdr = append(hdr, make([]byte, macSize)...)
	}
	hdr = binary.AppendUvarint(hdr, uint64(max(ttl.Milliseconds(), 0)))
	hdr = binary.AppendUvarint(hdr, uint64(max(time.Now().UnixMilli(), 0)))
	hdr = binary.AppendUvarint(hdr, uint64(len(p)))
	return zstdEncoder().EncodeAll(p, hdr), true
}

// storedValue is a value's header, read without decompressing it.
type storedValue struct {
	layer  byte
	hasMAC bool
	ttl    time.Duration
	at     time.Time // when it was written, by the writer's clock
	size   int64     // the payload's length, decompressed
	body   []byte    // the zstd frame
}

// split reads a value's header.
func split(raw []byte) (storedValue, error) {
	if len(raw) < 5 {
		return storedValue{}, fmt.Errorf("%w: %d bytes", errMalformed, len(raw))
	}
	if raw[0] != redisVersion {
		return storedValue{}, fmt.Errorf("%w: format version %d, want %d", errMalformed, raw[0], redisVersion)
	}
	sv := storedValue{layer: raw[1]}
	rest := raw[3:]
	switch raw[2] {
	case authNone:
	case authHMAC:
		if len(rest) < macSize {
			return storedValue{}, fmt.Errorf("%w: %d bytes", errMalformed, len(raw))
		}
		sv.hasMAC, rest = true, rest[macSize:]
	default:
		return storedValue{}, fmt.Errorf("%w: authentication %d", errMalformed, raw[2])
	}
	ms, n := binary.Uvarint(rest)
	if n <= 0 || ms > uint64(365*24*time.Hour/time.Millisecond) {
		return storedValue{}, fmt.Errorf("%w: bad TTL", errMalformed)
	}
	at, m := binary.Uvarint(rest[n:])
	if m <= 0 || at > 1<<50 {
		return storedValue{}, fmt.Errorf("%w: bad write time", errMalformed)
	}
	n += m
	size, m := binary.Uvarint(rest[n:])
	if m <= 0 || size > 1<<40 {
		return storedValue{}, fmt.Errorf("%w: bad length", errMalformed)
	}
	sv.ttl, sv.at, sv.size, sv.body = time.Duration(ms)*time.Millisecond, time.UnixMilli(int64(at)), int64(size), rest[n+m:]
	return sv, nil
}

var tagsCodec = valueCodec[[]string]{
	layer:  't',
	copies: 1,
	payload: func(_ string, tags []string) ([]byte, bool) {
		return []byte(strings.Join(tags, "\n")), true
	},
	parse: func(_ string, p []byte) ([]string, error) {
		if len(p) == 0 {
			return nil, nil
		}
		tags := strings.Split(string(p), "\n")
		for i, t := range tags {
			if err := resolve.CheckTag(t); err != nil {
				return nil, fmt.Errorf("tag %d: %v", i, err)
			}
		}
		return tags, nil
	},
}

var headCodec = valueCodec[headVal]{
	layer: 'h',
	max:   1 << 10, // a digest, a media type of up to 255 bytes and a size
	payload: func(_ string, h headVal) ([]byte, bool) {
		return fmt.Appendf(nil, "%s\n%s\n%d", h.digest(), h.mediaType(), h.size), true
	},
	parse: func(_ string, p []byte) (headVal, error) {
		parts := strings.Split(string(p), "\n")
		if len(parts) != 3 {
			return headVal{}, fmt.Errorf("descriptor of %d fields, want 3", len(parts))
		}
		d, err := parseDigest(parts[0])
		if err != nil {
			return headVal{}, err
		}
		if err := checkMediaType(parts[1]); err != nil {
			return headVal{}, err
		}
		size, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil || size < 0 {
			return headVal{}, fmt.Errorf("size %q", parts[2])
		}
		return newHeadVal(d, types.MediaType(parts[1]), size), nil
	},
}

var manifestCodec = valueCodec[*resolve.Manifest]{
	layer: 'm',
	payload: func(key string, m *resolve.Manifest) ([]byte, bool) {
		if !digestOf(key, m.Raw) || m.Digest.String() != key || checkMediaType(string(m.MediaType)) != nil {
			return nil, false
		}
		return append([]byte(string(m.MediaType)+"\n"), m.Raw...), true
	},
	parse: func(key string, p []byte) (*resolve.Manifest, error) {
		mt, raw, ok := bytes.Cut(p, []byte("\n"))
		if !ok {
			return nil, errors.New("no media type")
		}
		if err := checkMediaType(string(mt)); err != nil {
			return nil, err
		}
		if !digestOf(key, raw) {
			return nil, errors.New("bytes do not match their digest")
		}
		d, err := parseDigest(key)
		if err != nil {
			return nil, err
		}
		return &resolve.Manifest{Digest: d, MediaType: types.MediaType(unique.Make(string(mt)).Value()), Raw: raw}, nil
	},
}

var blobCodec = valueCodec[[]byte]{
	layer: 'b',
	payload: func(key string, b []byte) ([]byte, bool) {
		return b, digestOf(key, b)
	},
	parse: func(key string, p []byte) ([]byte, error) {
		if !digestOf(key, p) {
			return nil, errors.New("bytes do not match their digest")
		}
		return p, nil
	},
}

// digestOf reports whether b's sha256 is the digest "sha256:<hex>" (other
// algorithms are not shared).
func digestOf(digest string, b []byte) bool {
	hexPart, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexPart) != sha256.Size*2 {
		return false
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]) == hexPart
}

func parseDigest(s string) (v1.Hash, error) {
	if err := resolve.CheckDigest(s); err != nil {
		return v1.Hash{}, fmt.Errorf("digest %q: %v", s, err)
	}
	return v1.NewHash(s)
}

// checkMediaType accepts what a registry's Content-Type can be: printable ASCII,
// up to 255 bytes (empty: the registry sent none).
func checkMediaType(s string) error {
	if len(s) > 255 {
		return fmt.Errorf("media type of %d bytes", len(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return fmt.Errorf("media type %q", s)
		}
	}
	return nil
}
