package boltstore

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "raft.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func makeLog(i uint64) *raft.Log {
	return &raft.Log{
		Index: i, Term: i/10 + 1, Type: raft.LogCommand,
		Data:       []byte(fmt.Sprintf("entry-%d", i)),
		Extensions: []byte{byte(i)},
		AppendedAt: time.Unix(1700000000, int64(i)),
	}
}

func checkIndexes(t *testing.T, s *Store, first, last uint64) {
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

func TestEmptyStoreHasZeroIndexes(t *testing.T) {
	s, _ := openTemp(t)
	checkIndexes(t, s, 0, 0)
	var l raft.Log
	if err := s.GetLog(1, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog on empty store: %v, want ErrLogNotFound", err)
	}
}

func TestLogsRoundTripAndSurviveReopen(t *testing.T) {
	s, path := openTemp(t)
	var batch []*raft.Log
	for i := uint64(1); i <= 5000; i++ {
		batch = append(batch, makeLog(i))
	}
	if err := s.StoreLogs(batch); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLog(makeLog(5001)); err != nil {
		t.Fatal(err)
	}
	checkIndexes(t, s, 1, 5001)
	s.Close()

	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	checkIndexes(t, s2, 1, 5001)
	for _, i := range []uint64{1, 255, 256, 4999, 5001} {
		var got raft.Log
		if err := s2.GetLog(i, &got); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		want := makeLog(i)
		if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type ||
			!bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Extensions, want.Extensions) ||
			!got.AppendedAt.Equal(want.AppendedAt) {
			t.Fatalf("GetLog(%d) = %+v, want %+v", i, got, want)
		}
	}
}

func TestEmptyDataAndZeroTimeRoundTrip(t *testing.T) {
	s, _ := openTemp(t)
	in := &raft.Log{Index: 7, Term: 3, Type: raft.LogNoop}
	if err := s.StoreLog(in); err != nil {
		t.Fatal(err)
	}
	var out raft.Log
	if err := s.GetLog(7, &out); err != nil {
		t.Fatal(err)
	}
	if out.Data != nil || out.Extensions != nil || !out.AppendedAt.IsZero() || out.Type != raft.LogNoop || out.Term != 3 {
		t.Fatalf("round trip of a bare entry gave %+v", out)
	}
}

func TestDeleteRangeFromBothEnds(t *testing.T) {
	s, _ := openTemp(t)
	var batch []*raft.Log
	for i := uint64(1); i <= 100; i++ {
		batch = append(batch, makeLog(i))
	}
	if err := s.StoreLogs(batch); err != nil {
		t.Fatal(err)
	}
	// Compaction deletes a prefix; conflict resolution deletes a suffix.
	if err := s.DeleteRange(1, 40); err != nil {
		t.Fatal(err)
	}
	checkIndexes(t, s, 41, 100)
	if err := s.DeleteRange(91, 100); err != nil {
		t.Fatal(err)
	}
	checkIndexes(t, s, 41, 90)
	var l raft.Log
	for _, gone := range []uint64{1, 40, 91, 100} {
		if err := s.GetLog(gone, &l); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog(%d) after delete: %v", gone, err)
		}
	}
	if err := s.GetLog(41, &l); err != nil || l.Index != 41 {
		t.Fatalf("GetLog(41) = %v, %v", l.Index, err)
	}
	if err := s.DeleteRange(1, 1000); err != nil {
		t.Fatal(err)
	}
	checkIndexes(t, s, 0, 0)
}

func TestStableStore(t *testing.T) {
	s, path := openTemp(t)
	if _, err := s.Get([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
		// hashicorp/raft compares the text of this error.
		t.Fatalf("Get of missing key: %v, want the text \"not found\"", err)
	}
	if _, err := s.GetUint64([]byte("CurrentTerm")); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("GetUint64 of missing key: %v", err)
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 42); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if v, err := s2.Get([]byte("LastVoteCand")); err != nil || string(v) != "n2" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if v, err := s2.GetUint64([]byte("CurrentTerm")); err != nil || v != 42 {
		t.Fatalf("GetUint64 = %d, %v", v, err)
	}
	if _, err := s2.GetUint64([]byte("LastVoteCand")); err == nil {
		t.Fatal("GetUint64 of a 2-byte value succeeded")
	}
}

func TestCorruptEntriesAreErrors(t *testing.T) {
	good := encodeLog(makeLog(3))
	cases := map[string][]byte{
		"empty":          {},
		"unknown format": append([]byte{9}, good[1:]...),
		"truncated":      good[:len(good)-2],
		"trailing bytes": append(append([]byte(nil), good...), 0),
	}
	for name, b := range cases {
		var l raft.Log
		if err := decodeLog(b, &l); !errors.Is(err, errCorrupt) {
			t.Errorf("%s: decode error %v, want errCorrupt", name, err)
		}
	}
}

func BenchmarkStoreLogsBatch64(b *testing.B) {
	path := filepath.Join(b.TempDir(), "raft.db")
	s, err := Open(path)
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
