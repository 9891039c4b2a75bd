package service

import (
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// onDiskFull hears the log store's verdict on its disk
// (logstore.Options.OnDiskFull): full while it has no room reserved for
// the next log segment, or too little free space beside it. It logs each
// change once, and sets the gauge and the gate below. The store calls it
// holding its own lock, so it only records.
func (s *Service) onDiskFull(full error) {
	if full == nil {
		s.diskFull.Store(nil)
		s.metrics.DiskFull.Set(0)
		s.log.Info("the data directory's disk has room again: this node takes new leases, puts and transactions")
		return
	}
	cause := full.Error()
	s.diskFull.Store(&cause)
	s.metrics.DiskFull.Set(1)
	s.log.Error("the data directory's disk is full: this node takes no new leases, puts or transactions until space is freed", "cause", cause)
}

// diskFullError refuses a request that adds state while this node's disk
// is full. Only the leader serves requests, so this is the leader's own
// disk: the log entry would go there first. What shrinks or keeps state
// (keep-alives, revokes, deletes, compaction) still goes through: the
// segment being written has room for it, and refusing keep-alives would
// turn a full disk into expired sessions.
func (s *Service) diskFullError(ep subjects.Endpoint) *schema.Error {
	if !ep.AddsState() {
		return nil
	}
	cause := s.diskFull.Load()
	if cause == nil {
		return nil
	}
	return schema.Errorf(schema.ErrDiskFull, "node %s takes no new leases, puts or transactions: its disk is full (%s); nothing was changed. "+
		"Free space on its data directory: writes resume within seconds", s.cfg.NodeID, *cause)
}
