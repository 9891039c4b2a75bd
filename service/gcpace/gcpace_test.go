package gcpace

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{1 * mib, 100},  // the floor is far more than the live heap
		{64 * mib, 100}, // the floor is the live heap
		{96 * mib, 66},  // the floor, 64 of 96
		{128 * mib, 50},
		{300 * mib, 50},
		{4096 * mib, 50},
	} {
		if got := Default.Percent(c.live); got != c.want {
			t.Errorf("Percent(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
	}
	if got := (Policy{Fraction: 0.001}).Percent(1 << 30); got != 1 {
		t.Errorf("a tiny fraction gives %d, want the lowest setting, 1", got)
	}
}

// gogc reads the collector's percentage without setting it.
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// Run sets the percentage the policy gives for the live heap, and restores
// the setting it found when it stops.
func TestRunSetsAndRestores(t *testing.T) {
	before := debug.SetGCPercent(77)
	defer debug.SetGCPercent(before)
	// A policy that wants 10 percent of any heap this test has.
	p := Policy{Fraction: 0.1, Floor: 1}
	runtime.GC() // so the live heap is measured
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx, 10*time.Millisecond)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := gogc()
		if got == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector's percentage is %d, want 10", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if got := gogc(); got != 77 {
		t.Fatalf("after Run the percentage is %d, want the 77 it found", got)
	}
}

func TestShouldRelease(t *testing.T) {
	const mib = 1 << 20
	p := Policy{ReleaseMin: 32 * mib, ReuseHorizon: time.Minute}
	for _, c := range []struct {
		free, allocated uint64
		want            bool
	}{
		{100 * mib, 0, true},           // at rest
		{100 * mib, 1 * mib, true},     // 100 MiB lasts 100 s at 1 MiB/s
		{100 * mib, 2 * mib, false},    // 50 s: it will be used again soon
		{31 * mib, 0, false},           // too little to bother
		{60 * mib, 1 * mib, false},     // exactly a minute's worth: kept
		{60 * mib, mib - 1, true},      // a little more than a minute's
		{4096 * mib, 50 * mib, true},   // 82 s
		{4096 * mib, 100 * mib, false}, // 41 s
	} {
		if got := p.shouldRelease(c.free, c.allocated, time.Second); got != c.want {
			t.Errorf("free %d MiB, %d B allocated in 1s: release %v, want %v", c.free/mib, c.allocated, got, c.want)
		}
	}
	if (Policy{}).shouldRelease(1<<40, 0, time.Second) {
		t.Error("ReleaseMin 0 released")
	}
}

func TestReclaimable(t *testing.T) {
	for _, c := range []struct{ free, objects, live, want uint64 }{
		{10, 100, 60, 50}, // free, and garbage since the last collection
		{10, 60, 100, 10}, // objects below the last live figure: only the free heap counts
		{0, 0, 0, 0},
	} {
		if got := reclaimable(c.free, c.objects, c.live); got != c.want {
			t.Errorf("reclaimable(free %d, objects %d, live %d) = %d, want %d", c.free, c.objects, c.live, got, c.want)
		}
	}
}

// Free heap that an idle process keeps goes back to the operating system.
// (Garbage that no collection has seen counts too, by TestReclaimable;
// here the runtime collects it on its own when Run sets the percentage,
// so a test of it through Run would not show the difference.)
func TestRunReleasesMemoryAtRest(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	sample := []metrics.Sample{{Name: freeMetric}, {Name: objectsMetric}, {Name: liveMetric}}
	spare := func() uint64 {
		metrics.Read(sample)
		return reclaimable(sample[0].Value.Uint64(), sample[1].Value.Uint64(), sample[2].Value.Uint64())
	}
	// 64 MiB in small pieces, then dropped and collected: the collector
	// frees it, but does not return most of it while the heap goal
	// covers it.
	junk := make([][]byte, 0, 64<<10)
	for range cap(junk) {
		junk = append(junk, make([]byte, 1024))
	}
	runtime.KeepAlive(junk)
	junk = nil
	runtime.GC()
	if r := spare(); r < 16<<20 {
		t.Skipf("the runtime already returned the memory (%d bytes reclaimable): nothing to test", r)
	}
	p := Policy{Fraction: 1, Floor: 1, ReleaseMin: 8 << 20, ReuseHorizon: time.Minute, ReleaseGap: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx, 20*time.Millisecond)
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if r := spare(); r < 8<<20 {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("%d bytes still reclaimable after 20 s at rest", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
