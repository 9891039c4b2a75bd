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
