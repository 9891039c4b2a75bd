package serving

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/schema"
)

// readBarrier makes reads linearizable without writing to the log. Reads
// that arrive while a confirmation is running wait for the next one, so one
// VerifyLeader round serves a whole batch of reads. A confirmation reads the
// commit index after every read of its batch arrived, checks that this node
// is still the leader, and waits until the state machine has applied
// everything up to that index.
//
// It is built from what it reads, not from the node: Raft's commit index
// and leadership check, the state machine's applied index with the log
// behind it, and the lease clock.
type readBarrier struct {
	raft    leaderConfirmer
	applied appliedWaiter
	clock   clockReader
	// timeout bounds a read's wait for its confirmation, and the wait for
	// the applied index within one.
	timeout time.Duration

	mu      sync.Mutex
	waiters []chan *schema.Error
	running bool
}

// leaderConfirmer is what a read barrier asks of Raft; *raft.Raft is one.
type leaderConfirmer interface {
	CommitIndex() uint64
	VerifyLeader() raft.Future
}

// appliedWaiter waits until the state machine has applied an index.
type appliedWaiter interface {
	WaitApplied(index uint64, timeout time.Duration) *schema.Error
}

// clockReader reads the lease clock.
type clockReader interface {
	LeaseNow() (int64, bool)
}

// newReadBarrier returns a read barrier over r, applied and clock.
func newReadBarrier(r leaderConfirmer, applied appliedWaiter, clock clockReader, timeout time.Duration) *readBarrier {
	return &readBarrier{raft: r, applied: applied, clock: clock, timeout: timeout}
}

// now confirms that a read may be served and returns the lease-clock time
// at which remaining lease time is measured. A serializable read skips the
// confirmation: it may be stale, but it still needs a running clock, which
// only the leader has.
func (b *readBarrier) now(ctx context.Context, serializable bool) (int64, *schema.Error) {
	if !serializable {
		ctx, cancel := context.WithTimeout(ctx, b.timeout)
		defer cancel()
		if e := b.wait(ctx); e != nil {
			return 0, e
		}
	}
	now, ok := b.clock.LeaseNow()
	if !ok {
		return 0, schema.Errorf(schema.ErrNotLeader, "this node is not the leader")
	}
	return now, nil
}

func (b *readBarrier) wait(ctx context.Context) *schema.Error {
	ch := make(chan *schema.Error, 1)
	b.mu.Lock()
	b.waiters = append(b.waiters, ch)
	if !b.running {
		b.running = true
		go b.loop()
	}
	b.mu.Unlock()
	select {
	case e := <-ch:
		return e
	case <-ctx.Done():
		return schema.Errorf(schema.ErrUnavailable, "read timed out confirming leadership")
	}
}

func (b *readBarrier) loop() {
	for {
		b.mu.Lock()
		batch := b.waiters
		b.waiters = nil
		if len(batch) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		e := b.confirm()
		for _, ch := range batch {
			ch <- e
		}
	}
}

func (b *readBarrier) confirm() *schema.Error {
	commit := b.raft.CommitIndex()
	if err := b.raft.VerifyLeader().Error(); err != nil {
		return schema.Errorf(schema.ErrNotLeader, "this node is no longer the leader")
	}
	return b.applied.WaitApplied(commit, b.timeout)
}
