package service

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Listings of many keys give way to writes. A page of ten thousand
// records takes milliseconds to read from the view and to write as JSON,
// and NATS then copies it to the reader; a reader that pages through a
// large prefix back to back keeps a processor busy with that, and on a
// node with few processors the writes' requests, Raft and the log wait
// for it. Reading from a view already keeps a listing from blocking the
// apply path; pacing keeps it from crowding out the work around it. While
// writes are in flight, a listing pauses, at each of the points where it
// already yields (every schema.ListYieldEvery records), for long enough
// that it runs only the configured fraction of its time (ListingShare);
// with no write in flight it runs at full speed. Measured in the README's
// Performance section (put p99 beside reads).

// maxListingPause bounds one pause, so that a page held up by a slow
// scheduler (a long gap between yields) is not then held up for as long
// again times the ratio.
const maxListingPause = 20 * time.Millisecond

// writesInFlight counts the proposals between their start and their
// result: what a listing gives way to.
type writesInFlight struct{ n atomic.Int64 }

func (w *writesInFlight) begin()    { w.n.Add(1) }
func (w *writesInFlight) end()      { w.n.Add(-1) }
func (w *writesInFlight) any() bool { return w.n.Load() > 0 }

// listingPacer paces one listing request.
type listingPacer struct {
	// ratio is the pause per unit of time run: (1-share)/share.
	ratio   float64
	writing func() bool
	now     func() time.Time
	sleep   func(time.Duration)
	// paused is told each pause, for the metric; nil: nobody.
	paused func(time.Duration)
	last   time.Time
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

// yield is called between chunks of the listing's work.
func (p *listingPacer) yield() {
	if p.ratio == 0 || !p.writing() {
		runtime.Gosched()
		p.last = p.now()
		return
	}
	pause := min(time.Duration(float64(p.now().Sub(p.last))*p.ratio), maxListingPause)
	if pause > 0 {
		p.sleep(pause)
		if p.paused != nil {
			p.paused(pause)
		}
	} else {
		runtime.Gosched()
	}
	p.last = p.now()
}

// listingPause counts a listing's pause in concord_listing_paused_seconds_total.
func (m *metrics) listingPause(d time.Duration) { m.listingPaused.Add(d.Seconds()) }
