package client

import (
	"strings"
	"sync"
	"time"

	"github.com/concord-io/concord/schema"
)

// Moving off a server that cannot serve. A NATS server cut off from its
// peers keeps its clients (their own pings still succeed), and the node
// beside it answers every request with its standby's "cannot serve
// requests yet" for as long as the cut lasts, while the rest of the
// cluster serves. A client that keeps hearing that moves to another server
// of its pool (nats.go's ForceReconnect puts the current one last).

// Thresholds: standbyMoveAnswers answers over at least standbyMoveAfter,
// each within standbyMoveWindow of the first; at most one move per
// standbyMoveEvery, so that a client of a cluster with no leader anywhere
// does not spin through its pool.
const (
	standbyMoveAnswers = 3
	standbyMoveAfter   = time.Second
	standbyMoveWindow  = 10 * time.Second
	standbyMoveEvery   = 5 * time.Second
)

// standbyTracker counts the standby answers a client's calls get.
type standbyTracker struct {
	mu       sync.Mutex
	first    time.Time // the first answer of the current run; zero for none
	count    int
	lastMove time.Time
}

// isStandbyAnswer reports whether an error reply is a node's standby.
func isStandbyAnswer(e *Error) bool {
	return strings.Contains(e.Description, schema.StandbyPhrase)
}

// standbyAnswer records a standby answer at now and reports whether the
// client should move to another server.
func (t *standbyTracker) standbyAnswer(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.first.IsZero() || now.Sub(t.first) > standbyMoveWindow {
		t.first, t.count = now, 0
	}
	t.count++
	if t.count < standbyMoveAnswers || now.Sub(t.first) < standbyMoveAfter || now.Sub(t.lastMove) < standbyMoveEvery {
		return false
	}
	t.lastMove, t.first, t.count = now, time.Time{}, 0
	return true
}

// served ends a run of standby answers.
func (t *standbyTracker) served() {
	t.mu.Lock()
	t.first, t.count = time.Time{}, 0
	t.mu.Unlock()
}

// noteStandby records a standby answer and moves the connection to another
// server of its pool when the run calls for it and there is one.
func (c *Client) noteStandby() {
	if !c.standby.standbyAnswer(time.Now()) || len(c.nc.Servers()) < 2 {
		return
	}
	_ = c.nc.ForceReconnect()
}
