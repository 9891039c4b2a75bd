package serving

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/decode"
	"github.com/concord-io/concord/service/internal/testnats"
	"github.com/concord-io/concord/service/internal/testwait"
	"github.com/concord-io/concord/service/replica"
	"github.com/concord-io/concord/subjects"
)

// inmemNode is a single-node Raft with its log in memory and the real
// state machine: what a read barrier is built from, without NATS or a disk.
type inmemNode struct {
	raft  *raft.Raft
	store *raft.InmemStore
	sm    *replica.StateMachine
	// clockStopped stops the lease clock, as on a node that lost
	// leadership; it runs from 0 otherwise.
	clockStopped atomic.Bool
	start        time.Time
}

// The node as a Server sees it: it leads, every member reads every log
// format, and there is no bus conflict and no full disk.

func (n *inmemNode) LeaseNow() (int64, bool) {
	return time.Since(n.start).Milliseconds(), !n.clockStopped.Load()
}
func (n *inmemNode) AllRead(int) bool                              { return true }
func (n *inmemNode) ConflictError() *schema.Error                  { return nil }
func (n *inmemNode) DiskFullError(subjects.Endpoint) *schema.Error { return nil }
func (n *inmemNode) Apply(entry []byte) raft.ApplyFuture           { return n.raft.Apply(entry, 5*time.Second) }
func (n *inmemNode) CommitIndex() uint64                           { return n.raft.CommitIndex() }
func (n *inmemNode) VerifyLeader() raft.Future                     { return n.raft.VerifyLeader() }
func (n *inmemNode) WaitApplied(index uint64, timeout time.Duration) *schema.Error {
	return replica.AppliedWaiter{Applied: &n.sm.Applied, Log: n.store}.Wait(index, timeout)
}

// barrier is the read barrier a Server would build over n.
func (n *inmemNode) barrier() *readBarrier { return newReadBarrier(n, n, n, 5*time.Second) }

func startInmemNode(t *testing.T) *inmemNode {
	t.Helper()
	n := &inmemNode{store: raft.NewInmemStore(), sm: replica.NewStateMachine(func(uint64, string, []schema.Event) {})}
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
	n.start = time.Now()
	return n
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// startServer runs a Server over an in-memory leader and an in-process
// nats-server, subscribed as a leader's is, and returns it with a client
// connection. mod, unless nil, changes its options first.
func startServer(t *testing.T, mod func(*Options)) (*Server, *nats.Conn, *inmemNode) {
	t.Helper()
	n := startInmemNode(t)
	nc := testnats.Connect(t)
	names, _ := subjects.New(subjects.DefaultPrefix)
	limits := decode.Limits{MinTTL: schema.DefaultMinTTL, MaxKeyBytes: subjects.MaxKeyBytes,
		MaxValueBytes: schema.DefaultMaxValueBytes, MaxMetadataBytes: schema.DefaultMaxMetadataBytes,
		MaxTxnCompares: schema.DefaultMaxTxnCompares, MaxTxnOps: schema.DefaultMaxTxnOps, MaxTxnBytes: schema.DefaultMaxTxnBytes}
	o := Options{
		NodeID: "n1", DataDir: t.TempDir(), Version: "v0.0.0-test", MaxInflight: 64, ListingShare: 0.1, ApplyTimeout: 5 * time.Second,
		Log: quietLog(), Names: names, Conn: nc, MaxPayload: nc.MaxPayload(), Decoder: decode.New(limits, nc.MaxPayload()),
		ApplyDuration:  prometheus.NewHistogram(prometheus.HistogramOpts{Name: "apply"}),
		RefusedReplies: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refused"}, []string{"reason"}),
		ListingPaused:  func(time.Duration) {},
	}
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := New(ctx, o, n, n.sm)
	t.Cleanup(func() {
		s.Unsubscribe()
		cancel()
	})
	if err := s.Subscribe(); err != nil {
		t.Fatal(err)
	}
	return s, nc, n
}
