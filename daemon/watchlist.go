package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/notify"
)

// The watch list is what the refresh loop watches, kept across restarts: without
// it a restarted daemon would watch an app again only from its next render, and
// Argo CD, whose manifest cache outlives the restart, may not render it for a day.
// It is kept in Redis when the daemon has one (shared by the replicas, outliving
// the pod) and otherwise in a file beside the socket (outliving the container, not
// the pod). Apps with pin-mode use are not kept: their pins need the render's
// policy, and they are watched again from their next render.

// savedSource is one tracked source as kept.
type savedSource struct {
	App      string          `json:"app"`
	RepoURL  string          `json:"repoURL"`
	Path     string          `json:"path"`
	Revision string          `json:"revision,omitempty"`
	Rendered time.Time       `json:"rendered"`
	Images   []RenderedImage `json:"images"`
}

func (s savedSource) key() string { return s.App + "\x00" + s.RepoURL + "\x00" + s.Path }

// watchStore keeps saved sources by key.
type watchStore interface {
	// Put saves sources (replacing those of the same key) and deletes the keys in
	// gone.
	Put(ctx context.Context, put []savedSource, gone []string) error
	// Load returns every source kept.
	Load(ctx context.Context) ([]savedSource, error)
	// String says where, for logs.
	String() string
}

// fileStore keeps the watch list in one JSON file, rewritten whole (through a
// temporary file and a rename, so a crash leaves the old one).
type fileStore struct {
	path string
	mu   sync.Mutex
	all  map[string]savedSource // what the file holds
}

// watchFileName is the watch list's file, beside the daemon's socket (in the
// sidecar's /tmp emptyDir).
const watchFileName = "watched.json"

// watchFileFormat is the version of the file's layout.
const watchFileFormat = 1

type watchFile struct {
	Format  int           `json:"format"`
	Sources []savedSource `json:"sources"`
}

func newFileStore(path string) *fileStore { return &fileStore{path: path} }

func (f *fileStore) String() string { return "file " + f.path }

func (f *fileStore) Load(context.Context) ([]savedSource, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.all = map[string]savedSource{}
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var wf watchFile
	if err := json.Unmarshal(b, &wf); err != nil {
		return nil, fmt.Errorf("%s: %w", f.path, err)
	}
	if wf.Format != watchFileFormat {
		return nil, fmt.Errorf("%s: format %d, this daemon reads %d", f.path, wf.Format, watchFileFormat)
	}
	for _, s := range wf.Sources {
		f.all[s.key()] = s
	}
	return wf.Sources, nil
}

func (f *fileStore) Put(_ context.Context, put []savedSource, gone []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.all == nil {
		f.all = map[string]savedSource{}
	}
	for _, k := range gone {
		delete(f.all, k)
	}
	for _, s := range put {
		f.all[s.key()] = s
	}
	wf := watchFile{Format: watchFileFormat, Sources: make([]savedSource, 0, len(f.all))}
	for _, s := range f.all {
		wf.Sources = append(wf.Sources, s)
	}
	sort.Slice(wf.Sources, func(i, j int) bool { return wf.Sources[i].key() < wf.Sources[j].key() })
	b, err := json.Marshal(wf)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), ".watched-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), f.path)
}

// redisStore keeps the watch list in a hash of the shared Redis, one field per
// source; the hash expires forgetAfter after the last write, and fields older than
// that are dropped when it is read.
type redisStore struct {
	r   *cache.Redis
	ttl time.Duration
}

// watchListName is the Redis hash of the watch list.
const watchListName = "watched"

// redisBatch bounds the fields of one write, so that each stays within the
// client's short command timeout.
const redisBatch = 200

func (s *redisStore) String() string { return "redis" }

func (s *redisStore) Put(ctx context.Context, put []savedSource, gone []string) error {
	for len(put) > 0 || len(gone) > 0 {
		n, m := min(len(put), redisBatch), min(len(gone), redisBatch)
		set := make(map[string][]byte, n)
		for _, src := range put[:n] {
			b, err := json.Marshal(src)
			if err != nil {
				return err
			}
			set[src.key()] = b
		}
		if err := s.r.PutState(ctx, watchListName, set, gone[:m], s.ttl); err != nil {
			return err
		}
		put, gone = put[n:], gone[m:]
	}
	return nil
}

func (s *redisStore) Load(ctx context.Context) ([]savedSource, error) {
	m, err := s.r.State(ctx, watchListName)
	if err != nil {
		return nil, err
	}
	out := make([]savedSource, 0, len(m))
	for _, v := range m {
		var src savedSource
		if json.Unmarshal(v, &src) == nil && src.App != "" {
			out = append(out, src)
		}
	}
	return out, nil
}

// restore adds saved sources to the tracker, as if each had been rendered when it
// was: a source older than forgetAfter, or one the tracker has seen rendered since,
// is skipped. It returns the apps added and the keys of the sources skipped as too
// old (for the store to drop).
func (t *Tracker) restore(saved []savedSource) (apps int, stale []string) {
	// most recent first, each new app after every app the tracker has (rendered
	// since the start, so more recent): the order of eviction stays by recency
	saved = slices.Clone(saved)
	sort.SliceStable(saved, func(i, j int) bool { return saved[i].Rendered.After(saved[j].Rendered) })
	t.mu.Lock()
	defer t.mu.Unlock()
	cutoff := t.now().Add(-t.forgetAfter)
	for _, s := range saved {
		if s.Rendered.Before(cutoff) || len(s.Images) == 0 {
			stale = append(stale, s.key())
			continue
		}
		app, err := notify.ParseApp(s.App, t.namespace)
		if err != nil {
			stale = append(stale, s.key())
			continue
		}
		key := s.RepoURL + "\x00" + s.Path
		a, ok := t.apps[s.App]
		if ok {
			if cur, seen := a.sources[key]; seen && !cur.rendered.Before(s.Rendered) {
				continue
			}
		} else {
			a = &trackedApp{name: s.App, app: app, sources: map[string]*trackedSource{}}
			a.elem = t.order.PushBack(a)
			t.apps[s.App] = a
			apps++
		}
		if s.Rendered.After(a.rendered) {
			a.rendered = s.Rendered
		}
		images := append([]RenderedImage(nil), s.Images...)
		for i := range images {
			images[i].prepare()
		}
		a.sources[key] = &trackedSource{repoURL: s.RepoURL, path: s.Path, revision: s.Revision, images: images, rendered: s.Rendered, saved: s.Rendered}
	}
	for len(t.apps) > t.max {
		t.dropLocked(t.order.Back().Value.(*trackedApp), "limit")
	}
	t.gaugesLocked()
	sort.Strings(stale)
	return apps, stale
}

// changedSince returns what changed in the watch list since the last call: the
// sources to save and the keys of those gone.
func (t *Tracker) changedSince() (put []savedSource, gone []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.dirty {
		app, src, _ := cutSourceKey(k)
		a, ok := t.apps[app]
		var s *trackedSource
		if ok {
			s = a.sources[src]
		}
		if s == nil || s.pins != nil {
			gone = append(gone, k)
			continue
		}
		s.saved = s.rendered
		put = append(put, savedSource{App: app, RepoURL: s.repoURL, Path: s.path, Revision: s.revision,
			Rendered: s.rendered, Images: s.images})
	}
	clear(t.dirty)
	sort.Strings(gone)
	sort.Slice(put, func(i, j int) bool { return put[i].key() < put[j].key() })
	return put, gone
}

// markLocked notes that a source of app changed (added, updated or dropped).
func (t *Tracker) markLocked(app, sourceKey string) {
	if t.dirty == nil {
		t.dirty = map[string]struct{}{}
	}
	t.dirty[app+"\x00"+sourceKey] = struct{}{}
}

// markAppLocked notes that every source of a changed.
func (t *Tracker) markAppLocked(a *trackedApp) {
	for k := range a.sources {
		t.markLocked(a.name, k)
	}
}

// cutSourceKey splits a saved source's key into the app and the tracker's key of
// the source (repository and path).
func cutSourceKey(k string) (app, source string, ok bool) { return strings.Cut(k, "\x00") }

// watchSaver writes the watch list's changes to its store every period and when
// the daemon stops.
type watchSaver struct {
	t      *Tracker
	store  watchStore
	period time.Duration
	log    *slog.Logger
	failed bool          // the last write failed: logged once until one succeeds
	now    chan struct{} // asks run for a save before the period ends (saveNow)
}

// saveNow asks for a save at once, without waiting: when a shutdown begins, so
// that a restart keeps what changed even if the process is killed before it stops.
func (w *watchSaver) saveNow() {
	select {
	case w.now <- struct{}{}:
	default: // one is asked for already
	}
}

// watchSavePeriod is how often changes are written: a restart loses at most the
// renders of this long (they are watched again from their next render).
const watchSavePeriod = 10 * time.Second

// load restores the saved watch list into the tracker.
func (w *watchSaver) load(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	saved, err := w.store.Load(ctx)
	if err != nil {
		w.log.Warn("watch list not restored: apps are watched again from their next render", "store", w.store.String(), "err", err)
		return
	}
	apps, stale := w.t.restore(saved)
	if len(stale) > 0 {
		if err := w.store.Put(ctx, nil, stale); err != nil {
			w.log.Debug("stale watch list entries not dropped", "err", err)
		}
	}
	w.log.Info("watch list restored", "store", w.store.String(), "apps", apps, "sources", len(saved)-len(stale))
}

// run saves every period until ctx ends, then once more.
func (w *watchSaver) run(ctx context.Context) {
	t := time.NewTicker(w.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			w.save(sctx)
			cancel()
			return
		case <-t.C:
			w.save(ctx)
		case <-w.now:
			w.save(ctx)
		}
	}
}

// save writes what changed; what a failed write held is kept for the next.
func (w *watchSaver) save(ctx context.Context) {
	put, gone := w.t.changedSince()
	if len(put) == 0 && len(gone) == 0 {
		return
	}
	err := w.store.Put(ctx, put, gone)
	if err != nil {
		w.t.mu.Lock()
		for _, s := range put {
			w.t.markLocked(s.App, s.RepoURL+"\x00"+s.Path)
		}
		for _, k := range gone {
			app, src, _ := cutSourceKey(k)
			w.t.markLocked(app, src)
		}
		w.t.mu.Unlock()
		if !w.failed {
			w.log.Warn("watch list not saved: a restart would forget the apps rendered since (retrying)", "store", w.store.String(), "err", err)
		}
		w.failed = true
		return
	}
	if w.failed {
		w.log.Info("watch list saved again", "store", w.store.String())
	}
	w.failed = false
}
