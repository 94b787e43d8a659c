package forge

import "errors"

// newGitLab is being written (issue 23); until then the kind is refused.
func newGitLab(cfg Config) (Forge, error) {
	return nil, errors.New("forge kind gitlab: not built yet")
}
