package replica

import (
	"encoding/json"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Test hook: the pause switch. Black-box tests kill a node with SIGKILL in
// the middle of a snapshot restore or a snapshot write; to hit that middle
// every time, however fast or busy the machine, they name the point in a
// file (Config.TestPauseFile, the serve flag --test-pause-file), and the
// node stops there for as long as the file names it, after logging
// "test hook: holding at <point>". It is not a feature: nothing but a test
// sets it, and without it nothing is held or read.

// The points the pause switch can hold.
const (
	// pauseRestore: half-way through reading a snapshot into the state.
	pauseRestore = "snapshot-restore"
	// pausePersist: a snapshot being written, after its first bytes.
	pausePersist = "snapshot-persist"
)

// pauseFile is the JSON the pause switch reads.
type pauseFile struct {
	Hold []string `json:"hold"`
}

// TestPause reads the pause file at each point it may hold.
type TestPause struct {
	path string
	log  *slog.Logger
	done <-chan struct{}
}

// NewTestPause returns the pause switch driven by the file at path; a hold
// ends when done closes.
func NewTestPause(path string, log *slog.Logger, done <-chan struct{}) *TestPause {
	return &TestPause{path: path, log: log, done: done}
}

// holds reports whether the file names point now; a missing or unreadable
// file holds nothing.
func (p *TestPause) holds(point string) bool {
	data, err := os.ReadFile(p.path)
	if err != nil {
		return false
	}
	var f pauseFile
	if err := json.Unmarshal(data, &f); err != nil {
		p.log.Warn("pause file unreadable", "path", p.path, "err", err)
		return false
	}
	return slices.Contains(f.Hold, point)
}

// hold waits while the file names point, or until the node stops.
func (p *TestPause) hold(point string) {
	if !p.holds(point) {
		return
	}
	p.log.Warn("test hook: holding at " + point)
	for p.holds(point) {
		select {
		case <-p.done:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.log.Warn("test hook: released at " + point)
}

// holdingSnapshot writes a snapshot through a sink that may hold after
// the first write (the Raft snapshot frame), so the snapshot on disk is
// part-written while it holds.
type holdingSnapshot struct {
	raft.FSMSnapshot
	hold func()
}

func (h *holdingSnapshot) Persist(sink raft.SnapshotSink) error {
	return h.FSMSnapshot.Persist(&holdingSink{SnapshotSink: sink, hold: h.hold})
}

type holdingSink struct {
	raft.SnapshotSink
	hold    func()
	written int64
}

func (h *holdingSink) Write(b []byte) (int, error) {
	if h.hold != nil && h.written > 0 {
		f := h.hold
		h.hold = nil
		f()
	}
	n, err := h.SnapshotSink.Write(b)
	h.written += int64(n)
	return n, err
}
