package plugin

import isuggest "github.com/argocd-image-resolver/argocd-image-resolver/internal/suggest"

// suggest returns `; did you mean "x"?` for the closest candidate, or "" when none is
// close enough or the closest is s itself (internal/suggest, shared with config).
func suggest(s string, candidates []string) string { return isuggest.DidYouMean(s, candidates) }
