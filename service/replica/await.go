package replica

import (
	"context"

	"github.com/hashicorp/raft"
)

// Await waits for Raft's answer to f, or until ctx ends. Raft leaves a
// future unanswered when it shuts down after taking the request and before
// serving it (a barrier still queued for the leader loop, a snapshot for
// the snapshot loop); Close cancels ctx before it shuts Raft down, so a
// goroutine that waits here never holds Close up. The goroutine left
// waiting on such a future stays for the life of the process.
func Await(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
