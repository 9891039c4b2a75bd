package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
)

func TestSnapshotDue(t *testing.T) {
	const busy = 5000 // commands in the last check: not quiet
	for _, c := range []struct {
		debt, recent, records, threshold uint64
		want                             bool
	}{
		{0, 0, 0, 8192, false},
		{8191, busy, 0, 8192, false},
		{8192, busy, 0, 8192, true},      // a small state: the threshold decides
		{8192, busy, 32768, 8192, true},  // a quarter of the records is the threshold
		{8192, busy, 32772, 8192, false}, // ... and one more record above it
		{499_999, busy, 2_000_000, 8192, false},
		{500_000, busy, 2_000_000, 8192, true}, // a large state: a quarter of it
		{8192, 99, 2_000_000, 8192, true},      // quiet: the threshold is enough
		{8191, 0, 2_000_000, 8192, false},      // ... but it is still needed
		{8192, 100, 2_000_000, 8192, false},    // 100 commands a check is not quiet
	} {
		if got := snapshotDue(c.debt, c.recent, c.records, c.threshold); got != c.want {
			t.Errorf("snapshotDue(debt %d, recent %d, %d records, threshold %d) = %v, want %v", c.debt, c.recent, c.records, c.threshold, got, c.want)
		}
	}
}

// batchLog is the log entry at index of a batch of puts of keys.
func batchLog(t testing.TB, index uint64, keys ...string) *raft.Log {
	t.Helper()
	var entries [][]byte
	for _, k := range keys {
		data, err := fsm.Encode(1000, &fsm.Put{Key: k, Value: json.RawMessage(`1`)})
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, data)
	}
	data, err := fsm.EncodeBatch(entries)
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Type: raft.LogCommand, Index: index, Data: data}
}

// The replay debt counts commands, a batch entry as many; a persisted
// snapshot pays what it holds and no more, a failed one pays nothing, and
// a restore starts from nothing.
func TestReplayDebtCountsCommands(t *testing.T) {
	m := NewStateMachine(func(uint64, string, []schema.Event) {})
	debt := func(want uint64) {
		t.Helper()
		if got, _ := m.ReplayDebt(); got != want {
			t.Fatalf("replay debt %d, want %d", got, want)
		}
	}
	m.ApplyBatch([]*raft.Log{putLog(t, 1, "a"), batchLog(t, 2, "b", "c", "d")})
	debt(4)
	if _, records := m.ReplayDebt(); records < 4 {
		t.Fatalf("%d records for 4 keys", records)
	}
	snap, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	m.ApplyBatch([]*raft.Log{batchLog(t, 3, "e", "f")})
	store := raft.NewInmemSnapshotStore()
	// A failed write pays nothing.
	sink, err := store.Create(raft.SnapshotVersionMax, 2, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(failingSink{sink}); err == nil {
		t.Fatal("a write to a failing sink succeeded")
	}
	debt(6)
	sink, err = store.Create(raft.SnapshotVersionMax, 2, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	debt(2) // e and f came after the snapshot
	_, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Restore(rc); err != nil {
		t.Fatal(err)
	}
	debt(0)
}

// failingSink fails every write.
type failingSink struct{ raft.SnapshotSink }

func (failingSink) Write([]byte) (int, error) { return 0, fmt.Errorf("disk full") }

// failingSnapshotter fails every snapshot it is asked for with err, and
// counts the asks on asked.
type failingSnapshotter struct {
	asked chan struct{}
	err   error
}

func (f failingSnapshotter) Snapshot() raft.SnapshotFuture {
	select {
	case f.asked <- struct{}{}:
	default:
	}
	return failedSnapshot{f.err}
}

type failedSnapshot struct{ err error }

func (f failedSnapshot) Error() error { return f.err }
func (f failedSnapshot) Open() (*raft.SnapshotMeta, io.ReadCloser, error) {
	return nil, nil, f.err
}

// runFailingTrigger runs a snapshot trigger over a state machine with a
// snapshot due, whose snapshots fail with err; it returns the asks and
// the reported failures.
func runFailingTrigger(t *testing.T, err error) (asked, failures chan struct{}) {
	m := NewStateMachine(func(uint64, string, []schema.Event) {})
	m.ApplyBatch([]*raft.Log{putLog(t, 1, "a"), batchLog(t, 2, "b", "c", "d")})
	caughtUp := make(chan struct{})
	close(caughtUp)
	failures = make(chan struct{}, 10)
	snap := failingSnapshotter{asked: make(chan struct{}, 10), err: err}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		SnapshotTrigger{SM: m, Raft: snap, CaughtUp: caughtUp, Threshold: 4, Interval: time.Hour,
			Log: slog.New(slog.DiscardHandler), OnFailure: func() { failures <- struct{}{} }}.Run(ctx)
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return snap.asked, failures
}

// A snapshot that was due and failed is reported (the metric
// concord_snapshot_failures_total counts these), once: the trigger then
// waits out its interval instead of failing again every check.
func TestSnapshotTriggerReportsFailures(t *testing.T) {
	_, failures := runFailingTrigger(t, errors.New("disk on fire"))
	select {
	case <-failures:
	case <-time.After(30 * time.Second):
		t.Fatal("a due snapshot that failed was not reported within 30 s")
	}
	time.Sleep(3 * snapshotCheckEvery) // checks that must not snapshot again
	if len(failures) != 0 {
		t.Fatalf("%d more failures reported while the trigger waits out its interval", len(failures))
	}
}

// Raft's "nothing new to snapshot" is no failure: the trigger goes on
// checking, and reports nothing.
func TestSnapshotTriggerNothingNewIsNoFailure(t *testing.T) {
	asked, failures := runFailingTrigger(t, raft.ErrNothingNewToSnapshot)
	for i := range 2 {
		select {
		case <-asked:
		case <-time.After(30 * time.Second):
			t.Fatalf("ask %d for a snapshot did not come within 30 s", i+1)
		}
	}
	if len(failures) != 0 {
		t.Fatalf("%d failures reported for nothing new to snapshot", len(failures))
	}
}
