package forge

import "errors"

// newGitea is being written (issue 23); until then the kind is refused.
func newGitea(cfg Config) (Forge, error) {
	return nil, errors.New("forge kind gitea: not built yet")
}
