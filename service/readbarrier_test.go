package service

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

// inmemNode is a single-node Raft with its log in memory and the real
// state machine: what a read barrier is built from, without NATS or a disk.
type inmemNode struct {
	raft  *raft.Raft
	store *raft.InmemStore
	sm    *replica.StateMachine
	clock leaseClock
}

func startInmemNode(t *testing.T) *inmemNode {
	t.Helper()
	n := &inmemNode{store: raft.NewInmemStore(), sm: replica.NewStateMachine(func(uint64, []schema.Event) {})}
	addr, trans := raft.NewInmemTransport("")
	conf := raft.DefaultConfig()
	conf.LocalID = "n1"
	conf.HeartbeatTimeout = 100 * time.Millisecond
	conf.ElectionTimeout = 100 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.LogOutput = discard{}
	r, err := raft.NewRaft(conf, n.sm, n.store, n.store, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Shutdown().Error() })
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: addr}}}).Error(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the node leads", func() bool { return r.State() == raft.Leader })
	if err := r.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	n.raft = r
	n.clock.startAt(0)
	return n
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func (n *inmemNode) barrier() *readBarrier {
	return newReadBarrier(n.raft, replica.AppliedWaiter{Applied: &n.sm.Applied, Log: n.store}, &n.clock, 5*time.Second)
}

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
	concurrently(t, 8, func(int) error {
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
	n.clock.stop()
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
	var clock leaseClock
	clock.startAt(0)
	b := newReadBarrier(leader, replica.AppliedWaiter{Applied: &applied, Log: raft.NewInmemStore()}, &clock, 5*time.Second)
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
