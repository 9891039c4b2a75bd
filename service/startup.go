package service

import (
	"fmt"

	"github.com/hashicorp/raft"
)

// What a node is doing while it cannot serve, in words an operator and a
// client read: "restoring snapshot, 412 MB of 980 MB", "replaying log,
// entry 5000 of 80000", "waiting for a leader". One function (activity)
// says it, and every view repeats it: the standby's 503 replies
// (service/bus), /readyz (health.go), and the node report that `concord
// status` prints (cluster.go).

// startPhase is the step of start-up a node is in before its Raft runs;
// from then on, what it does is read from Raft itself.
type startPhase int32

const (
	phaseStarting     startPhase = iota // connecting to NATS
	phaseOpeningLog                     // opening (or migrating) the Raft log
	phaseCheckingBus                    // asking the bus whether another cluster serves the prefix
	phaseStartingRaft                   // Raft reads its snapshot and log
	phaseRaft                           // Raft runs
)

var phaseText = map[startPhase]string{
	phaseStarting:     "starting",
	phaseOpeningLog:   "opening the Raft log",
	phaseCheckingBus:  "checking the NATS bus for other clusters",
	phaseStartingRaft: "starting Raft",
}

// activity says what keeps this node from serving, or "" when it serves:
// it leads and answers requests, or it follows a leader it knows with
// every entry it knows to be committed applied. A follower's "" is not
// readiness: Ready also compares with the leader's commit index.
func (s *Service) activity() string {
	if d := s.restore.Describe(); d != "" || !s.raftStarted.Load() {
		return activityBeforeRaft(d, startPhase(s.phase.Load()))
	}
	_, leader := s.raft.LeaderWithID()
	if leader == "" {
		return "waiting for a leader"
	}
	applied, commit := s.sm.Applied.Get(), s.raft.CommitIndex()
	if leader == raft.ServerID(s.cfg.NodeID) {
		if s.servingSince() != 0 {
			return ""
		}
		// The leadership barrier (becomeLeader) applies the whole log
		// before the node subscribes; the entries a restart replays are
		// those between the snapshot and the end of the log.
		if r := s.describeReplay(applied, s.applyTarget(applied, max(commit, s.lastAtStart))); r != "" {
			return r
		}
		return "taking over as leader"
	}
	return s.describeReplay(applied, s.applyTarget(applied, commit))
}

// activityBeforeRaft says what a node does while a snapshot restore runs
// (restore, its progress), or else before its Raft runs (phase).
func activityBeforeRaft(restore string, phase startPhase) string {
	if restore != "" {
		return restore
	}
	return phaseText[phase]
}

// applyTarget is the last entry up to index that the state machine will
// apply: Raft hands it no no-op or barrier entry, so an applied index
// below a commit index that ends in those is caught up. It is index when
// the log cannot be read.
func (s *Service) applyTarget(applied, index uint64) uint64 {
	if applied >= index {
		return applied
	}
	last, err := s.applied.LastFSMEntry(applied, index)
	if err != nil {
		return index
	}
	return last
}

// describeReplay describes the replay of the log up to target, counted from the
// index the snapshot restored, or "" once applied reaches it.
func (s *Service) describeReplay(applied, target uint64) string {
	done, total, replaying := s.replayed(applied, target)
	if !replaying {
		return ""
	}
	return fmt.Sprintf("replaying log, entry %d of %d", done, total)
}

// replayed counts the replay of the log up to target from the index the
// snapshot restored: entries done, of total, and whether it still runs.
func (s *Service) replayed(applied, target uint64) (done, total uint64, replaying bool) {
	if applied >= target {
		return 0, 0, false
	}
	base := min(s.replayFrom, applied)
	return applied - base, target - base, true
}

// StartupProgress is how far the long step of a node's start-up is:
// restoring its snapshot (Bytes) or applying the log it started with
// (entries); Step is "" while neither runs.
type StartupProgress struct {
	Step        string
	Done, Total int64
	Bytes       bool
}

// startupProgress is what the node's activity says in words, in numbers.
// The log counts as replayed once every entry it held at start is
// applied.
func (s *Service) startupProgress() StartupProgress {
	if done, total, active := s.restore.Progress(); active {
		return StartupProgress{Step: "restoring snapshot", Done: done, Total: total, Bytes: true}
	}
	if !s.raftStarted.Load() {
		return StartupProgress{}
	}
	applied := s.sm.Applied.Get()
	// Not up to the commit index, as /readyz counts: a follower that
	// trails a busy leader would never be done, and its bar would stay.
	done, total, replaying := s.replayed(applied, s.applyTarget(applied, s.lastAtStart))
	if !replaying {
		return StartupProgress{}
	}
	return StartupProgress{Step: "replaying log", Done: int64(done), Total: int64(total)}
}
