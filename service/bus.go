package service

import (
	"errors"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/service/bus"
)

// One cluster per bus and prefix (service/bus): a bootstrap needs
// positive evidence that the bus is free, a restart refuses a bus where
// another cluster answers, and the fence stops the node serving while one
// does.

// ErrBootstrapRefused reports a bootstrap without positive evidence that
// the bus is free of other clusters.
var ErrBootstrapRefused = bus.ErrBootstrapRefused

// ErrForeignCluster reports a node whose data belongs to another cluster,
// or a bootstrap on a bus where a cluster already answers.
var ErrForeignCluster = bus.ErrForeignCluster

// checkBootstrap refuses to bootstrap unless the bus is free of other
// clusters; then, answering for itself, it listens for a node
// bootstrapping at the same time: of two such nodes at most one goes on.
func (s *Service) checkBootstrap() error {
	settle, err := s.guard.CheckBusFree(s.ctx)
	if err != nil {
		return err
	}
	if err := s.serveNodeInfoSubjects(); err != nil {
		return err
	}
	return s.guard.CheckAlone(settle)
}

// signalFence wakes the leadership loop to apply a conflict change.
func (s *Service) signalFence() {
	select {
	case s.fenceCh <- struct{}{}:
	default:
	}
}

// servingSince is when this node's leader subscription came up (unix
// nanoseconds), 0 while it has none.
func (s *Service) servingSince() int64 {
	if s.srv == nil {
		return 0
	}
	return s.srv.ServingSince()
}

// errRaftNotRunning answers questions about the membership before Raft
// runs: the membership is in the snapshot and the log that raft.NewRaft
// reads.
var errRaftNotRunning = errors.New("raft is not running yet")

// raftMembers lists the members of the Raft configuration.
func (s *Service) raftMembers() ([]raft.Server, error) {
	if !s.raftStarted.Load() {
		return nil, errRaftNotRunning
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	return f.Configuration().Servers, nil
}
