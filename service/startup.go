package service

import (
	"fmt"
	"io"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/service/failpoint"
)

// What a node is doing while it cannot serve, in words an operator and a
// client read: "restoring snapshot, 412 MB of 980 MB", "replaying log,
// entry 5000 of 80000", "waiting for a leader". One function (activity)
// says it, and every view repeats it: the standby's 503 replies
// (standby.go), /readyz (health.go), and the node report that `concord
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

// restoreProgress is how far the running snapshot restore has read.
type restoreProgress struct {
	active atomic.Bool
	done   atomic.Int64
	total  atomic.Int64 // -1 when unknown
}

func (p *restoreProgress) begin(total int64) {
	p.done.Store(0)
	p.total.Store(total)
	p.active.Store(true)
}

func (p *restoreProgress) end() { p.active.Store(false) }

// describe says how far the restore is, or "" when none runs.
func (p *restoreProgress) describe() string {
	if !p.active.Load() {
		return ""
	}
	done, total := p.done.Load(), p.total.Load()
	if total < 0 {
		return fmt.Sprintf("restoring snapshot, %s read", formatBytes(done))
	}
	return fmt.Sprintf("restoring snapshot, %s of %s", formatBytes(done), formatBytes(total))
}

// formatBytes writes a size in decimal units, with a digit after the point
// below 10 of a unit: "36 kB", "4.2 MB", "412 MB", "1.3 GB".
func formatBytes(n int64) string {
	units := []string{"B", "kB", "MB", "GB", "TB"}
	v, u := float64(n), 0
	for v >= 1000 && u < len(units)-1 {
		v /= 1000
		u++
	}
	if u == 0 || v >= 10 {
		return fmt.Sprintf("%.0f %s", v, units[u])
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}

// activity says what keeps this node from serving, or "" when it serves:
// it leads and answers requests, or it follows a leader it knows with
// every entry it knows to be committed applied. A follower's "" is not
// readiness: Ready also compares with the leader's commit index.
func (s *Service) activity() string {
	if d := s.restore.describe(); d != "" {
		return d
	}
	if !s.raftStarted.Load() {
		return phaseText[startPhase(s.phase.Load())]
	}
	_, leader := s.raft.LeaderWithID()
	if leader == "" {
		return "waiting for a leader"
	}
	applied, commit := s.sm.applied.get(), s.raft.CommitIndex()
	if leader == raft.ServerID(s.cfg.NodeID) {
		if s.serving() {
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

// applyTarget is the last entry up to index that the state machine will
// apply: Raft hands it no no-op or barrier entry, so an applied index
// below a commit index that ends in those is caught up. It is index when
// the log cannot be read.
func (s *Service) applyTarget(applied, index uint64) uint64 {
	if applied >= index {
		return applied
	}
	last, err := s.reads.applied.lastFSMEntry(applied, index)
	if err != nil {
		return index
	}
	return last
}

// describeReplay describes the replay of the log up to target, counted from the
// index the snapshot restored, or "" once applied reaches it.
func (s *Service) describeReplay(applied, target uint64) string {
	if applied >= target {
		return ""
	}
	base := min(s.replayFrom, applied)
	return fmt.Sprintf("replaying log, entry %d of %d", applied-base, target-base)
}

// raftFSM is the state machine as Raft sees it: the stateMachine, with a
// restore that reports its progress (and that the test hook can hold) and
// snapshots whose writing the test hook can hold. It embeds the
// stateMachine, so Raft still finds raft.BatchingFSM.
type raftFSM struct {
	*stateMachine
	s *Service
}

var _ raft.BatchingFSM = raftFSM{}

// Restore counts the bytes the state machine reads from the snapshot.
// Raft restores at start (inside raft.NewRaft), when a follower installs
// the leader's snapshot, and for a user restore; all three are reported.
// Raft hands the state machine its own wrapper of the opened snapshot, so
// the size comes from the opened snapshot itself (sizedReader), once the
// first read reaches it.
func (f raftFSM) Restore(rc io.ReadCloser) error {
	p := &f.s.restore
	p.begin(-1)
	defer p.end()
	cr := &countingReader{ReadCloser: rc, p: p, atHalf: func() {
		failpoint.Inject(failpoint.SnapshotRestore)
		if f.s.pause != nil {
			f.s.pause.hold(pauseRestore)
		}
	}}
	return f.stateMachine.Restore(cr)
}

// Snapshot hands Raft the state machine's snapshot; under the test hook,
// one whose writing can be held part-way.
func (f raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	snap, err := f.stateMachine.Snapshot()
	if err != nil || f.s.pause == nil {
		return snap, err
	}
	return &holdingSnapshot{FSMSnapshot: snap, hold: func() { f.s.pause.hold(pausePersist) }}, nil
}

// countingReader adds what it reads to the restore's progress and calls
// atHalf once, when half the snapshot has been read (so that a test that
// holds or kills the node there sees part of it read).
type countingReader struct {
	io.ReadCloser
	p      *restoreProgress
	atHalf func()
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.ReadCloser.Read(b)
	d := c.p.done.Add(int64(n))
	if total := c.p.total.Load(); c.atHalf != nil && total > 0 && d >= total/2 {
		h := c.atHalf
		c.atHalf = nil
		h()
	}
	return n, err
}

// sizedSnapshots is the snapshot store Raft uses: the file store, whose
// opened snapshots tell a running restore their size. Raft opens a
// snapshot to restore it and, on a leader, to send it to a follower; a
// restore runs on a node that is not sending (at start, or on a follower),
// so the snapshot read while a restore waits for its size is the one it
// restores.
type sizedSnapshots struct {
	raft.SnapshotStore
	restore *restoreProgress
}

func (s sizedSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err != nil {
		return meta, rc, err
	}
	return meta, &sizedReader{ReadCloser: rc, size: meta.Size, restore: s.restore}, nil
}

// sizedReader is an opened snapshot that gives its size to the restore
// that reads it, on the first read.
type sizedReader struct {
	io.ReadCloser
	size    int64
	restore *restoreProgress
	told    bool
}

func (r *sizedReader) Read(b []byte) (int, error) {
	if !r.told {
		r.told = true
		if r.restore.active.Load() {
			r.restore.total.CompareAndSwap(-1, r.size)
		}
	}
	return r.ReadCloser.Read(b)
}
