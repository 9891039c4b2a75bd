package replica

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"
)

// A restart restores the newest snapshot and then applies again every
// command the log holds after it; after a kill -9 nothing shortens that
// replay. Raft takes a snapshot once SnapshotThreshold log entries have
// been written since the last one, but a log entry may be a batch of many
// commands (the leader batches them): after a load of a million keys
// through the API, 3,857 entries held 280,721 puts, whose replay took
// longer than restoring the snapshot. So the node also counts commands, and asks Raft
// for a snapshot once the commands since the newest one (the replay debt)
// reach SnapshotThreshold and either
//
//   - 1/snapshotReplayDivisor of the records the state holds (keys and
//     the history's changes), so that the replay stays in proportion to
//     the restore: a replayed put cost about 6 µs and a restored record
//     about 1 µs, so at most about 1.5 times the restore, 0.75 on
//     average. Every command pays for writing snapshotReplayDivisor
//     records beside the writes, and after each snapshot the writes copy
//     the tree nodes the snapshot shares: with a sixteenth, rewriting a
//     million keys ran at 14,974 puts/s against 25,393 with log entries
//     alone (bin/etcdbench scale --only-concord --keys 1000000 --rewrites
//     3, one run each, 2026-12-04);
//   - or nothing more, once the node is quiet (fewer than quietCommands
//     commands in the last check): the snapshot then uses capacity that
//     is spare, and a node restarted after a burst of writes, or stopped
//     while quiet, replays next to nothing.
const snapshotReplayDivisor = 4

// quietCommands is the most commands a check period may apply for the
// node to count as quiet: lease ticks and keep-alives of a node otherwise
// idle stay below it.
const quietCommands = 100

// snapshotCheckEvery is how often the node compares its replay debt with
// the bounds.
const snapshotCheckEvery = time.Second

// snapshotDue reports whether a snapshot is due, with debt commands
// applied since the newest one, recent of them in the last check period,
// and records in the state.
func snapshotDue(debt, recent, records, threshold uint64) bool {
	if debt < threshold {
		return false
	}
	return recent < quietCommands || debt >= records/snapshotReplayDivisor
}

// SnapshotDueAt is the replay debt at which a snapshot is due on a busy
// node with records in its state: a node whose debt stays well above it
// is not getting its snapshots written.
func SnapshotDueAt(records, threshold uint64) uint64 {
	return max(threshold, records/snapshotReplayDivisor)
}

// Snapshotter takes a snapshot on demand; *raft.Raft is one.
type Snapshotter interface {
	Snapshot() raft.SnapshotFuture
}

// SnapshotTrigger asks Raft for a snapshot whenever one is due.
type SnapshotTrigger struct {
	SM   *StateMachine
	Raft Snapshotter
	// CaughtUp closes once the node has applied the log it started with.
	CaughtUp <-chan struct{}
	// Threshold is the least replay debt that makes a snapshot due;
	// interval is how long to wait after a snapshot failed.
	Threshold uint64
	Interval  time.Duration
	Log       *slog.Logger
	// OnFailure, when set, learns of each snapshot that failed.
	OnFailure func()
}

// Run asks for snapshots until ctx ends. It waits while the node replays
// the log it started with: a snapshot then would compete with the replay,
// which keeps the node from serving; the replay's debt is paid by the
// first snapshot after it.
func (s SnapshotTrigger) Run(ctx context.Context) {
	t := time.NewTicker(snapshotCheckEvery)
	defer t.Stop()
	last := s.SM.Commands()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.SM.Commands()
		recent := now - last
		last = now
		select {
		case <-s.CaughtUp:
		default:
			continue
		}
		commands, records := s.SM.ReplayDebt()
		if !snapshotDue(commands, recent, records, s.Threshold) {
			continue
		}
		// Raft writes one snapshot at a time: this waits for one that
		// runs, and then writes ours. What applies meanwhile does not
		// count towards the next check's quiet.
		err := Await(ctx, s.Raft.Snapshot())
		last = s.SM.Commands()
		switch {
		case err == nil:
			s.Log.Debug("snapshot taken for the commands applied since the last one", "commands", commands, "records", records)
		case errors.Is(err, raft.ErrNothingNewToSnapshot), errors.Is(err, raft.ErrRaftShutdown), ctx.Err() != nil:
		default:
			if s.OnFailure != nil {
				s.OnFailure()
			}
			// Not every second: a failed snapshot may have written most
			// of the state before it failed.
			s.Log.Warn("snapshot for the commands applied since the last one; trying again after the snapshot interval", "commands", commands, "err", err, "interval", s.Interval)
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.Interval):
			}
			last = s.SM.Commands()
		}
	}
}
