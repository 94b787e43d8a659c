package pin

import (
	"context"
	"fmt"

	git "github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
)

// BranchTip returns the commit branch's tip is at on repoURL ("" or HEAD: the
// default branch), with the writer's credentials: one listing of the
// repository's references, nothing fetched. The daemon uses it to see a pull
// request's merge land on the branch an app renders.
func (w *Writer) BranchTip(ctx context.Context, repoURL, branch string) (string, error) {
	var auth transport.AuthMethod
	if w.auth != nil {
		a, err := w.auth(repoURL)
		if err != nil {
			return "", &gitError{is: errs(ErrCredentials, err), msg: fmt.Sprintf("git repository %s: credentials: %v", redactURL(repoURL), err)}
		}
		auth = a
	}
	rem := newRemote(repoURL, auth)
	r := git.NewRemote(memory.NewStorage(), &gitconfig.RemoteConfig{Name: "origin", URLs: []string{repoURL}})
	t := &target{remote: rem}
	tips, def, aerr := t.tips(ctx, r)
	if aerr != nil {
		return "", aerr.err
	}
	b := normalizeBranch(branch)
	if b == defaultBranch {
		b = def
	}
	tip, ok := tips[b]
	if !ok {
		return "", &gitError{is: []error{ErrBranchNotFound}, msg: fmt.Sprintf("git repository %s has no branch %q", rem.shown, b)}
	}
	return tip.String(), nil
}
