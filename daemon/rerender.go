package daemon

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/pipeline"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// A render again of an app and revision this daemon rendered is a hard refresh:
// Argo CD keeps a plugin's output per commit (24h), so only a hard refresh (the
// UI's button, argocd app get --hard-refresh, the refresh loop's own request) or
// a lost cache runs the plugin again for the same revision. A person who pushes a
// tag and presses Hard refresh expects the new tag, so such a render first reads
// again the tag lists the app used (and, for the digest strategy, its tag's
// digest); a storm of hard refreshes costs one list per repository per
// revalidateAfter (docs/freshness.md).

// revalidateAfter is how long a hard refresh's read of a tag list answers the
// hard refreshes after it.
const revalidateAfter = 5 * time.Second

// revalidateTimeout bounds a hard refresh's revalidation: past it the render
// goes on with the cached answers (the fetch goes on for the next render).
const revalidateTimeout = 10 * time.Second

// renderedRevisions remembers, per app, source and revision rendered, what the
// render read: bounded in entries and age. It also remembers when a hard refresh
// last revalidated each repository.
type renderedRevisions struct {
	mu     sync.Mutex
	max    int
	window time.Duration
	order  *list.List // of *renderedRevision, most recent at the front
	byKey  map[string]*list.Element
	// revalidated is when a hard refresh last revalidated a repository (and tag):
	// renders within revalidateAfter of it take what it read.
	revalidated map[string]time.Time
}

// maxRevalidated bounds the repositories whose last revalidation is kept;
// past it, those older than revalidateAfter are dropped.
const maxRevalidated = 4096

// revalidating returns the time the list of key must have been read at or after
// for a hard refresh at now: the last hard refresh's revalidation if it was less
// than revalidateAfter ago (a storm costs one read), else now, recorded as the
// repository's revalidation. Reads of the refresh loop or of other renders do not
// count: one of them just before a push would hide it from a person's hard
// refresh.
func (m *renderedRevisions) revalidating(key string, now time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if at, ok := m.revalidated[key]; ok && now.Sub(at) < revalidateAfter && !at.After(now) {
		return at
	}
	if len(m.revalidated) >= maxRevalidated {
		for k, at := range m.revalidated {
			if now.Sub(at) >= revalidateAfter {
				delete(m.revalidated, k)
			}
		}
	}
	if len(m.revalidated) < maxRevalidated {
		m.revalidated[key] = now
	}
	return now
}

// renderedRevision is one app's source at one revision, and what its last
// render read.
type renderedRevision struct {
	key   string
	at    time.Time
	reads []revalidation
}

// revalidation is a repository a render read, and the tag whose digest it read
// ("" for none: only the tag list).
type revalidation struct {
	repo name.Repository
	tag  string
}

func newRenderedRevisions(max int, window time.Duration) *renderedRevisions {
	return &renderedRevisions{max: max, window: window, order: list.New(), byKey: map[string]*list.Element{}, revalidated: map[string]time.Time{}}
}

// revisionKey names what Argo CD caches a render by, as far as the plugin sees
// it; "" for a render that is not of a commit of a named app.
func revisionKey(env *plugin.Env) string {
	if env == nil || env.Streamed || env.AppName == "" || env.Revision == "" {
		return ""
	}
	return env.AppName + "\x00" + env.SourceRepoURL + "\x00" + env.SourcePath + "\x00" + env.Revision
}

// seen returns what the last render of env's app and revision read, when it
// was rendered within the window.
func (m *renderedRevisions) seen(env *plugin.Env, now time.Time) ([]revalidation, bool) {
	key := revisionKey(env)
	if key == "" {
		return nil, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byKey[key]
	if !ok {
		return nil, false
	}
	r := e.Value.(*renderedRevision)
	if now.Sub(r.at) > m.window {
		return nil, false
	}
	return r.reads, true
}

// remember records what a render of env read (report's substitutions).
func (m *renderedRevisions) remember(env *plugin.Env, report *pipeline.Report, now time.Time) {
	key := revisionKey(env)
	if key == "" || report == nil {
		return
	}
	var reads []revalidation
	for _, s := range report.Substitutions {
		img, err := resolve.ParseImage(s.Request.Image)
		if err != nil {
			continue
		}
		rv := revalidation{repo: img.Repo}
		if st, _, err := resolve.ParseStrategy(s.Request.Policy.Strategy); err == nil && st == resolve.Digest {
			rv.tag = s.Request.Policy.Constraint
		}
		if !containsRead(reads, rv) {
			reads = append(reads, rv)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.byKey[key]; ok {
		r := e.Value.(*renderedRevision)
		r.at, r.reads = now, reads
		m.order.MoveToFront(e)
		return
	}
	m.byKey[key] = m.order.PushFront(&renderedRevision{key: key, at: now, reads: reads})
	for m.order.Len() > m.max {
		old := m.order.Remove(m.order.Back()).(*renderedRevision)
		delete(m.byKey, old.key)
	}
}

func containsRead(reads []revalidation, rv revalidation) bool {
	for _, r := range reads {
		if resolve.RepoKey(r.repo) == resolve.RepoKey(rv.repo) && r.tag == rv.tag {
			return true
		}
	}
	return false
}

// beforeRender revalidates, for a render again of an app and revision (a hard
// refresh), what its last render read, when older than revalidateAfter. A
// registry that fails leaves the cached answers to the render, as without it.
func (d *Daemon) beforeRender(ctx context.Context, env *plugin.Env) {
	now := d.Registry.Now()
	reads, again := d.revisions.seen(env, now)
	if !again {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, revalidateTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, rv := range reads {
		since := d.revisions.revalidating(resolve.RepoKey(rv.repo)+":"+rv.tag, now)
		wg.Go(func() {
			if err := d.Registry.RevalidateTags(ctx, rv.repo, since); err != nil {
				d.log.Info("hard refresh: tag list not read again; the cached one answers", "app", env.AppName, "repository", resolve.RepoKey(rv.repo), "err", err)
			}
			if rv.tag != "" {
				if err := d.Registry.RevalidateHead(ctx, rv.repo, rv.tag, since); err != nil {
					d.log.Info("hard refresh: digest not read again; the cached one answers", "app", env.AppName, "repository", resolve.RepoKey(rv.repo), "tag", rv.tag, "err", err)
				}
			}
		})
	}
	wg.Wait()
}
