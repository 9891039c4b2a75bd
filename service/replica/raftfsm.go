package replica

import (
	"fmt"
	"io"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/service/failpoint"
)

// RestoreProgress is how far the running snapshot restore has read.
type RestoreProgress struct {
	active atomic.Bool
	done   atomic.Int64
	total  atomic.Int64 // -1 when unknown
}

func (p *RestoreProgress) Begin(total int64) {
	p.done.Store(0)
	p.total.Store(total)
	p.active.Store(true)
}

func (p *RestoreProgress) End() { p.active.Store(false) }

// Progress says how far the restore is: bytes read, of total (-1 when
// unknown), and whether one runs.
func (p *RestoreProgress) Progress() (done, total int64, active bool) {
	return p.done.Load(), p.total.Load(), p.active.Load()
}

// Describe says how far the restore is, or "" when none runs.
func (p *RestoreProgress) Describe() string {
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

// FSM is the state machine as Raft sees it: the stateMachine, with a
// restore that reports its progress (and that the test hook can hold) and
// snapshots whose writing the test hook can hold. It embeds the
// stateMachine, so Raft still finds raft.BatchingFSM.
type FSM struct {
	*StateMachine
	Progress *RestoreProgress
	// Pause, when set, is the test hook that can hold a restore or a
	// snapshot's writing part-way.
	Pause *TestPause
}

var _ raft.BatchingFSM = FSM{}

// Restore counts the bytes the state machine reads from the snapshot.
// Raft restores at start (inside raft.NewRaft), when a follower installs
// the leader's snapshot, and for a user restore; all three are reported.
// Raft hands the state machine its own wrapper of the opened snapshot, so
// the size comes from the opened snapshot itself (sizedReader), once the
// first read reaches it.
func (f FSM) Restore(rc io.ReadCloser) error {
	p := f.Progress
	p.Begin(-1)
	defer p.End()
	cr := &countingReader{ReadCloser: rc, p: p, atHalf: func() {
		failpoint.Inject(failpoint.SnapshotRestore)
		if f.Pause != nil {
			f.Pause.hold(pauseRestore)
		}
	}}
	return f.StateMachine.Restore(cr)
}

// Snapshot hands Raft the state machine's snapshot; under the test hook,
// one whose writing can be held part-way.
func (f FSM) Snapshot() (raft.FSMSnapshot, error) {
	snap, err := f.StateMachine.Snapshot()
	if err != nil || f.Pause == nil {
		return snap, err
	}
	return &holdingSnapshot{FSMSnapshot: snap, hold: func() { f.Pause.hold(pausePersist) }}, nil
}

// countingReader adds what it reads to the restore's progress and calls
// atHalf once, when half the snapshot has been read (so that a test that
// holds or kills the node there sees part of it read).
type countingReader struct {
	io.ReadCloser
	p      *RestoreProgress
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

// SizedSnapshots is the snapshot store Raft uses: the file store, whose
// opened snapshots tell a running restore their size. Raft opens a
// snapshot to restore it and, on a leader, to send it to a follower; a
// restore runs on a node that is not sending (at start, or on a follower),
// so the snapshot read while a restore waits for its size is the one it
// restores.
type SizedSnapshots struct {
	raft.SnapshotStore
	Progress *RestoreProgress
}

func (s SizedSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err != nil {
		return meta, rc, err
	}
	return meta, &sizedReader{ReadCloser: rc, size: meta.Size, restore: s.Progress}, nil
}

// sizedReader is an opened snapshot that gives its size to the restore
// that reads it, on the first read.
type sizedReader struct {
	io.ReadCloser
	size    int64
	restore *RestoreProgress
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
