package daemon

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// Pushes announced by registry webhooks (package webhook) or by another replica
// through Redis: the repository's tag list is read again at once and the apps
// that use it are re-resolved and refreshed, without waiting for the tag TTL
// (docs/freshness.md). A push to a repository no app uses and no tag list holds
// costs no registry request and no pass.

// push is one push announced: a repository (registry host and path; the host is
// "" when the sender does not say) and the tag pushed ("" when not known).
type push struct {
	kind                      string // the webhook's kind ("" from another replica)
	registry, repository, tag string
	at                        time.Time // when it was announced
}

// pushQueue gathers the repositories announced pushed until the worker takes
// them, so that a burst of events costs one revalidation and one pass per
// repository.
type pushQueue struct {
	mu      sync.Mutex
	pending map[string]*pendingPush // by resolve.RepoKey
	busy    bool                    // a batch taken is being handled
	wake    chan struct{}
}

// pendingPush is what is known of the pushes of one repository waiting.
type pendingPush struct {
	at   time.Time // the earliest announcement
	tags map[string]struct{}
}

func newPushQueue() *pushQueue {
	return &pushQueue{pending: map[string]*pendingPush{}, wake: make(chan struct{}, 1)}
}

// maxPendingTags bounds the tags remembered per repository waiting; past it
// only the tag list is read again.
const maxPendingTags = 64

func (q *pushQueue) add(repoKeys []string, tag string, at time.Time) {
	q.mu.Lock()
	for _, k := range repoKeys {
		p := q.pending[k]
		if p == nil {
			p = &pendingPush{at: at, tags: map[string]struct{}{}}
			q.pending[k] = p
		}
		if at.Before(p.at) {
			p.at = at
		}
		if tag != "" && len(p.tags) < maxPendingTags {
			p.tags[tag] = struct{}{}
		}
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *pushQueue) take() map[string]*pendingPush {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.pending
	q.pending = map[string]*pendingPush{}
	q.busy = true
	return p
}

// done says the batch taken last was handled.
func (q *pushQueue) done() {
	q.mu.Lock()
	q.busy = false
	q.mu.Unlock()
}

// pushed handles a push: it finds the repositories it names among those the
// tracked apps use and the tag lists cached, queues them, and (announce) tells
// the other replicas. It reports whether any is used here; it does not wait for
// the registry.
func (d *Daemon) pushed(ctx context.Context, p push, announce bool) bool {
	if w, ok := d.cfg.Webhooks[p.kind]; ok && w.Registry != "" {
		p.registry = w.Registry // the host the apps name, where the sender's is another
	}
	p.registry, p.repository = normalisePushed(p.registry, p.repository)
	if announce && d.shared != nil {
		actx, cancel := context.WithTimeout(ctx, announceTimeout)
		if err := d.shared.AnnouncePush(actx, encodePush(p)); err != nil {
			d.log.Warn("push not announced to the other replicas", "repository", p.repository, "err", err)
		}
		cancel()
	}
	keys := d.pushedRepos(p)
	if len(keys) == 0 {
		return false
	}
	d.pushes.add(keys, p.tag, p.at)
	return true
}

// announceTimeout bounds telling the other replicas of a push.
const announceTimeout = 2 * time.Second

// pushedRepos are the repositories (by resolve.RepoKey) a push names that this
// daemon uses: in a tracked app's image, or with a tag list cached.
func (d *Daemon) pushedRepos(p push) []string {
	match := func(repoKey string) bool {
		host, path, _ := strings.Cut(repoKey, "/")
		return path == p.repository && (p.registry == "" || host == p.registry)
	}
	var keys []string
	if d.Tracker != nil {
		keys = d.Tracker.repos(match)
	}
	if p.registry != "" {
		if k := p.registry + "/" + p.repository; d.Registry.TagsCached(k) && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// normalisePushed spells a pushed repository as resolve.RepoKey does: Docker
// Hub's hosts as docker.io, its official images under library/.
func normalisePushed(registry, repository string) (string, string) {
	registry = strings.ToLower(registry)
	switch registry {
	case name.DefaultRegistry, "registry-1.docker.io", "docker.io", "hub.docker.com":
		registry = "docker.io"
		if !strings.Contains(repository, "/") {
			repository = "library/" + repository
		}
	}
	return registry, strings.Trim(repository, "/")
}

// runPushes revalidates the repositories pushed and checks their apps, one
// batch at a time, until ctx ends.
func (d *Daemon) runPushes(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.pushes.wake:
		}
		d.handlePushed(ctx, d.pushes.take())
		d.pushes.done()
	}
}

// handlePushed revalidates a batch of repositories pushed, then checks the apps
// that use them.
func (d *Daemon) handlePushed(ctx context.Context, batch map[string]*pendingPush) {
	d.revalidatePushed(ctx, batch)
	if d.Refresher == nil || ctx.Err() != nil {
		return
	}
	earliest := time.Time{}
	for _, p := range batch {
		if earliest.IsZero() || p.at.Before(earliest) {
			earliest = p.at
		}
	}
	d.Refresher.PassPushed(ctx, func(repoKey string) bool { return batch[repoKey] != nil }, earliest)
}

// revalidatePushed reads again the tag lists of the repositories pushed (and the
// digests of the tags pushed that this daemon holds), a few at a time.
func (d *Daemon) revalidatePushed(ctx context.Context, batch map[string]*pendingPush) {
	sem := make(chan struct{}, passParallelism)
	var wg sync.WaitGroup
	for key, p := range batch {
		repo, err := name.NewRepository(key, name.WeakValidation)
		if err != nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rctx, cancel := context.WithTimeout(ctx, d.cfg.FetchTimeout)
			defer cancel()
			if err := d.Registry.RevalidateTags(rctx, repo, p.at); err != nil {
				d.log.Warn("pushed repository: tag list not read again", "repository", key, "err", err)
			}
			for tag := range p.tags {
				if err := d.Registry.RevalidateHead(rctx, repo, tag, p.at); err != nil {
					d.log.Warn("pushed tag: digest not read again", "repository", key, "tag", tag, "err", err)
				}
			}
		})
	}
	wg.Wait()
}

// pushFormat versions the notices of pushes between replicas.
const pushFormat = "p1"

// encodePush is a push as announced to the other replicas.
func encodePush(p push) string {
	return strings.Join([]string{pushFormat, strconv.FormatInt(p.at.UnixNano(), 10), p.registry, p.repository, p.tag}, "\x01")
}

// decodePush reads a push another replica announced; the time is taken no later
// than now (the clocks of two pods may differ).
func decodePush(s string, now time.Time) (push, error) {
	f := strings.Split(s, "\x01")
	if len(f) != 5 || f[0] != pushFormat {
		return push{}, fmt.Errorf("push notice: want %s with 5 fields", pushFormat)
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return push{}, fmt.Errorf("push notice: time %q: %w", f[1], err)
	}
	at := time.Unix(0, ns)
	if at.After(now) {
		at = now
	}
	if _, err := name.NewRepository(f[3], name.WeakValidation); err != nil || f[3] == "" {
		return push{}, fmt.Errorf("push notice: repository %q is not a repository path", f[3])
	}
	return push{registry: f[2], repository: f[3], tag: f[4], at: at}, nil
}

// heardPush handles a push another replica announced.
func (d *Daemon) heardPush(msg string) {
	p, err := decodePush(msg, d.Registry.Now())
	if err != nil {
		d.log.Warn("ignoring a push notice of another replica", "err", err)
		return
	}
	d.pushed(d.life, p, false)
}
