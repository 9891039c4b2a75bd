package service

import (
	"github.com/concord-io/concord/schema"
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

// busGuard is the guard of this node's bus.
func (s *Service) busGuard() bus.Guard {
	return bus.Guard{Prober: s.prober, Names: s.names, Embedded: s.embedded(), Wait: s.cfg.BootstrapWait, Log: s.log}
}

// embedded is the node's embedded NATS server, nil on an external one.
func (s *Service) embedded() *bus.Embedded {
	if s.ns == nil {
		return nil
	}
	return &bus.Embedded{Server: s.ns, Opts: s.nsOpts}
}

// checkBootstrap refuses to bootstrap unless the bus is free of other
// clusters; then, answering for itself, it listens for a node
// bootstrapping at the same time: of two such nodes at most one goes on.
func (s *Service) checkBootstrap() error {
	g := s.busGuard()
	settle, err := g.CheckBusFree(s.ctx)
	if err != nil {
		return err
	}
	if err := s.serveNodeInfoSubjects(); err != nil {
		return err
	}
	return g.CheckAlone(settle)
}

// conflictError is the reply to every request while another cluster
// serves this prefix on the bus, nil otherwise.
func (s *Service) conflictError() *schema.Error { return s.fence.Err() }

// signalFence wakes the leadership loop to apply a conflict change.
func (s *Service) signalFence() {
	select {
	case s.fenceCh <- struct{}{}:
	default:
	}
}

// serving reports whether this node's leader subscription is up.
func (s *Service) serving() bool { return s.servingSince() != 0 }

// servingSince is when this node's leader subscription came up (unix
// nanoseconds), 0 while it has none.
func (s *Service) servingSince() int64 {
	if s.srv == nil {
		return 0
	}
	return s.srv.ServingSince()
}
