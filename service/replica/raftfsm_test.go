package replica

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/datadir"
)

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 999: "999 B", 1000: "1.0 kB", 36_400: "36 kB", 4_240_000: "4.2 MB",
		412_000_000: "412 MB", 980_400_000: "980 MB", 1_300_000_000: "1.3 GB", 9_990_000_000_000_000: "9990 TB",
	} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// snapshotBytes is a Raft snapshot of an empty state at applied index 42:
// the frame, then the fsm snapshot.
func snapshotBytes(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := datadir.WriteSnapshotFrame(&buf, 42); err != nil {
		t.Fatal(err)
	}
	if _, err := fsm.New().Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// watchedReader stands where Raft puts its own wrapper around the opened
// snapshot, and records what the node says at every read.
type watchedReader struct {
	io.ReadCloser
	p    *RestoreProgress
	seen []string
}

func (w *watchedReader) Read(b []byte) (int, error) {
	w.seen = append(w.seen, w.p.Describe())
	return w.ReadCloser.Read(b)
}

// A restore says how far it has read, in bytes of the snapshot's size,
// which the opened snapshot tells it through Raft's own wrapper; once
// done, it says nothing.
func TestRestoreReportsProgress(t *testing.T) {
	data := snapshotBytes(t)
	var p RestoreProgress
	sm := NewStateMachine(func(uint64, string, []schema.Event) {})
	opened := &sizedReader{ReadCloser: io.NopCloser(iotest.OneByteReader(bytes.NewReader(data))), size: int64(len(data)), restore: &p}
	w := &watchedReader{ReadCloser: opened, p: &p}
	if err := (FSM{StateMachine: sm, Progress: &p}).Restore(w); err != nil {
		t.Fatal(err)
	}
	if got := sm.Applied.Get(); got != 42 {
		t.Fatalf("applied index %d after the restore, want 42", got)
	}
	total := formatBytes(int64(len(data)))
	if w.seen[0] != "restoring snapshot, 0 B read" {
		t.Errorf("before the first read: %q", w.seen[0])
	}
	mid := w.seen[len(w.seen)/2]
	if !strings.HasPrefix(mid, "restoring snapshot, ") || !strings.HasSuffix(mid, " of "+total) || mid == "restoring snapshot, 0 B of "+total {
		t.Errorf("half-way: %q, want some of %s", mid, total)
	}
	if d := p.Describe(); d != "" {
		t.Errorf("after the restore: %q", d)
	}
}

// The pause switch holds a restore half-way for as long as its file says
// so, and the progress shows half of the snapshot read meanwhile.
func TestPauseHoldsRestore(t *testing.T) {
	data := snapshotBytes(t)
	path := filepath.Join(t.TempDir(), "pause.json")
	write := func(points ...string) {
		b, _ := json.Marshal(pauseFile{Hold: points})
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(pauseRestore)
	done := make(chan struct{})
	defer close(done)
	pause := NewTestPause(path, slog.New(slog.NewTextHandler(io.Discard, nil)), done)
	var p RestoreProgress
	sm := NewStateMachine(func(uint64, string, []schema.Event) {})
	opened := &sizedReader{ReadCloser: io.NopCloser(iotest.OneByteReader(bytes.NewReader(data))), size: int64(len(data)), restore: &p}
	restored := make(chan error, 1)
	go func() { restored <- (FSM{StateMachine: sm, Progress: &p, Pause: pause}).Restore(opened) }()
	deadline := time.Now().Add(10 * time.Second)
	for p.done.Load() < int64(len(data))/2 {
		if time.Now().After(deadline) {
			t.Fatal("the restore did not get half-way")
		}
		time.Sleep(time.Millisecond)
	}
	held := p.done.Load()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-restored:
		t.Fatalf("the restore ended while held: %v", err)
	default:
	}
	if got := p.done.Load(); got != held || held >= int64(len(data)) {
		t.Fatalf("held at %d bytes, then %d, of %d", held, got, len(data))
	}
	write()
	select {
	case err := <-restored:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the restore did not go on once released")
	}
}
