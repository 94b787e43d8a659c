package resolve

import (
	"context"
	"slices"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	"golang.org/x/sync/errgroup"
)

// inspector reads the metadata (platforms, creation time) of a resolution's tags,
// at most the Resolver's bound at once per registry host. A strategy that needs
// every candidate's metadata (newest-build) starts it page by page while the tag list
// is still being read, so a cold resolution does not wait for the last page before
// its first manifest read.
type inspector struct {
	r     *Resolver
	repo  name.Repository
	p     *Policy
	ctx   context.Context
	stop  context.CancelFunc
	g     *errgroup.Group
	slots chan struct{}
	// width is how many of this resolution's inspections run at once, within
	// the slots.
	width *inspectWidth
	// idle hands a tag to a worker waiting for one (unbuffered); noMore is
	// closed when meta has started every tag, and the idle workers end.
	idle   chan string
	noMore chan struct{}
	ended  sync.Once

	mu      sync.Mutex
	started map[string]struct{}
	infos   map[string]*TagInfo
	// platformSets are the distinct platform sets of the tags inspected: the
	// tags of one image mostly share one, which their infos then share too.
	platformSets [][]Platform
	// listedBytes is the bytes of the tags of the pages seen so far.
	listedBytes int
	pages       sync.WaitGroup // page starts in progress
}

func (r *Resolver) newInspector(ctx context.Context, repo name.Repository, p *Policy) *inspector {
	ctx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	return &inspector{r: r, repo: repo, p: p, ctx: gctx, stop: stop, g: g,
		slots: r.inspectSlots(repo.RegistryStr()), width: newInspectWidth(r.concurrency), idle: make(chan string), noMore: make(chan struct{}),
		started: map[string]struct{}{}, infos: map[string]*TagInfo{}}
}

// page starts, in the background, the inspection of a listed page's tags that the
// policy allows (a tagPages observer).
// Its work over the page stops with the resolution's context or waiter, and it
// matches no more pages once the tags listed so far are past the filters' cost
// bound (the resolution refuses the policy when the list is read).
func (in *inspector) page(tags []string) {
	in.width.page()
	in.mu.Lock()
	in.listedBytes += tagBytes(tags)
	cost, _, _ := in.p.filterCost(in.listedBytes)
	in.mu.Unlock()
	if cost > in.r.filterMaxCost {
		return
	}
	var allowed []string
	stop := newStopper(in.ctx)
	for _, t := range tags {
		if stop.step() {
			return
		}
		if ociTagOK(t) && !IsArtifactTag(t) {
			if ok, _ := in.p.allowed(t); ok {
				allowed = append(allowed, t)
			}
		}
	}
	in.pages.Add(1)
	go func() {
		defer in.pages.Done()
		in.start(allowed)
	}()
}

// start inspects the tags not started yet, each as soon as it has a slot; it
// returns when each has one, or the inspection stopped. A tag goes to a worker
// that finished its last one and waits, else to a new worker: a resolution's
// thousand tags are inspected by about as many goroutines as run at once, whose
// stacks have grown to the depth of a registry request once, not by a goroutine
// each growing its stack again (BenchmarkColdNewestBuildCPU's profile: stack
// growth 6% of the client's CPU before, 1.4% after).
func (in *inspector) start(tags []string) {
	for _, t := range tags {
		in.mu.Lock()
		_, seen := in.started[t]
		in.started[t] = struct{}{}
		in.mu.Unlock()
		if seen {
			continue
		}
		if !in.width.acquire(in.ctx) {
			return // an inspection failed, or the caller left
		}
		select {
		case in.slots <- struct{}{}:
		case <-in.ctx.Done():
			in.width.release()
			return
		}
		select {
		case in.idle <- t:
		default:
			in.g.Go(func() error { return in.work(t) })
		}
	}
}

// work inspects t, then each tag handed to it, until no more are to come, the
// inspection stopped or one failed. Each holds a slot, released when done.
func (in *inspector) work(t string) error {
	for {
		if err := in.inspect(t); err != nil {
			return err
		}
		select {
		case t = <-in.idle:
		case <-in.noMore:
			return nil
		case <-in.ctx.Done():
			return nil
		}
	}
}

// inspect reads t's metadata, holding the token and the slot start took for it.
func (in *inspector) inspect(t string) error {
	defer func() {
		<-in.slots
		in.width.release()
	}()
	info, err := inspect(in.ctx, in.r.reg, in.repo, t, true, in.p.platforms)
	if err != nil {
		return err
	}
	in.mu.Lock()
	info.Platforms = in.shared(info.Platforms)
	in.infos[t] = info
	in.mu.Unlock()
	return nil
}

// maxPlatformSets bounds the platform sets an inspector shares: past it, a new
// set is kept by its tag alone, as before.
const maxPlatformSets = 16

// shared returns the platform set equal to ps that an earlier tag of the
// resolution kept, else keeps ps (capped, so that an append copies it) for the
// next. A cold newest-build over 10,000 tags holds every tag's info until it
// ranks them; sharing drops 10,000 slices and the strings decoded into them
// from the peak (BenchmarkNewestBuildMemoryGrowth). Call it with in.mu held.
func (in *inspector) shared(ps []Platform) []Platform {
	if len(ps) == 0 {
		return ps
	}
	for _, set := range in.platformSets {
		if slices.Equal(set, ps) {
			return set
		}
	}
	ps = slices.Clip(ps)
	if len(in.platformSets) < maxPlatformSets {
		in.platformSets = append(in.platformSets, ps)
	}
	return ps
}

// meta is the strategies' metaFunc: every tag inspected (those started while the
// list was read are not read again), or the first error. It never answers from
// part of the tags. Call it once.
func (in *inspector) meta(ctx context.Context, tags []string) (map[string]*TagInfo, error) {
	in.width.listed()
	in.start(tags)
	in.pages.Wait()
	// Every tag has a worker: the idle ones end, the others after their tag.
	in.ended.Do(func() { close(in.noMore) })
	if err := in.g.Wait(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return in.infos, nil
}

// put records what is known of tag (from a metadata API, or read on the native
// path); started: nothing more is to be read of it.
func (in *inspector) put(tag string, info *TagInfo, started bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.infos[tag] = info
	if started {
		in.started[tag] = struct{}{}
	}
}

// info is what was learnt of tag, nil if it was not inspected.
func (in *inspector) info(tag string) *TagInfo {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.infos[tag]
}

// tagPagesKey carries a tag list page observer in a context.
type tagPagesKey struct{}

// withTagPages returns ctx with f, which Remote.ListTags calls with each page of a
// tag list as it reads it.
func withTagPages(ctx context.Context, f func([]string)) context.Context {
	return context.WithValue(ctx, tagPagesKey{}, f)
}

func tagPagesOf(ctx context.Context) func([]string) {
	f, _ := ctx.Value(tagPagesKey{}).(func([]string))
	return f
}

// CarryTagPages returns to with from's tag page observer, if it has one: for a
// cache that lists a repository in a context of its own (detached from its callers),
// so that the caller that started the listing still sees its pages as they come.
func CarryTagPages(from, to context.Context) context.Context {
	if f := tagPagesOf(from); f != nil {
		return withTagPages(to, f)
	}
	return to
}
