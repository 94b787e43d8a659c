package resolve

import (
	"context"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// semverStrategy orders tags by semantic version, highest first. A v prefix is
// allowed. Pre-releases count only when the constraint itself names one (Masterminds'
// rule); with no constraint, pre-releases are left out. Equal versions (1.2 and v1.2.0)
// break ties by tag string, greater first.
type semverStrategy struct {
	c   *semver.Constraints
	raw string
}

func (s semverStrategy) order(ctx context.Context, tags []string, _ metaFunc) ([]string, []Rejection, error) {
	type tv struct {
		tag string
		v   *semver.Version
	}
	var ok []tv
	var rejected []Rejection
	stop := newStopper(ctx)
	for i, t := range tags {
		if stop.step() {
			return nil, nil, stop.err("parsing semantic versions", i, len(tags))
		}
		v, err := semver.NewVersion(t)
		switch {
		case err != nil:
			rejected = append(rejected, Rejection{Tag: t, Reason: "not a semantic version"})
		case s.c == nil && v.Prerelease() != "":
			rejected = append(rejected, Rejection{Tag: t, Reason: "pre-release; name one in the constraint to allow pre-releases"})
		case s.c != nil && !s.c.Check(v):
			rejected = append(rejected, Rejection{Tag: t, Reason: "outside constraint " + s.raw})
		default:
			ok = append(ok, tv{t, v})
		}
	}
	err := sortStopping(ctx, "sorting semantic versions", ok, func(a, b tv) int {
		if c := b.v.Compare(a.v); c != 0 {
			return c
		}
		return strings.Compare(b.tag, a.tag)
	})
	if err != nil {
		return nil, nil, err
	}
	out := make([]string, len(ok))
	for i, x := range ok {
		out[i] = x.tag
	}
	return out, rejected, nil
}
