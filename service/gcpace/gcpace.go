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
// default of 100 percent.
type Policy struct {
	Fraction float64
	Floor    uint64
}

// Default keeps Go's default up to a live heap of 64 MiB and, from 128 MiB
// on, lets the heap grow by half of what is live: at a million keys (about 300 MB
// live) resident memory falls from about 610 to 480 MiB (see the README's
// Performance section for how that was measured).
var Default = Policy{Fraction: 0.5, Floor: 64 << 20}

// Percent returns the GOGC percentage for a live heap of live bytes.
func (p Policy) Percent(live uint64) int {
	if live == 0 {
		return 100
	}
	headroom := max(p.Fraction*float64(live), float64(p.Floor))
	pct := int(100 * headroom / float64(live))
	return min(max(pct, 1), 100)
}

const liveMetric = "/gc/heap/live:bytes"

// Run adjusts the collector's percentage every interval from the live heap
// the last collection measured, until ctx ends; it changes the setting only
// when the percentage moves by 5 points or more, so a steady heap leaves it
// alone. It takes over the setting (a GOGC the process was started with
// included: the caller decides whether to run it) and restores the one in
// force before it began when it returns.
func (p Policy) Run(ctx context.Context, interval time.Duration) {
	sample := []metrics.Sample{{Name: liveMetric}}
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	current := 100
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			if pct := p.Percent(sample[0].Value.Uint64()); pct >= current+5 || pct <= current-5 {
				debug.SetGCPercent(pct)
				current = pct
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
