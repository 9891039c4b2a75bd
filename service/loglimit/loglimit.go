// Package loglimit keeps a fault from flooding a node's log: Repeats lets
// the first of a run of like lines through and counts the rest, Every lets
// one event through per interval. A line held back is counted, never
// silently lost.
package loglimit

import (
	"sync"
	"time"
)

// Repeats keeps a fault from flooding the log. While a peer is cut
// off, Raft logs a failed vote request for every election round (about 370
// lines in a 120 s cut) and the NATS server a failed route dial every 2 s:
// the same line, over and over. The limiter lets the first of a run of
// like lines through and holds back the rest for a window; the next one
// let through says how many were held back, so a cut is logged, and its
// length can still be read from the log, without the flood.
type Repeats struct {
	// Now is the clock: time.Now from NewRepeats; a test may set its own
	// before the first Allow.
	Now func() time.Time

	window time.Duration

	mu   sync.Mutex
	runs map[string]*repeatRun
}

// repeatRun is one kind of line: when it was last let through, and how
// many like it were held back since.
type repeatRun struct {
	passed time.Time
	held   int
}

// Window is how long like lines are held back after one passed, unless
// a caller has reason to choose another.
const Window = 10 * time.Second

// repeatKinds bounds the kinds of line remembered; past it, all are
// forgotten, which at worst lets a line through early.
const repeatKinds = 256

// NewRepeats returns a limiter that holds like lines back for window
// after one passed.
func NewRepeats(window time.Duration) *Repeats {
	return &Repeats{window: window, Now: time.Now, runs: map[string]*repeatRun{}}
}

// Allow reports whether a line of kind key may be logged now and, if so,
// how many like lines were held back since the last one logged.
func (l *Repeats) Allow(key string) (ok bool, held int) {
	now := l.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.runs[key]
	if r != nil && now.Sub(r.passed) < l.window {
		r.held++
		return false, 0
	}
	if r == nil {
		if len(l.runs) >= repeatKinds {
			clear(l.runs)
		}
		r = &repeatRun{}
		l.runs[key] = r
	}
	held, r.passed, r.held = r.held, now, 0
	return true, held
}

// Every lets one event through per Interval; its zero Interval lets every
// event through.
type Every struct {
	Interval time.Duration

	mu   sync.Mutex
	last time.Time
}

// Allow reports whether an event may be let through now.
func (r *Every) Allow() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); r.last.IsZero() || now.Sub(r.last) >= r.Interval {
		r.last = now
		return true
	}
	return false
}
