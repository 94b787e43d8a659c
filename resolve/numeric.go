package resolve

import (
	"cmp"
	"context"
	"strings"
)

// numeric orders tags that are non-negative integers, largest first; equal numbers
// (7 and 007) break ties by tag string, greater first.
type numeric struct{}

func (numeric) order(ctx context.Context, tags []string, _ metaFunc) ([]string, []Rejection, error) {
	type tn struct {
		tag string
		n   uint64
	}
	var ok []tn
	var rejected []Rejection
	stop := newStopper(ctx)
	for i, t := range tags {
		if stop.step() {
			return nil, nil, stop.err("parsing integers", i, len(tags))
		}
		if n, isNum := parseNumeric(t); isNum {
			ok = append(ok, tn{t, n})
		} else {
			rejected = append(rejected, Rejection{Tag: t, Reason: "not an integer"})
		}
	}
	err := sortStopping(ctx, "sorting integers", ok, func(a, b tn) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
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
