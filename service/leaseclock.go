package service

import (
	"sync"
	"time"
)

// leaseClock is the leader's source of `now` for commands. It runs only
// while this node leads: it starts from the lease-clock value of the last
// applied entry and advances with the monotonic clock, so wall-clock jumps
// and skew between machines never move it, and it stands still between
// leaders. Milliseconds.
type leaseClock struct {
	mu      sync.Mutex
	running bool
	// held keeps the clock from starting while another cluster serves the
	// same prefix (service/bus).
	held  bool
	base  int64
	start time.Time // carries Go's monotonic reading
}

// startAt starts the clock at base, unless it is held; it reports whether
// the clock runs.
func (c *leaseClock) startAt(base int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held {
		return false
	}
	c.running, c.base, c.start = true, base, time.Now()
	return true
}

func (c *leaseClock) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running = false
}

// hold stops the clock and keeps it stopped until release.
func (c *leaseClock) hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running, c.held = false, true
}

// release lets the clock start again.
func (c *leaseClock) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = false
}

// now returns the lease-clock time, or false when this node is not leading.
func (c *leaseClock) now() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		return 0, false
	}
	return c.base + time.Since(c.start).Milliseconds(), true
}
