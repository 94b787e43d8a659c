package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	k := &keeper{floor: 32 << 20}
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 800},         // before any collection: the runtime's minimum, 4 MiB × 8, is the floor
		{1 << 20, 800},   // 1 MiB live would allow 3100; capped where the minimum meets the floor
		{8 << 20, 300},   // 8 MiB × 4 = 32 MiB
		{16 << 20, 100},  // half the floor: GOGC 100 reaches it
		{100 << 20, 100}, // a large heap: the collector as it was
	} {
		if got := k.percent(c.live); got != c.want {
			t.Errorf("percent(%d MiB live) = %d, want %d", c.live>>20, got, c.want)
		}
	}
}

// gogc is the GOGC in effect.
func gogc() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// cycles is how many collections the process has run.
func cycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var sink []byte

// allocate allocates n bytes of garbage, 64 KiB at a time.
func allocate(n int) {
	for i := 0; i < n; i += 64 << 10 {
		sink = make([]byte, 64<<10)
	}
}

// heapGoal is the heap size at which the next collection starts.
func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// Under the floor the goal is the floor and no collection runs; undone, the
// goal is the runtime's few MiB again. (Counting the collections the same
// garbage takes without the floor would be a flaky check: on a busy machine a
// started cycle may not have ended when the allocations have.)
func TestNoCollectionUnderTheFloor(t *testing.T) {
	undo := Set(64 << 20)
	runtime.GC()
	floorGoal := heapGoal()
	before := cycles()
	allocate(40 << 20)
	floored := cycles() - before
	undo()
	if got := gogc(); got != 100 {
		t.Errorf("GOGC %d after undo, want 100", got)
	}
	runtime.GC()
	plainGoal := heapGoal()
	if floored != 0 || floorGoal < 64<<20 || plainGoal >= 16<<20 {
		t.Errorf("with a 64 MiB floor: goal %d MiB, %d collections for 40 MiB of garbage (want 64 MiB or more, none); undone: goal %d MiB (want a few)",
			floorGoal>>20, floored, plainGoal>>20)
	}
}

// A live heap over half the floor gets GOGC 100 back after the next collection.
func TestLargeHeapBackTo100(t *testing.T) {
	undo := Set(32 << 20)
	defer undo()
	if got := gogc(); got != 800 {
		t.Fatalf("GOGC %d at the start, want 800 (a 32 MiB first goal)", got)
	}
	live := make([][]byte, 0, 40)
	for range 40 {
		live = append(live, make([]byte, 1<<20))
	}
	runtime.GC()
	// The finalizer runs after the collection, on the runtime's own goroutine.
	for deadline := time.Now().Add(10 * time.Second); gogc() != 100 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if got := gogc(); got != 100 {
		t.Errorf("GOGC %d with 40 MiB live over a 32 MiB floor, want 100", got)
	}
	runtime.KeepAlive(live)
}

// A user's GOGC wins: Set changes nothing.
func TestUserGOGCWins(t *testing.T) {
	t.Setenv("GOGC", "100")
	undo := Set(64 << 20)
	defer undo()
	if got := gogc(); got != 100 {
		t.Errorf("GOGC %d with GOGC=100 in the environment, want 100", got)
	}
}

// One floor per process: a second Set, while the first holds, changes nothing.
func TestSecondSetChangesNothing(t *testing.T) {
	undo := Set(32 << 20)
	defer undo()
	Set(64 << 20)() // set and undone: neither touches the first
	if got := gogc(); got != 800 {
		t.Errorf("GOGC %d after a second Set and its undo, want the first floor's 800", got)
	}
}
