package service

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
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

// await waits for Raft's answer to f, or until ctx ends. Raft leaves a
// future unanswered when it shuts down after taking the request and before
// serving it (a barrier still queued for the leader loop, a snapshot for
// the snapshot loop); Close cancels ctx before it shuts Raft down, so a
// goroutine that waits here never holds Close up. The goroutine left
// waiting on such a future stays for the life of the process.
func await(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
