package service

import (
	"sync"
	"time"
)

// repeatLimiter keeps a fault from flooding the log. While a peer is cut
// off, Raft logs a failed vote request for every election round (about 370
// lines in a 120 s cut) and the NATS server a failed route dial every 2 s:
// the same line, over and over. The limiter lets the first of a run of
// like lines through and holds back the rest for a window; the next one
// let through says how many were held back, so a cut is logged, and its
// length can still be read from the log, without the flood.
type repeatLimiter struct {
	window time.Duration
	now    func() time.Time

	mu   sync.Mutex
	runs map[string]*repeatRun
}

// repeatRun is one kind of line: when it was last let through, and how
// many like it were held back since.
type repeatRun struct {
	passed time.Time
	held   int
}

// repeatWindow is how long like lines are held back after one passed.
const repeatWindow = 10 * time.Second

// repeatKinds bounds the kinds of line remembered; past it, all are
// forgotten, which at worst lets a line through early.
const repeatKinds = 256

func newRepeatLimiter(window time.Duration) *repeatLimiter {
	return &repeatLimiter{window: window, now: time.Now, runs: map[string]*repeatRun{}}
}

// allow reports whether a line of kind key may be logged now and, if so,
// how many like lines were held back since the last one logged.
func (l *repeatLimiter) allow(key string) (ok bool, held int) {
	now := l.now()
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
