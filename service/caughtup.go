package service

import (
	"context"
	"time"
)

// caughtUpBound is the longest watchCaughtUp waits: a follower that hears
// no leader applies nothing, and what waits for the replay to end (the
// command-count snapshots, replica.SnapshotTrigger) should not wait for ever.
const caughtUpBound = 2 * time.Minute

// watchCaughtUp closes caughtUp once this node has applied every entry its
// log held when it started, which a restart replays on top of its snapshot
// (a node with an empty log has at once), or after caughtUpBound, or when
// the node closes; and says how long the replay took. It runs once Raft
// has restored the snapshot (inside raft.NewRaft). Raft applies the log
// after it once this node leads, or follows a leader whose commit index
// covers it.
func (s *Service) watchCaughtUp(ctx context.Context) {
	defer close(s.caughtUp)
	bound := time.NewTimer(caughtUpBound)
	defer bound.Stop()
	// The entries at the end of the log that the state machine is not
	// handed (Raft's no-op and barrier entries) are never applied.
	target, err := s.applied.LastFSMEntry(s.replayFrom, s.lastAtStart)
	if err != nil {
		s.log.Warn("read the raft log", "err", err)
		return
	}
	start := time.Now()
	for {
		applied, changed := s.sm.Applied.WaitCh()
		if applied >= target {
			if target > s.replayFrom {
				s.log.Info("applied the log this node started with", "entries", target-s.replayFrom,
					"commands", s.sm.Commands(), "since_raft_started", time.Since(start).Round(time.Millisecond).String())
			}
			return
		}
		select {
		case <-changed:
		case <-bound.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
