package pin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// batch is the changes queued for one repository and branch.
type batch struct {
	key      queueKey
	edits    []*Edit
	index    map[string]int // app + file -> edits index
	due      time.Time
	failures int
	pins     int
}

func newBatch(key queueKey) *batch { return &batch{key: key, index: map[string]int{}} }

// add queues e; a pin for an app, file and alias already queued replaces it,
// with its base. It returns how many pins were added.
func (b *batch) add(e Edit) int {
	k := e.App + "\x00" + e.File()
	i, ok := b.index[k]
	if !ok {
		b.edits = append(b.edits, &Edit{App: e.App, Dir: e.Dir, Target: e.Target, Base: map[string]string{}})
		i = len(b.edits) - 1
		b.index[k] = i
	}
	q := b.edits[i]
	q.Dir, q.Target, q.DetectHolds = e.Dir, e.Target, e.DetectHolds
	added := 0
	for _, p := range e.Pins {
		found := false
		for j := range q.Pins {
			if q.Pins[j].Alias == p.Alias {
				q.Pins[j], found = p, true
				break
			}
		}
		if !found {
			q.Pins = append(q.Pins, p)
			added++
		}
		if base, ok := e.Base[p.Alias]; ok {
			q.Base[p.Alias] = base
		} else {
			delete(q.Base, p.Alias)
		}
	}
	b.pins += added
	return added
}

func (b *batch) list() []Edit {
	out := make([]Edit, len(b.edits))
	for i, e := range b.edits {
		out[i] = *e
	}
	return out
}

// Submit queues c to be committed by Run, with the other changes for the same
// repository and branch that arrive within the batch window (one commit). A
// later change for the same app, file and alias replaces the queued one. A
// change that cannot be written (no repository, no target, a bad path) is
// logged and dropped.
func (w *Writer) Submit(c Change) {
	c.Edit.Dir = cleanDir(c.Edit.Dir)
	if err := checkChange(c); err != nil {
		w.log.Error("pin change dropped", "app", c.Edit.App, "repository", redactURL(c.RepoURL), "error", err.Error())
		return
	}
	key := keyOf(c)
	w.mu.Lock()
	b := w.queues[key]
	if b == nil {
		b = newBatch(key)
		b.due = w.now().Add(w.window)
		w.queues[key] = b
	}
	w.addPending(b.add(c.Edit))
	w.mu.Unlock()
	w.signal()
}

// Pending counts the pins submitted and not yet written: queued, being written,
// or waiting to be tried again.
func (w *Writer) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pending
}

// addPending moves the pending count; w.mu is held.
func (w *Writer) addPending(n int) {
	w.pending += n
	w.metrics.pending.Add(float64(n))
}

func (w *Writer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run writes submitted changes, a batch when its window has passed, until ctx
// ends; then it writes what is queued at once and returns when that is done, or
// after the flush timeout (what is still unwritten then is logged and dropped).
// Batches of different repositories or branches are written concurrently. A
// batch whose write fails is queued again (under changes submitted since, which
// win) and tried after a pause that doubles with each failure, up to 5 minutes;
// after 8 consecutive failures it is dropped (logged): the next render submits
// its pins again. One Run at a time.
func (w *Writer) Run(ctx context.Context) {
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	w.mu.Lock()
	w.stopping = false
	w.mu.Unlock()
	var wg sync.WaitGroup
	done := ctx.Done()
	for {
		w.mu.Lock()
		now := w.now()
		stopping := w.stopping
		var next time.Time
		for key, b := range w.queues {
			if w.inflight[key] != nil {
				continue
			}
			if stopping || !b.due.After(now) {
				delete(w.queues, key)
				w.inflight[key] = b
				wg.Add(1)
				go func() {
					defer wg.Done()
					w.flush(work, b)
				}()
				continue
			}
			if next.IsZero() || b.due.Before(next) {
				next = b.due
			}
		}
		idle := len(w.queues) == 0 && len(w.inflight) == 0
		w.mu.Unlock()
		if stopping && idle {
			break
		}
		var timer *time.Timer
		var timerC <-chan time.Time
		if !next.IsZero() {
			timer = time.NewTimer(next.Sub(now))
			timerC = timer.C
		}
		select {
		case <-done:
			done = nil
			w.mu.Lock()
			w.stopping = true
			n := w.pending
			w.mu.Unlock()
			if n > 0 {
				w.log.Info("pin writer stopping: writing what is queued", "pins", n, "timeout", w.flushTimeout.String())
			}
			stop := time.AfterFunc(w.flushTimeout, cancelWork)
			defer stop.Stop()
		case <-w.wake:
		case <-timerC:
		}
		if timer != nil {
			timer.Stop()
		}
	}
	wg.Wait()
}

// flush writes a batch taken off the queue.
func (w *Writer) flush(ctx context.Context, b *batch) {
	if w.afterFlush != nil {
		defer w.afterFlush() // last: after the batch is accounted for and w.mu released
	}
	edits := b.list()
	res, err := w.write(ctx, b.key, edits)
	unconfirmed := map[string]Unconfirmed{}
	for _, u := range res.Unconfirmed {
		unconfirmed[u.App+"\x00"+u.File] = u
	}
	// again: the edits to try in the next round (those the write failed, and
	// those the registry could not confirm); an edit the registry refuted is
	// dropped (its app's next render submits what the registry has)
	var again []Edit
	for _, e := range edits {
		u, refused := unconfirmed[e.App+"\x00"+e.File()]
		switch {
		case refused && w.onResult != nil:
			w.onResult(e.App, u.Err)
		case w.onResult != nil:
			w.onResult(e.App, err)
		}
		if (refused && u.Reason == UnconfirmedRegistryError) || (!refused && err != nil) {
			again = append(again, e)
		}
	}
	if err == nil && len(again) > 0 {
		err = fmt.Errorf("%d pin changes not confirmed by the registry: %w", len(again), ErrUnconfirmed)
	}
	w.mu.Lock()
	defer w.signal()
	defer w.mu.Unlock()
	delete(w.inflight, b.key)
	w.addPending(-b.pins)
	if len(again) == 0 {
		return
	}
	w.requeue(ctx, b, again, err)
}

// requeue queues again the edits of batch b whose write failed with err, to be
// tried after a pause, under the changes submitted since (which win); w.mu is
// held.
func (w *Writer) requeue(ctx context.Context, b *batch, again []Edit, err error) {
	shown := redactURL(b.key.repo)
	// a repository over the bound stays over it: fetching it again cannot help
	if w.stopping || ctx.Err() != nil || b.failures+1 >= maxBatchFailures || errors.Is(err, ErrRepositoryTooLarge) {
		pins := 0
		for _, e := range again {
			pins += len(e.Pins)
		}
		w.log.Error("pins dropped: not written", "repository", shown, "branch", b.key.shownBranch(),
			"pins", pins, "failures", b.failures+1, "error", err.Error())
		return
	}
	nb := newBatch(b.key)
	nb.failures = b.failures + 1
	delay := max(w.window, w.backoff, time.Second)
	for i := 0; i < nb.failures && delay < maxRequeueDelay; i++ {
		delay *= 2
	}
	nb.due = w.now().Add(min(delay, maxRequeueDelay))
	for _, e := range again {
		nb.add(e)
	}
	if newer := w.queues[b.key]; newer != nil {
		for _, e := range newer.edits {
			nb.add(*e)
		}
		w.addPending(-newer.pins)
	}
	w.addPending(nb.pins)
	w.queues[b.key] = nb
	w.log.Warn("pins queued again after a failed write", "repository", shown, "branch", b.key.shownBranch(),
		"pins", nb.pins, "failures", nb.failures, "retry_in", min(delay, maxRequeueDelay).String())
}
