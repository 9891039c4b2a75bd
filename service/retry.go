package service

import (
	"context"
	"time"
)

// retry calls attempt until it reports done or ctx ends, waiting between
// attempts: first, then twice as long each time, up to max. It is the one
// backoff loop of the service (the join, the new leader's barrier); it
// reports whether attempt finished before ctx ended.
func retry(ctx context.Context, first, max time.Duration, attempt func() (done bool)) bool {
	for wait := first; ctx.Err() == nil; wait = min(2*wait, max) {
		if attempt() {
			return true
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-timer.C:
		}
	}
	return false
}
