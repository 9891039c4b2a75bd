// Package gcpace sets how much the Go heap may grow between collections
// from the size of what is live, for a process whose live heap is its
// dataset.
//
// Go's collector lets the heap grow by GOGC percent of the live heap (100 by
// default) before it collects again, so a node holding a million keys in
// 300 MB of live heap sits at up to 600 MB resident. That headroom buys
// nothing once the heap is large: the work the collector does per byte
// allocated grows with live/headroom, and a large live heap already gives
// a large headroom in bytes. So the pacer keeps Go's default while the
// heap is small, and limits the headroom to a fraction of the live heap
// (but never below a floor in bytes) when it is large.
package gcpace

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Policy is how much the heap may grow between collections: Fraction of
// the live heap, but at least Floor bytes, and never more than Go's
// default of 100 percent; and when the free heap the process keeps goes
// back to the operating system.
type Policy struct {
	Fraction float64
	Floor    uint64
	// Reclaimable heap memory (free, and garbage the next collection
	// would free) is collected and returned at once when there is at
	// least ReleaseMin bytes of it and the process, at its allocation
	// rate of the last interval, would take longer than ReuseHorizon to
	// use it again: after a load, say, a node at rest would otherwise
	// keep the memory the load needed (Go's scavenger returns only what
	// lies above the heap goal, and an idle process does not collect).
	// At most once per ReleaseGap, since it costs a collection.
	// ReleaseMin 0 turns it off.
	ReleaseMin   uint64
	ReuseHorizon time.Duration
	ReleaseGap   time.Duration
}

// Default keeps Go's default up to a live heap of 64 MiB and, from 128 MiB
// on, lets the heap grow by half of what is live: at a million keys (about 300 MB
// live) resident memory falls from about 610 to 480 MiB (see docs/operations.md,
// Memory, for how that was measured).
// Free memory goes back once 32 MiB of it would last more than a minute.
var Default = Policy{Fraction: 0.5, Floor: 64 << 20, ReleaseMin: 32 << 20, ReuseHorizon: time.Minute, ReleaseGap: time.Minute}

// Percent returns the GOGC percentage for a live heap of live bytes.
func (p Policy) Percent(live uint64) int {
	if live == 0 {
		return 100
	}
	headroom := max(p.Fraction*float64(live), float64(p.Floor))
	pct := int(100 * headroom / float64(live))
	return min(max(pct, 1), 100)
}

// shouldRelease reports whether reclaimable bytes of heap should go back
// to the operating system, allocated bytes having been allocated over the
// last interval.
func (p Policy) shouldRelease(reclaimable, allocated uint64, interval time.Duration) bool {
	if p.ReleaseMin == 0 || reclaimable < p.ReleaseMin {
		return false
	}
	// At allocated per interval, it lasts reclaimable/allocated intervals.
	return float64(allocated)*float64(p.ReuseHorizon) < float64(reclaimable)*float64(interval)
}

// reclaimable is what a collection and a release would give back: the
// free heap, and the object bytes beyond what the last collection found
// live (garbage since, mostly, when the process is at rest).
func reclaimable(free, objects, live uint64) uint64 {
	if objects > live {
		free += objects - live
	}
	return free
}

const (
	liveMetric    = "/gc/heap/live:bytes"
	freeMetric    = "/memory/classes/heap/free:bytes"
	allocsMetric  = "/gc/heap/allocs:bytes"
	objectsMetric = "/memory/classes/heap/objects:bytes"
)

// read returns a sample's value, 0 when the runtime does not have it.
func read(s metrics.Sample) uint64 {
	if s.Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s.Value.Uint64()
}

// Run adjusts the collector's percentage every interval from the live heap
// the last collection measured, until ctx ends; it changes the setting only
// when the percentage moves by 5 points or more, so a steady heap leaves it
// alone. It takes over the setting (a GOGC the process was started with
// included: the caller decides whether to run it) and restores the one in
// force before it began when it returns.
func (p Policy) Run(ctx context.Context, interval time.Duration) {
	sample := []metrics.Sample{{Name: liveMetric}, {Name: freeMetric}, {Name: allocsMetric}, {Name: objectsMetric}}
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	current := 100
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastAllocs uint64
	var lastRelease time.Time
	for first := true; ; first = false {
		metrics.Read(sample)
		if live := read(sample[0]); live > 0 {
			if pct := p.Percent(live); pct >= current+5 || pct <= current-5 {
				debug.SetGCPercent(pct)
				current = pct
			}
		}
		allocs := read(sample[2])
		spare := reclaimable(read(sample[1]), read(sample[3]), read(sample[0]))
		if !first && time.Since(lastRelease) >= p.ReleaseGap && p.shouldRelease(spare, allocs-lastAllocs, interval) {
			debug.FreeOSMemory()
			lastRelease = time.Now()
		}
		lastAllocs = allocs
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
