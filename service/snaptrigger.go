package service

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// A restart restores the newest snapshot and then applies again every
// command the log holds after it; after a kill -9 nothing shortens that
// replay. Raft takes a snapshot once SnapshotThreshold log entries have
// been written since the last one, but a log entry may be a batch of many
// commands (proposer.go): under load 8192 entries held hundreds of
// thousands of puts, and replaying them took longer than restoring the
// million keys of the snapshot. So the node also counts commands, and asks
// Raft for a snapshot once the commands since the newest one reach
// SnapshotThreshold and 1/snapshotReplayDivisor of the records the state
// holds. The second bound makes replay cost at most about an eighth of the
// restore (applying a put costs about what restoring a key does), and
// keeps the cost of snapshotting a large state in proportion: every
// command pays for writing about snapshotReplayDivisor records.
const snapshotReplayDivisor = 8

// snapshotCheckEvery is how often the node compares its replay debt with
// the bound.
const snapshotCheckEvery = time.Second

// snapshotDue reports whether a snapshot is due, with commands applied
// since the newest one and records in the state.
func snapshotDue(commands, records, threshold uint64) bool {
	return commands >= max(threshold, records/snapshotReplayDivisor)
}

// runSnapshotTrigger asks Raft for a snapshot whenever one is due, until
// ctx ends. It waits while the node replays the log it started with: a
// snapshot then would compete with the replay, which keeps the node from
// serving; the replay's debt is paid by the first snapshot after it.
func (s *Service) runSnapshotTrigger(ctx context.Context) {
	t := time.NewTicker(snapshotCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		select {
		case <-s.caughtUp:
		default:
			continue
		}
		commands, records := s.sm.replayDebt()
		if !snapshotDue(commands, records, s.cfg.SnapshotThreshold) {
			continue
		}
		// Raft writes one snapshot at a time: this waits for one that
		// runs, and then writes ours.
		err := await(ctx, s.raft.Snapshot())
		switch {
		case err == nil:
			s.log.Debug("snapshot taken for the commands applied since the last one", "commands", commands, "records", records)
		case errors.Is(err, raft.ErrNothingNewToSnapshot), errors.Is(err, raft.ErrRaftShutdown), ctx.Err() != nil:
		default:
			// Not every second: a failed snapshot may have written most
			// of the state before it failed.
			s.log.Warn("snapshot for the commands applied since the last one; trying again after the snapshot interval", "commands", commands, "err", err, "interval", s.cfg.SnapshotInterval)
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.cfg.SnapshotInterval):
			}
		}
	}
}
