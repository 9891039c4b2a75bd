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
	base    int64
	start   time.Time // carries Go's monotonic reading
}

func (c *leaseClock) startAt(base int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running, c.base, c.start = true, base, time.Now()
}

func (c *leaseClock) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running = false
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
