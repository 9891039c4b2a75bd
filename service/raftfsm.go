package service

import (
	"fmt"
	"io"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/service/failpoint"
)

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

// raftFSM is the state machine as Raft sees it: the stateMachine, with a
// restore that reports its progress (and that the test hook can hold) and
// snapshots whose writing the test hook can hold. It embeds the
// stateMachine, so Raft still finds raft.BatchingFSM.
type raftFSM struct {
	*stateMachine
	restore *restoreProgress
	// pause, when set, is the test hook that can hold a restore or a
	// snapshot's writing part-way.
	pause *testPause
}

var _ raft.BatchingFSM = raftFSM{}

// Restore counts the bytes the state machine reads from the snapshot.
// Raft restores at start (inside raft.NewRaft), when a follower installs
// the leader's snapshot, and for a user restore; all three are reported.
// Raft hands the state machine its own wrapper of the opened snapshot, so
// the size comes from the opened snapshot itself (sizedReader), once the
// first read reaches it.
func (f raftFSM) Restore(rc io.ReadCloser) error {
	p := f.restore
	p.begin(-1)
	defer p.end()
	cr := &countingReader{ReadCloser: rc, p: p, atHalf: func() {
		failpoint.Inject(failpoint.SnapshotRestore)
		if f.pause != nil {
			f.pause.hold(pauseRestore)
		}
	}}
	return f.stateMachine.Restore(cr)
}

// Snapshot hands Raft the state machine's snapshot; under the test hook,
// one whose writing can be held part-way.
func (f raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	snap, err := f.stateMachine.Snapshot()
	if err != nil || f.pause == nil {
		return snap, err
	}
	return &holdingSnapshot{FSMSnapshot: snap, hold: func() { f.pause.hold(pausePersist) }}, nil
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
