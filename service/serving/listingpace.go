package serving

import (
	"runtime"
	"time"
)

// Listings of many keys give way to writes. A page of ten thousand
// records takes milliseconds to read from the view and to write as JSON,
// and NATS then copies it to the reader; a reader that pages through a
// large prefix back to back keeps a processor busy with that, and on a
// node with few processors the writes' requests, Raft and the log wait
// for it. Reading from a view already keeps a listing from blocking the
// apply path; pacing keeps it from crowding out the work around it. While
// writes are in flight, a listing adds up, at each of the points where it
// already yields (every 256 records: fsm.YieldEvery, schema.ListYieldEvery),
// the pause that would make it run only the configured fraction of its
// time (ListingShare), and takes it once it owes a millisecond; with no
// write in flight it runs at full speed. Measured in docs/performance.md
// (put p99 beside reads).

// minListingPause is the shortest pause a listing takes: the work between
// two yields is tens of microseconds, and a sleep that short overshoots
// by more than it lasts, so the pauses it owes add up until they reach
// this. maxListingPause bounds what it may owe, so that a page held up by
// a slow scheduler (a long gap between yields) is not then held up for as
// long again times the ratio.
const (
	minListingPause = time.Millisecond
	maxListingPause = 20 * time.Millisecond
)

// listingPacer paces one listing request.
type listingPacer struct {
	// ratio is the pause owed per unit of time run: (1-share)/share.
	ratio   float64
	writing func() bool
	now     func() time.Time
	sleep   func(time.Duration)
	// paused is told each pause as it lasted, for the metric; nil: nobody.
	paused func(time.Duration)
	// last is when the listing last resumed; owed is the pause it owes
	// (below 0: what its last pause overshot, which later work uses up).
	last time.Time
	owed time.Duration
}

// newListingPacer returns the pacer of a listing that runs fraction share
// of its time while writing reports true; share 1 never pauses.
func newListingPacer(share float64, writing func() bool, paused func(time.Duration)) *listingPacer {
	p := &listingPacer{writing: writing, now: time.Now, sleep: time.Sleep, paused: paused}
	if share > 0 && share < 1 {
		p.ratio = (1 - share) / share
	}
	p.last = p.now()
	return p
}

// restart starts the time run afresh: between reading the records and
// writing them, the request waits in places that are not the listing's.
func (p *listingPacer) restart() { p.last = p.now() }

// yield is called between chunks of the listing's work. With writes in
// flight the chunk's time adds to what the listing owes, and once that
// reaches minListingPause it pauses for it; a pause that overshoots pays
// for the time after it too. A chunk run with no write in flight owes
// nothing (the pauses are there for the writes, not to slow the reads),
// but what was owed stays: closed-loop writers leave moments with none in
// flight between their requests, and forgetting the debt at each of them
// would let the listing run on almost unpaced.
func (p *listingPacer) yield() {
	start := p.now()
	if p.ratio == 0 || !p.writing() {
		runtime.Gosched()
		p.last = p.now()
		return
	}
	p.owed = min(p.owed+time.Duration(float64(start.Sub(p.last))*p.ratio), maxListingPause)
	if p.owed < minListingPause {
		runtime.Gosched()
		p.last = p.now()
		return
	}
	p.sleep(p.owed)
	p.last = p.now()
	slept := p.last.Sub(start)
	p.owed = max(p.owed-slept, -maxListingPause)
	if p.paused != nil {
		p.paused(slept)
	}
}
