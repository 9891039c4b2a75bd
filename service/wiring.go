package service

import (
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/replica"
	"github.com/concord-io/concord/subjects"
)

// The node as the packages split out of it see it: small adapter types,
// one per package interface, so that what each package may reach of the
// node is written down here and nowhere else.

// metricsSource is the node as its metrics read it at scrape time.
type metricsSource struct{ s *Service }

func (m metricsSource) ReadState(f func(*fsm.State)) { m.s.sm.Read(f) }
func (m metricsSource) AppliedIndex() uint64         { return m.s.sm.Applied.Get() }
func (m metricsSource) BatchEntries() uint64         { return m.s.sm.BatchEntries() }
func (m metricsSource) Batching() bool               { return m.s.srv != nil && m.s.srv.Batching() }

func (m metricsSource) LeaseClockRunning() bool {
	_, running := m.s.clock.now()
	return running
}
func (m metricsSource) DataDir() string { return m.s.cfg.DataDir }
func (m metricsSource) SnapshotDebt() (debt, dueAt uint64) {
	debt, records := m.s.sm.ReplayDebt()
	return debt, replica.SnapshotDueAt(records, m.s.cfg.SnapshotThreshold)
}

func (m metricsSource) Raft() *raft.Raft {
	if !m.s.raftStarted.Load() {
		return nil
	}
	return m.s.raft
}

// servingNode is the node as its request server sees it.
type servingNode struct{ s *Service }

func (n servingNode) LeaseNow() (int64, bool)      { return n.s.clock.now() }
func (n servingNode) AllRead(format int) bool      { return n.s.formats.AllRead(format) }
func (n servingNode) ConflictError() *schema.Error { return n.s.fence.Err() }
func (n servingNode) DiskFullError(ep subjects.Endpoint) *schema.Error {
	return n.s.diskFullError(ep)
}
func (n servingNode) Apply(entry []byte) raft.ApplyFuture {
	return n.s.raft.Apply(entry, n.s.cfg.ApplyTimeout)
}
func (n servingNode) CommitIndex() uint64       { return n.s.raft.CommitIndex() }
func (n servingNode) VerifyLeader() raft.Future { return n.s.raft.VerifyLeader() }
func (n servingNode) WaitApplied(index uint64, timeout time.Duration) *schema.Error {
	return n.s.applied.Wait(index, timeout)
}

// standbyNode is the node as its standby sees it.
type standbyNode struct{ s *Service }

func (n standbyNode) ServingSince() int64          { return n.s.servingSince() }
func (n standbyNode) Stopping() bool               { return n.s.stopping.Load() }
func (n standbyNode) Activity() string             { return n.s.activity() }
func (n standbyNode) ConflictError() *schema.Error { return n.s.fence.Err() }

func (n standbyNode) RaftLeader() (string, bool) {
	if !n.s.raftStarted.Load() {
		return "", false
	}
	_, id := n.s.raft.LeaderWithID()
	return string(id), true
}

// LoneMember: before Raft runs the membership is not known yet; it is in
// the snapshot and the log that raft.NewRaft reads.
func (n standbyNode) LoneMember() bool {
	servers, err := n.s.raftMembers()
	return err == nil && len(servers) == 1 && string(servers[0].ID) == n.s.cfg.NodeID
}
