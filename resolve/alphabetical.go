package resolve

import (
	"context"
	"slices"
	"strings"
)

// alphabetical orders tags by byte order, the last one first.
type alphabetical struct{}

func (alphabetical) order(ctx context.Context, tags []string, _ metaFunc) ([]string, []Rejection, error) {
	out := slices.Clone(tags)
	if err := sortStopping(ctx, "sorting tags", out, func(a, b string) int { return strings.Compare(b, a) }); err != nil {
		return nil, nil, err
	}
	return out, nil, nil
}
