package config

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Parsers of the values settings take: rate limits, sizes.

// ParseRateLimit parses HOST=RPS[:BURST]. BURST defaults to RPS rounded up.
func ParseRateLimit(v string) (resolve.RateLimit, error) {
	bad := func(err error) (resolve.RateLimit, error) {
		return resolve.RateLimit{}, &resolve.InputError{Value: v, Accepted: rateAccepted, Err: err}
	}
	host, spec, ok := strings.Cut(strings.TrimSpace(v), "=")
	if !ok {
		return bad(nil)
	}
	rpsS, burstS, hasBurst := strings.Cut(spec, ":")
	rps, err := strconv.ParseFloat(strings.TrimSpace(rpsS), 64)
	if err != nil || math.IsNaN(rps) || math.IsInf(rps, 0) || rps <= 0 {
		return bad(errors.New("RPS must be a number above 0"))
	}
	rl := resolve.RateLimit{Registry: strings.TrimSpace(host), RPS: rps, Burst: int(math.Ceil(rps))}
	if hasBurst {
		if rl.Burst, err = strconv.Atoi(strings.TrimSpace(burstS)); err != nil || rl.Burst < 1 {
			return bad(errors.New("BURST must be a whole number of at least 1"))
		}
	}
	if err := checkRateLimit(&rl); err != nil {
		return bad(err)
	}
	return rl, nil
}

// checkRateLimit checks and normalises the registry of a rate limit.
func checkRateLimit(rl *resolve.RateLimit) error {
	if rl.Registry == resolve.AnyRegistry {
		return nil
	}
	p, err := resolve.NormalisePrefix(rl.Registry)
	if err != nil {
		return fmt.Errorf("registry %q: %w", rl.Registry, err)
	}
	rl.Registry = p
	return nil
}

// EffectiveRateLimits are the daemon's buckets: RateLimits, plus the rateLimit of
// every registries entry whose prefix RateLimits does not name (rps with a burst of
// rps rounded up), plus DefaultRateLimits for the registries neither names.
func (c *Config) EffectiveRateLimits() []resolve.RateLimit {
	out := slices.Clone(c.RateLimits)
	for _, rc := range c.Registries {
		if rc.RateLimit <= 0 {
			continue
		}
		rl := resolve.RateLimit{Registry: rc.Prefix, RPS: rc.RateLimit, Burst: max(1, int(math.Ceil(rc.RateLimit)))}
		if checkRateLimit(&rl) != nil || slices.ContainsFunc(out, func(x resolve.RateLimit) bool { return x.Registry == rl.Registry }) {
			continue
		}
		out = append(out, rl)
	}
	// The built-in polite limits, for the registries the operator did not name.
	for _, rl := range DefaultRateLimits {
		if !slices.ContainsFunc(out, func(x resolve.RateLimit) bool { return x.Registry == rl.Registry }) {
			out = append(out, rl)
		}
	}
	return out
}

// mergeRateLimits sets rl's registry's limit in list.
func mergeRateLimits(list []resolve.RateLimit, rl resolve.RateLimit) []resolve.RateLimit {
	out := slices.Clone(list)
	if i := slices.IndexFunc(out, func(x resolve.RateLimit) bool { return x.Registry == rl.Registry }); i >= 0 {
		out[i] = rl
		return out
	}
	return append(out, rl)
}

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
	{"B", 1},
}

// ParseSize parses a byte size: 33554432, 32MiB, 512KiB, 1GiB, 100MB, 64Mi.
func ParseSize(v string) (int64, error) {
	s := strings.TrimSpace(v)
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f*float64(mult) > math.MaxInt64/2 {
		return 0, &resolve.InputError{Value: v, Accepted: sizeAccepted}
	}
	return int64(f * float64(mult)), nil
}

// FormatSize writes a byte size as ParseSize reads it.
func FormatSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatInt(n, 10)
}
