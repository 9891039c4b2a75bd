package replica

import (
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/schema"
)

// AppliedWaiter waits for the state machine's applied index to reach a
// log index.
type AppliedWaiter struct {
	Applied *AppliedIndex
	// Log is the Raft Log the index refers to, read to skip entries the
	// state machine never sees.
	Log LogReader
}

// LogReader reads one entry of the Raft log; raft.LogStore is one.
type LogReader interface {
	GetLog(index uint64, log *raft.Log) error
}

// Wait waits until the state machine has applied every entry up to target
// that it will ever see. Raft does not hand no-op and barrier entries to
// the FSM, so when the tail up to target holds only those, the state is
// already current.
func (w AppliedWaiter) Wait(target uint64, timeout time.Duration) *schema.Error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		applied, changed := w.Applied.WaitCh()
		if applied >= target {
			return nil
		}
		last, err := w.LastFSMEntry(applied, target)
		if err != nil {
			return schema.Errorf(schema.ErrUnavailable, "read the raft log: %v", err)
		}
		if last <= applied {
			return nil
		}
		target = last
		select {
		case <-changed:
		case <-deadline.C:
			return schema.Errorf(schema.ErrUnavailable, "state machine has not caught up with the commit index")
		}
	}
}

// LastFSMEntry returns the highest index in (from, to] of an entry that the
// FSM applies, or from when there is none.
func (w AppliedWaiter) LastFSMEntry(from, to uint64) (uint64, error) {
	var l raft.Log
	for i := to; i > from; i-- {
		if err := w.Log.GetLog(i, &l); err != nil {
			return 0, err
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return i, nil
		}
	}
	return from, nil
}
