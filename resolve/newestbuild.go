package resolve

import (
	"context"
	"strings"
)

// newestBuild orders tags by build time (the image config's created, or the OCI
// org.opencontainers.image.created annotation when present), newest first; equal
// times go to the lexically greater tag. Every candidate's time is needed, so the
// metadata of all of them is read (concurrently, by digest); if any cannot be read
// the order fails rather than ranking the rest.
type newestBuild struct{}

func (newestBuild) order(ctx context.Context, tags []string, meta metaFunc) ([]string, []Rejection, error) {
	infos, err := meta(ctx, tags)
	if err != nil {
		return nil, nil, err
	}
	var out []string
	var rejected []Rejection
	stop := newStopper(ctx)
	for i, t := range tags {
		if stop.step() {
			return nil, nil, stop.err("reading build times", i, len(tags))
		}
		if infos[t].Created.IsZero() {
			rejected = append(rejected, Rejection{Tag: t, Reason: "no build time in its config or annotations"})
			continue
		}
		out = append(out, t)
	}
	err = sortStopping(ctx, "sorting build times", out, func(a, b string) int {
		if c := infos[b].Created.Compare(infos[a].Created); c != 0 {
			return c
		}
		return strings.Compare(b, a)
	})
	if err != nil {
		return nil, nil, err
	}
	return out, rejected, nil
}
