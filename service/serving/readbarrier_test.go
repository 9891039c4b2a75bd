package serving

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/internal/testwait"
	"github.com/concord-io/concord/service/replica"
)

// Every confirmed read sees at least the commit index of the moment it
// arrived, while writes commit concurrently.
func TestReadBarrierSeesTheCommitIndexAtArrival(t *testing.T) {
	n := startInmemNode(t)
	b := n.barrier()
	stop := make(chan struct{})
	var writes sync.WaitGroup
	writes.Add(1)
	go func() {
		defer writes.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			data, err := fsm.Encode(int64(i), &fsm.Put{Key: fmt.Sprintf("k%d", i%10), Value: []byte(`1`)})
			if err != nil {
				t.Error(err)
				return
			}
			if err := n.raft.Apply(data, 5*time.Second).Error(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	// Reads start once a write has been applied: before it, the log ends
	// in the leader's no-op and barrier entries, which the state machine
	// never sees, so its applied index rightly stays below the commit
	// index (TestAppliedWaiterSkipsNonCommandTail covers that case).
	first := n.raft.LastIndex()
	testwait.Until(t, "the first write is applied", func() bool { return n.sm.Applied.Get() > first })
	testwait.Concurrently(t, 8, func(int) error {
		for i := 0; i < 50; i++ {
			arrived := n.raft.CommitIndex()
			if _, e := b.now(context.Background(), false); e != nil {
				return e
			}
			if got := n.sm.Applied.Get(); got < arrived {
				return fmt.Errorf("read served at applied index %d, below the commit index %d at its arrival", got, arrived)
			}
		}
		return nil
	})
	close(stop)
	writes.Wait()
}

// Without a running lease clock (only a leader's runs) no read is served,
// serializable or not.
func TestReadBarrierRefusesWithoutLeadership(t *testing.T) {
	n := startInmemNode(t)
	b := n.barrier()
	if now, e := b.now(context.Background(), true); e != nil || now < 0 {
		t.Fatalf("serializable read: %d, %v", now, e)
	}
	n.clockStopped.Store(true)
	for _, serializable := range []bool{true, false} {
		if _, e := b.now(context.Background(), serializable); e == nil || e.Name != schema.ErrNotLeader {
			t.Fatalf("serializable %v with the clock stopped: %v, want not_leader", serializable, e)
		}
	}
}

// countingLeader counts leadership checks and holds each until released;
// a check fails with err.
type countingLeader struct {
	calls   atomic.Int32
	release chan struct{}
	err     error
}

func (c *countingLeader) CommitIndex() uint64 { return 0 }
func (c *countingLeader) VerifyLeader() raft.Future {
	c.calls.Add(1)
	<-c.release
	return errFuture{c.err}
}

type errFuture struct{ err error }

func (f errFuture) Error() error { return f.err }

// runningClock is a lease clock that always runs, at 0.
type runningClock struct{}

func (runningClock) LeaseNow() (int64, bool) { return 0, true }

// appliedNode waits for an applied index as a node does.
type appliedNode struct{ w replica.AppliedWaiter }

func (a appliedNode) WaitApplied(index uint64, timeout time.Duration) *schema.Error {
	return a.w.Wait(index, timeout)
}

// Reads that arrive while a check runs share the next one, and a check
// that fails fails its whole batch.
func TestReadBarrierBatchesLeadershipChecks(t *testing.T) {
	for _, lost := range []bool{false, true} {
		t.Run(fmt.Sprintf("lost=%v", lost), func(t *testing.T) { testReadBatches(t, lost) })
	}
}

func testReadBatches(t *testing.T, lost bool) {
	leader := &countingLeader{release: make(chan struct{})}
	if lost {
		leader.err = raft.ErrNotLeader
	}
	applied := replica.NewAppliedIndex()
	waiter := appliedNode{replica.AppliedWaiter{Applied: &applied, Log: raft.NewInmemStore()}}
	b := newReadBarrier(leader, waiter, runningClock{}, 5*time.Second)
	const reads = 20
	errs := make(chan *schema.Error, reads)
	go func() { _, e := b.now(context.Background(), false); errs <- e }()
	testwait.Until(t, "the first check starts", func() bool { return leader.calls.Load() == 1 })
	for i := 1; i < reads; i++ {
		go func() { _, e := b.now(context.Background(), false); errs <- e }()
	}
	testwait.Until(t, "the reads queue", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.waiters) == reads-1
	})
	close(leader.release)
	for i := 0; i < reads; i++ {
		e := <-errs
		if lost && (e == nil || e.Name != schema.ErrNotLeader) || !lost && e != nil {
			t.Fatalf("read %d: %v (leadership lost: %v)", i, e, lost)
		}
	}
	if got := leader.calls.Load(); got != 2 {
		t.Fatalf("%d leadership checks for %d reads, want 2", got, reads)
	}
}
