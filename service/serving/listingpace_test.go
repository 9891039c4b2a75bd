package serving

import (
	"testing"
	"time"
)

// fakePacer returns a pacer on a fake clock that advances only by its
// sleeps and by run, and the sleeps it made.
func fakePacer(share float64, writing *bool) (p *listingPacer, run func(time.Duration), slept *[]time.Duration, counted *time.Duration) {
	t := time.Unix(1000, 0)
	slept, counted = new([]time.Duration), new(time.Duration)
	p = newListingPacer(share, func() bool { return *writing }, func(d time.Duration) { *counted += d })
	p.now = func() time.Time { return t }
	p.sleep = func(d time.Duration) { *slept = append(*slept, d); t = t.Add(d) }
	p.restart()
	return p, func(d time.Duration) { t = t.Add(d) }, slept, counted
}

func TestListingPacerPausesOnlyWhileWritesAreInFlight(t *testing.T) {
	writing := false
	p, run, slept, counted := fakePacer(0.5, &writing)

	run(3 * time.Millisecond)
	p.yield()
	if len(*slept) != 0 {
		t.Fatalf("with no write in flight the listing paused %v", *slept)
	}

	writing = true
	run(4 * time.Millisecond)
	p.yield()
	// Share 0.5: as long a pause as it ran since the last yield, the
	// earlier run (before a yield with no writes) not counted again.
	if len(*slept) != 1 || (*slept)[0] != 4*time.Millisecond {
		t.Fatalf("after 4ms with writes in flight at share 0.5: paused %v, want [4ms]", *slept)
	}
	// The pause itself is not time run.
	p.yield()
	if len(*slept) != 1 {
		t.Fatalf("a yield right after a pause paused again: %v", *slept)
	}
	if *counted != 4*time.Millisecond {
		t.Fatalf("metric counted %v of pauses, want 4ms", *counted)
	}
}

func TestListingPacerShare(t *testing.T) {
	for _, c := range []struct {
		share float64
		ran   time.Duration
		want  time.Duration // 0: no pause
	}{
		{0.5, 2 * time.Millisecond, 2 * time.Millisecond},
		{0.25, 2 * time.Millisecond, 6 * time.Millisecond},
		{0.1, time.Millisecond, 9 * time.Millisecond},
		{1, 5 * time.Millisecond, 0},
		// One pause is bounded, however long the gap before it.
		{0.5, time.Second, maxListingPause},
	} {
		writing := true
		p, run, slept, _ := fakePacer(c.share, &writing)
		run(c.ran)
		p.yield()
		var got time.Duration
		if len(*slept) > 0 {
			got = (*slept)[0]
		}
		// Float arithmetic may land a nanosecond off.
		if d := got - c.want; d < -time.Nanosecond || d > time.Nanosecond {
			t.Errorf("share %g after %v: paused %v, want %v", c.share, c.ran, got, c.want)
		}
	}
}

// The work between yields is short; the pauses it owes add up until they
// reach minListingPause, and a pause longer than asked for counts toward
// the next.
func TestListingPacerPausesInChunks(t *testing.T) {
	writing := true
	p, run, slept, counted := fakePacer(0.5, &writing)
	for range 3 {
		run(400 * time.Microsecond)
		p.yield()
	}
	if len(*slept) != 1 || (*slept)[0] != 1200*time.Microsecond {
		t.Fatalf("after 3 chunks of 400µs at share 0.5: paused %v, want one pause of 1.2ms", *slept)
	}

	// A sleep that lasts three times what it was asked for.
	sleep := p.sleep
	p.sleep = func(d time.Duration) { sleep(3 * d) }
	run(2 * time.Millisecond)
	p.yield() // asks 2ms, sleeps 6ms: 4ms ahead
	run(3 * time.Millisecond)
	p.yield() // owes -1ms: no pause
	if len(*slept) != 2 || (*slept)[1] != 6*time.Millisecond {
		t.Fatalf("pauses %v, want a second of 6ms and no third", *slept)
	}
	run(3 * time.Millisecond)
	p.yield() // owes 2ms
	if len(*slept) != 3 || (*slept)[2] != 6*time.Millisecond {
		t.Fatalf("pauses %v, want a third, asked for 2ms", *slept)
	}
	if want := 1200*time.Microsecond + 12*time.Millisecond; *counted != want {
		t.Fatalf("metric counted %v, want %v: the pauses as they lasted", *counted, want)
	}

	// Time run with no write in flight owes nothing, and what was owed
	// before stays owed.
	p.sleep = sleep
	run(4500 * time.Microsecond)
	p.yield() // owes 0.5ms: no pause
	writing = false
	run(5 * time.Millisecond)
	p.yield()
	writing = true
	run(600 * time.Microsecond)
	p.yield()
	if len(*slept) != 4 || (*slept)[3] != 1100*time.Microsecond {
		t.Fatalf("pauses %v, want a fourth of 1.1ms: the 0.5ms owed before the 5ms without writes, and 0.6ms after", *slept)
	}
}
