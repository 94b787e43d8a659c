package signature

import (
	"context"
	"sync"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// maxMemoryVerdicts bounds the in-memory verdict cache.
const maxMemoryVerdicts = 10_000

// MemoryCache is an in-memory resolve.VerdictCache with a TTL per verdict,
// holding at most 10,000 (expired ones are dropped first when full, then any).
// It is safe for concurrent use.
type MemoryCache struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]memVerdict
}

type memVerdict struct {
	v       resolve.Verdict
	expires time.Time
}

// NewMemoryCache returns an empty cache; now is its clock (nil: time.Now).
func NewMemoryCache(now func() time.Time) *MemoryCache {
	if now == nil {
		now = time.Now
	}
	return &MemoryCache{now: now, m: map[string]memVerdict{}}
}

// GetVerdict returns the verdict for key unless it expired.
func (c *MemoryCache) GetVerdict(_ context.Context, key string) (resolve.Verdict, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || !c.now().Before(e.expires) {
		return resolve.Verdict{}, false
	}
	return e.v, true
}

// SetVerdict keeps v for ttl.
func (c *MemoryCache) SetVerdict(_ context.Context, key string, v resolve.Verdict, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if _, ok := c.m[key]; !ok && len(c.m) >= maxMemoryVerdicts {
		for k, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < maxMemoryVerdicts {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[key] = memVerdict{v: v, expires: now.Add(ttl)}
}
