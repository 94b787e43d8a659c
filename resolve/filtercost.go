package resolve

import (
	"fmt"
)

// DefaultTagFilterMaxCost bounds the estimated cost of matching a policy's
// filters over a tag list: each filter's size (a regular expression's compiled
// instructions, a glob's length) times the bytes of the tags, summed. Matching
// costs about 0.01 to 12 ns per unit (measured on Go 1.26 over 128-byte tags,
// the worst for nested stars such as (([a-z0-9]*)*[a-z]){10}$), so the default
// is at most about 3 s of one core.
const DefaultTagFilterMaxCost = 250_000_000

// WithTagFilterMaxCost sets the bound of the estimated cost of matching a
// policy's filters over a tag list (default DefaultTagFilterMaxCost); a
// resolution past it is refused before any tag is matched. n <= 0 keeps the
// default.
func WithTagFilterMaxCost(n int) ResolverOption {
	return func(r *Resolver) {
		if n > 0 {
			r.filterMaxCost = n
		}
	}
}

// coster is a TagMatcher whose matching costs about cost() units per byte of a tag.
type coster interface{ cost() int }

func matcherCost(m TagMatcher) int {
	if c, ok := m.(coster); ok {
		return c.cost()
	}
	return 0
}

// filterCost is the estimated cost of matching p's filters over tags of total
// bytes, and the costliest filter with the field it belongs to.
func (p *Policy) filterCost(bytes int) (total int, worst TagMatcher, field PolicyField) {
	worst, field = p.allow, FieldAllowTags
	total = matcherCost(p.allow) * bytes
	for _, m := range p.ignore {
		c := matcherCost(m)
		total += c * bytes
		if c > matcherCost(worst) {
			worst, field = m, FieldIgnoreTags
		}
	}
	return total, worst, field
}

// tagBytes is the bytes of tags, all together.
func tagBytes(tags []string) int {
	n := 0
	for _, t := range tags {
		n += len(t)
	}
	return n
}

// checkFilterCost refuses, before matching any, a policy whose filters would cost
// more than the bound over tags, naming the costliest filter.
func (r *Resolver) checkFilterCost(p *Policy, image string, tags []string) error {
	bytes := tagBytes(tags)
	total, worst, field := p.filterCost(bytes)
	if total <= r.filterMaxCost {
		return nil
	}
	size := fmt.Sprintf("%d characters", matcherCost(worst))
	if _, ok := worst.(regexpMatcher); ok {
		size = fmt.Sprintf("%d instructions", matcherCost(worst))
	}
	return &InputError{Field: string(field), Policy: field, Value: worst.String(),
		Err: fmt.Errorf("%s: matching it (%s) over the %d tags of the repository (%d bytes) would cost %d, over the bound of %d",
			image, size, len(tags), bytes, total, r.filterMaxCost),
		Accepted: fmt.Sprintf("filters whose size times the bytes of the tags is at most %d (setting tagFilterMaxCost): "+
			"here at most %d instructions or glob characters in all; narrow the expression or use a glob", r.filterMaxCost, r.filterMaxCost/max(bytes, 1))}
}
