package compose

import (
	"log/slog"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/config"
)

// NewRedis builds the shared tier of the configuration c, recording into m; nil
// when redis.address is empty. Redis being unreachable is not an error (the
// daemon goes on without it and joins when it answers); bad TLS, password or MAC
// key files are.
func NewRedis(c config.Config, m *cache.Metrics, log *slog.Logger) (*cache.Redis, error) {
	r := c.Redis
	if r.Address == "" {
		return nil, nil
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	tc, err := r.TLSConfig()
	if err != nil {
		return nil, err
	}
	var macKey func() ([]byte, error)
	if r.MACKeyFile != "" {
		macKey = r.MACKey
	}
	return cache.NewRedis(cache.RedisOptions{
		Addr:         r.Address,
		Username:     r.Username,
		Password:     r.Password,
		TLS:          tc,
		KeyPrefix:    r.KeyPrefix,
		DialTimeout:  r.DialTimeout,
		Timeout:      r.Timeout,
		ContentTTL:   r.ContentTTL,
		Logger:       log,
		MACKey:       macKey,
		DecodeMemory: r.DecodeMemory,
		MaxReply:     r.MaxReply,
	}, m)
}
