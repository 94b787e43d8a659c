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
//	byte 1     layer: 't' tag list, 'h' descriptor, 'm' manifest, 'b' blob
//	uvarint    the TTL the writer gave the key, in milliseconds (0 for content by
//	           digest): with the key's remaining TTL it gives the value's age
//	           without comparing clocks of different pods
//	rest       zstd frame of the payload:
//	           tag list:   tags joined by "\n" (tags never contain one)
//	           descriptor: digest "\n" media type "\n" size
//	           manifest:   media type "\n" manifest bytes
//	           blob:       the blob's bytes
//
// decode checks all of it: a value of another version or layer, a tag outside the
// OCI grammar, a digest that does not parse, or content whose sha256 is not the
// digest it is stored under is an error, and the caller fetches the key again.

const redisVersion = 1

// maxRedisValue bounds a value after decompression: a tag list at the largest
// tagListMaxTags (500,000 tags of up to 128 bytes) fits.
const maxRedisValue = 96 << 20

var (
	zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithLowerEncoderMem(true))
		if err != nil {
			panic(err) // only for bad options
		}
		return e
	})
	zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxRedisValue), zstd.WithDecoderLowmem(true))
		if err != nil {
			panic(err)
		}
		return d
	})
)

// valueCodec turns one layer's values into Redis values and back.
type valueCodec[V any] struct {
	layer byte
	// payload returns what is stored, false when the value must not be shared
	// (content whose digest cannot be checked).
	payload func(key string, v V) ([]byte, bool)
	// parse reads and checks a payload stored under key.
	parse func(key string, p []byte) (V, error)
}

var errMalformed = errors.New("malformed value")

func (c valueCodec[V]) encode(key string, v V, ttl time.Duration) ([]byte, bool) {
	p, ok := c.payload(key, v)
	if !ok {
		return nil, false
	}
	hdr := binary.AppendUvarint([]byte{redisVersion, c.layer}, uint64(max(ttl.Milliseconds(), 0)))
	return zstdEncoder().EncodeAll(p, hdr), true
}

func (c valueCodec[V]) decode(key string, raw []byte) (V, time.Duration, error) {
	var zero V
	if len(raw) < 3 {
		return zero, 0, fmt.Errorf("%w: %d bytes", errMalformed, len(raw))
	}
	if raw[0] != redisVersion {
		return zero, 0, fmt.Errorf("%w: format version %d, want %d", errMalformed, raw[0], redisVersion)
	}
	if raw[1] != c.layer {
		return zero, 0, fmt.Errorf("%w: layer %q, want %q", errMalformed, raw[1], c.layer)
	}
	ms, n := binary.Uvarint(raw[2:])
	if n <= 0 || ms > uint64(365*24*time.Hour/time.Millisecond) {
		return zero, 0, fmt.Errorf("%w: bad TTL", errMalformed)
	}
	p, err := zstdDecoder().DecodeAll(raw[2+n:], nil)
	if err != nil {
		return zero, 0, fmt.Errorf("%w: %v", errMalformed, err)
	}
	v, err := c.parse(key, p)
	if err != nil {
		return zero, 0, fmt.Errorf("%w: %v", errMalformed, err)
	}
	return v, time.Duration(ms) * time.Millisecond, nil
}

var tagsCodec = valueCodec[[]string]{
	layer: 't',
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
	payload: func(_ string, h headVal) ([]byte, bool) {
		return fmt.Appendf(nil, "%s\n%s\n%d", h.digest(), h.mediaType, h.size), true
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
