package resolve

import "context"

// orderer puts the tags a strategy accepts in order, best first. It is the one small
// interface every strategy implements (one file per strategy), after Flux's policy
// package; unlike Flux's Latest it returns an order, because the platform check may
// reject the best tag and the walk must go on down the list.
type orderer interface {
	// order returns the accepted tags best first, and for each tag it does not
	// accept, why (for --explain).
	order(ctx context.Context, tags []string, meta metaFunc) (ordered []string, rejected []Rejection, err error)
}

// metaFunc returns what is known of a set of tags; strategies that order by build
// time call it for every candidate, concurrently and all or nothing.
type metaFunc func(ctx context.Context, tags []string) (map[string]*TagInfo, error)
