package resolve

import (
	"context"
	"slices"
	"strings"
)

// alphabetical orders tags by byte order, the last one first.
type alphabetical struct{}

func (alphabetical) order(_ context.Context, tags []string, _ metaFunc) ([]string, []Rejection, error) {
	out := slices.Clone(tags)
	slices.SortFunc(out, func(a, b string) int { return strings.Compare(b, a) })
	return out, nil, nil
}
