package resolve

import (
	"context"
	"slices"
)

// digestStrategy follows one tag (the constraint) and pins it to its current digest.
type digestStrategy struct{ tag string }

func (d digestStrategy) order(_ context.Context, tags []string, _ metaFunc) ([]string, []Rejection, error) {
	if slices.Contains(tags, d.tag) {
		return []string{d.tag}, nil, nil
	}
	return nil, nil, nil
}
