package logstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func makeLog(i uint64) *raft.Log {
	return &raft.Log{
		Index: i, Term: i/10 + 1, Type: raft.LogCommand,
		Data:       []byte(fmt.Sprintf("entry-%d", i)),
		Extensions: []byte{byte(i)},
		AppendedAt: time.Unix(1700000000, int64(i)),
	}
}

func makeLogs(from, to uint64) []*raft.Log {
	var out []*raft.Log
	for i := from; i <= to; i++ {
		out = append(out, makeLog(i))
	}
	return out
}

func checkIndexes(t *testing.T, s raft.LogStore, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	if err != nil || f != first {
		t.Fatalf("FirstIndex = %d, %v; want %d", f, err, first)
	}
	l, err := s.LastIndex()
	if err != nil || l != last {
		t.Fatalf("LastIndex = %d, %v; want %d", l, err, last)
	}
}

// checkEntries reads every index from first to last and compares it with
// want(i).
func checkEntries(t *testing.T, s raft.LogStore, first, last uint64, want func(uint64) *raft.Log) {
	t.Helper()
	for i := first; i <= last; i++ {
		var got raft.Log
		if err := s.GetLog(i, &got); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		if w := want(i); !sameLog(&got, w) {
			t.Fatalf("GetLog(%d) = %+v, want %+v", i, got, *w)
		}
	}
}

func sameLog(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Extensions, b.Extensions) && a.AppendedAt.Equal(b.AppendedAt)
}

func reopen(t *testing.T, s *Store, dir string) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}

func TestNewStoreIsEmpty(t *testing.T) {
	s, dir := openTemp(t)
	checkIndexes(t, s, 0, 0)
	var l raft.Log
	if err := s.GetLog(1, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog on an empty store: %v, want ErrLogNotFound", err)
	}
	// Raft decides between bootstrap and restart on these.
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 0 {
		t.Fatalf("GetUint64 of a missing key = %d, %v; want 0, nil", v, err)
	}
	snaps := raft.NewInmemSnapshotStore()
	if has, err := raft.HasExistingState(s, s, snaps); err != nil || has {
		t.Fatalf("HasExistingState of a new store = %v, %v", has, err)
	}
	if !s.IsMonotonic() {
		t.Fatal("the WAL must tell Raft it keeps no gaps")
	}
	for _, p := range []string{"wal/wal-meta.db"} {
		if !exists(t, filepath.Join(dir, p)) {
			t.Fatalf("%s missing", p)
		}
	}
}

func TestLogsAndStableKeysSurviveReopen(t *testing.T) {
	s, dir := openTemp(t)
	if err := s.StoreLogs(makeLogs(1, 5000)); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLog(makeLog(5001)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 42); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, dir)
	checkIndexes(t, s, 1, 5001)
	checkEntries(t, s, 1, 5001, makeLog)
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 42 {
		t.Fatalf("CurrentTerm = %d, %v", v, err)
	}
	if v, err := s.Get([]byte("LastVoteCand")); err != nil || string(v) != "n2" {
		t.Fatalf("LastVoteCand = %q, %v", v, err)
	}
	if has, err := raft.HasExistingState(s, s, raft.NewInmemSnapshotStore()); err != nil || !has {
		t.Fatalf("HasExistingState = %v, %v", has, err)
	}
}

// After a snapshot restore (or a migrated, compacted log) the first entry
// is not 1.
func TestLogMayStartPastOne(t *testing.T) {
	s, dir := openTemp(t)
	if err := s.StoreLogs(makeLogs(7001, 7100)); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, dir)
	checkIndexes(t, s, 7001, 7100)
	checkEntries(t, s, 7001, 7100, makeLog)
	if err := s.StoreLog(makeLog(7102)); err == nil {
		t.Fatal("a gap was accepted")
	}
}

// Compaction deletes a prefix; a new leader's conflict resolution deletes
// a suffix.
func TestDeleteRangeFromBothEnds(t *testing.T) {
	s, dir := openTemp(t)
	if err := s.StoreLogs(makeLogs(1, 100)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 40); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := s.GetLog(40, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(40) after deleting 1-40: %v", err)
	}
	if err := s.DeleteRange(91, 100); err != nil {
		t.Fatal(err)
	}
	// Deleted entries are gone at once (Raft then sends a snapshot to a
	// follower that needs them) and after a restart.
	for _, reopened := range []bool{false, true} {
		if reopened {
			s = reopen(t, s, dir)
		}
		checkIndexes(t, s, 41, 90)
		for _, gone := range []uint64{1, 40, 91, 100} {
			if err := s.GetLog(gone, &l); !errors.Is(err, raft.ErrLogNotFound) {
				t.Fatalf("GetLog(%d) after delete (reopened %v): %v", gone, reopened, err)
			}
		}
	}
	if err := s.StoreLogs(makeLogs(91, 95)); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, s, 41, 95, makeLog)
}

func TestSecondOpenOfADataDirIsRefused(t *testing.T) {
	s, dir := openTemp(t)
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	s.Close()
	s2, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	s2.Close()
}

func TestOpenOfAMissingDirFails(t *testing.T) {
	if _, err := Open(filepath.Join(t.TempDir(), "nope"), Options{}); err == nil {
		t.Fatal("Open of a missing directory succeeded")
	}
}

func BenchmarkStoreLogsBatch64(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	idx := uint64(1)
	data := bytes.Repeat([]byte("x"), 128)
	b.ResetTimer()
	for b.Loop() {
		batch := make([]*raft.Log, 64)
		for j := range batch {
			batch[j] = &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: data}
			idx++
		}
		if err := s.StoreLogs(batch); err != nil {
			b.Fatal(err)
		}
	}
}

// A store opened with small segments preallocates each at that size, not
// raft-wal's 64 MiB, and a log larger than one segment spans several and
// reads back whole, after a reopen too.
func TestSmallSegments(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	big := func(i uint64) *raft.Log {
		l := makeLog(i)
		l.Data = bytes.Repeat([]byte{byte(i)}, 64<<10)
		return l
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 40; i++ { // 2.5 MiB of entries
		logs = append(logs, big(i))
	}
	for _, l := range logs {
		if err := s.StoreLogs([]*raft.Log{l}); err != nil {
			t.Fatal(err)
		}
	}
	segments, err := filepath.Glob(filepath.Join(dir, DirName, "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	if len(segments) < 3 {
		t.Fatalf("%d segment files for 2.5 MiB in 1 MiB segments: %v", len(segments), segments)
	}
	for _, seg := range segments {
		fi, err := os.Stat(seg)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 2<<20 {
			t.Fatalf("segment %s is %d bytes with 1 MiB segments", seg, fi.Size())
		}
	}
	checkEntries(t, s, 1, 40, big)
	s2 := reopen(t, s, dir)
	checkEntries(t, s2, 1, 40, big)
}
