package service

import (
	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/fsm"
)

// The node as the packages split out of it see it: small adapter types,
// one per package interface, so that what each package may reach of the
// node is written down here and nowhere else.

// metricsSource is the node as its metrics read it at scrape time.
type metricsSource struct{ s *Service }

func (m metricsSource) ReadState(f func(*fsm.State)) { m.s.sm.Read(f) }
func (m metricsSource) AppliedIndex() uint64         { return m.s.sm.Applied.Get() }
func (m metricsSource) BatchEntries() uint64         { return m.s.sm.BatchEntries() }
func (m metricsSource) Batching() bool               { return m.s.proposer.batching.Load() }

func (m metricsSource) Raft() *raft.Raft {
	if !m.s.raftStarted.Load() {
		return nil
	}
	return m.s.raft
}
