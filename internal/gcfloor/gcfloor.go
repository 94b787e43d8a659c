// Package gcfloor keeps the garbage collector of a short-lived command from
// running while its heap is small.
//
// With the default GOGC of 100 the collector runs each time the heap doubles,
// and first once 4 MiB are allocated. A command that resolves 1,000 tags
// allocates some 22 MB over a live heap of a few MiB: a collection every few
// MiB, 10–17% of its CPU (BenchmarkColdNewestBuildCPU, GOGC=400 against 100).
// A floor lets the heap grow to a set size before the first collection and
// keeps the goal there while the live heap is under half of it; past that,
// GOGC is 100 again, so a large resolution's memory is what it was.
//
// It is the approach of the Go compiler's base.AdjustStartingHeap (cmd/compile,
// golang/go#56546), for commands; never for the long-lived daemon, whose
// memory is bounded by its own settings.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// CommandFloor is the floor of a one-shot command (resolve, generate, preview):
// a 1,000-tag resolution allocates some 22 MB over a live heap of a few MiB.
const CommandFloor = 32 << 20

// defaultHeapMinimum is the runtime's heap goal before the first collection at
// GOGC=100; it scales with GOGC.
const defaultHeapMinimum = 4 << 20

// active is the keeper in effect, if any: one per process.
var (
	activeMu sync.Mutex
	active   *keeper
)

// Set keeps the heap goal at floor bytes or more, unless the user set GOGC
// (theirs wins) or a floor is already set (the first one holds). A memory limit
// (GOMEMLIMIT) still bounds the heap: the runtime collects as it nears the
// limit whatever GOGC says. It returns a function that puts GOGC back and stops
// adjusting it.
func Set(floor uint64) (undo func()) {
	if os.Getenv("GOGC") != "" || floor <= 2*defaultHeapMinimum {
		return func() {}
	}
	activeMu.Lock()
	defer activeMu.Unlock()
	if active != nil {
		return func() {}
	}
	k := &keeper{floor: floor}
	k.prev = debug.SetGCPercent(k.percent(0))
	k.rearm()
	active = k
	return k.stop
}

// keeper adjusts GOGC after each collection until stopped.
type keeper struct {
	floor   uint64
	prev    int
	mu      sync.Mutex
	stopped bool
}

// percent is the GOGC that makes the heap goal the floor for a live heap of
// live bytes (0: before any collection), never under 100, and never so high
// that the runtime's own minimum (4 MiB × GOGC/100) would pass the floor.
func (k *keeper) percent(live uint64) int {
	most := int(k.floor * 100 / defaultHeapMinimum)
	if live == 0 {
		return most
	}
	if 2*live >= k.floor {
		return 100
	}
	return min(most, max(100, int(k.floor*100/live)-100))
}

// sentinel is what the finalizer is set on: 32 bytes, past the runtime's tiny
// allocator, whose blocks (and so finalizers) are shared with other objects.
type sentinel [32]byte

// rearm asks to be called after the next collection: a finalizer runs once a
// collection finds its object unreachable.
func (k *keeper) rearm() {
	runtime.SetFinalizer(new(sentinel), func(*sentinel) { k.afterGC() })
}

func (k *keeper) afterGC() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		debug.SetGCPercent(k.prev) // a runtime without the metric: the collector as it was
		return
	}
	debug.SetGCPercent(k.percent(s[0].Value.Uint64()))
	k.rearm()
}

func (k *keeper) stop() {
	activeMu.Lock()
	defer activeMu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	k.stopped = true
	debug.SetGCPercent(k.prev)
	if active == k {
		active = nil
	}
}
