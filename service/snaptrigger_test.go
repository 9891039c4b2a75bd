package service

import (
	"encoding/json"
	"fmt"
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
	m := newStateMachine(func(uint64, []schema.Event) {})
	debt := func(want uint64) {
		t.Helper()
		if got, _ := m.replayDebt(); got != want {
			t.Fatalf("replay debt %d, want %d", got, want)
		}
	}
	m.ApplyBatch([]*raft.Log{putLog(t, 1, "a"), batchLog(t, 2, "b", "c", "d")})
	debt(4)
	if _, records := m.replayDebt(); records < 4 {
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

// A node asks for a snapshot once the commands since the last one reach
// the threshold, though Raft itself would check only after an hour.
func TestSnapshotByCommandCount(t *testing.T) {
	s, nc := startTest(t, func(c *Config) {
		c.SnapshotThreshold = 100
		c.SnapshotInterval = time.Hour
	})
	for i := range 120 {
		if e := request(t, nc, "concord.kv.put", map[string]any{"key": fmt.Sprintf("k%03d", i), "value": i}, nil); e != nil {
			t.Fatalf("put: %v", e)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		snaps, err := s.snaps.List()
		if err != nil {
			t.Fatal(err)
		}
		if len(snaps) > 0 {
			if snaps[0].Index < 100 {
				t.Fatalf("snapshot at index %d, before the threshold of 100 commands", snaps[0].Index)
			}
			break
		}
		if time.Now().After(deadline) {
			commands, records := s.sm.replayDebt()
			t.Fatalf("no snapshot after 120 puts with a threshold of 100 (debt %d commands, %d records)", commands, records)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if commands, _ := s.sm.replayDebt(); commands >= 100 {
		t.Fatalf("replay debt %d after the snapshot", commands)
	}
}
