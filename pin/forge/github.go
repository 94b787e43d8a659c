package forge

import "errors"

// newGitHub is being written (issue 23); until then the kind is refused.
func newGitHub(cfg Config) (Forge, error) {
	return nil, errors.New("forge kind github: not built yet")
}
