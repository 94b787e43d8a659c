package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/notify"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
)

// NormalRefresher asks Argo CD to look at an app's source again, as its git
// poll would (notify.Kubernetes.NormalRefresh).
type NormalRefresher interface {
	NormalRefresh(ctx context.Context, app notify.App) (requested bool, err error)
}

// BranchTipper names the commit a branch is at (pin.Writer.BranchTip).
type BranchTipper interface {
	BranchTip(ctx context.Context, repoURL, branch string) (string, error)
}

// Refresh outcomes of the landing of pins.
const (
	outcomePinLanded = "pin-landed" // a normal refresh asked after a pin commit or a merge landed
)

// maxWatchedBases bounds the base branches watched for merges of pull requests.
const maxWatchedBases = 256

// landings asks Argo CD for a normal refresh of the apps that render a branch
// once the resolver's pins land on it: at once after a direct push, and after a
// merge of its pull request, which it sees as the base branch moving (one
// listing of the repository's references per watched branch per pass). Without
// it Argo CD renders the commit at its next git poll (3 minutes by default)
// where no push webhook is configured.
type landings struct {
	notifier NormalRefresher
	tips     BranchTipper
	tracker  *Tracker
	m        *Metrics
	now      func() time.Time
	watchFor time.Duration

	mu    sync.Mutex
	bases map[[2]string]*watchedBase // repo, branch
}

type watchedBase struct {
	tip   string    // the base's commit when last seen
	until time.Time // watched until (renewed by each write of its pull requests)
}

// written is the pin writer's WithOnWritten: a direct push landed (refresh
// now), or pull requests were opened or updated (watch their base).
func (l *landings) written(repo, branch string, res pin.Result) {
	if res.Pushed {
		go l.refreshBranch(context.Background(), repo, res.Branch)
	}
	for _, pr := range res.PullRequests {
		if pr.Action == pin.PRNotReopened {
			continue
		}
		l.mu.Lock()
		w := l.bases[[2]string{repo, branch}]
		if w == nil && len(l.bases) < maxWatchedBases {
			w = &watchedBase{tip: pr.BaseCommit}
			l.bases[[2]string{repo, branch}] = w
		}
		if w != nil {
			w.until = l.now().Add(l.watchFor)
		}
		l.mu.Unlock()
	}
}

// check looks at each watched base once: one that moved had a merge (or
// another commit) land, and the apps that render it are asked to refresh.
func (l *landings) check(ctx context.Context) {
	l.mu.Lock()
	now := l.now()
	type item struct {
		key [2]string
		tip string
	}
	var items []item
	for k, w := range l.bases {
		if now.After(w.until) {
			delete(l.bases, k)
			continue
		}
		items = append(items, item{k, w.tip})
	}
	l.mu.Unlock()
	for _, it := range items {
		tip, err := l.tips.BranchTip(ctx, it.key[0], it.key[1])
		if err != nil || tip == it.tip {
			continue
		}
		l.mu.Lock()
		if w := l.bases[it.key]; w != nil {
			w.tip = tip
		}
		l.mu.Unlock()
		l.refreshBranch(ctx, it.key[0], it.key[1])
	}
}

// refreshBranch asks a normal refresh of every tracked app that renders
// branch of repo ("" for the default branch).
func (l *landings) refreshBranch(ctx context.Context, repo, branch string) {
	for _, app := range l.tracker.appsOnBranch(repo, branch) {
		requested, err := l.notifier.NormalRefresh(ctx, app)
		if err == nil && requested {
			l.m.Refreshes.WithLabelValues(outcomePinLanded).Inc()
		}
	}
}

// appsOnBranch lists the tracked pin-mode use apps that render branch of repo
// ("" for the default branch) and keep their pins there.
func (t *Tracker) appsOnBranch(repo, branch string) []notify.App {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []notify.App
	for _, a := range t.apps {
		for _, s := range a.sources {
			if p := s.pins; p != nil && p.rendered && p.repoURL == repo && p.branch == branch {
				out = append(out, a.app)
				break
			}
		}
	}
	return out
}
