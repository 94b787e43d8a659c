package daemon

import (
	"os"
	"runtime/debug"
)

// DaemonGCPercent is the garbage collector's target for a daemon process when the
// operator sets no GOGC: most of the daemon's heap is its cache, live for hours,
// and Go's default (100) lets the heap grow to twice that before collecting. 50
// keeps the peak close to what is cached for a little more collector work
// (BenchmarkDaemonMemory: peak RSS 179 MiB against 190 MiB at 75 and more at 100;
// BenchmarkCold1000Builds through a daemon: 3% slower). Lower is not worth it:
// while a cold view loads, the collector already takes 40% of the daemon's CPU
// (its allocations are the registry client's), and at 35 it took 65–80% more
// (gc-cpu-s/load 17.4–18.3 s against 9.7–11.8 s) for an anonymous peak 3–7 MiB
// lower (73.5–75.9 MiB against 78.7–80.8 MiB); at 30, BenchmarkNewestBuildMemoryGrowth
// ran 1.7 times the collections for a 10,000-tag peak 6 MiB lower.
const DaemonGCPercent = 50

// TuneGC sets the process's GC target to DaemonGCPercent unless GOGC is set. The
// serve and sidecar commands call it; a library user of New decides for itself.
func TuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DaemonGCPercent)
	}
}

// LimitMemory sets this process's soft memory limit (the Go runtime's, as
// GOMEMLIMIT does) to three quarters of the daemon's share of the memory
// budget: the rest of the share is for what runs beside it in the container
// (Argo CD's CMP server and its generate clients). GOMEMLIMIT in the
// environment is the container's limit, the budget of every process in it:
// left as the daemon's own, its heap could grow into the workers' memory.
// The serving commands call it; tests, which run many daemons in one process,
// do not.
func (d *Daemon) LimitMemory() {
	debug.SetMemoryLimit(d.memory.Daemon / 4 * 3)
}
