package fsm

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
)

// The snapshot benchmarks write and restore the same states in version 4
// (JSON lines) and version 5 (binary). The states are built once per
// process; -snapshot-keys sets their size, so that
//
//	go test ./fsm -run XXX -bench 'SnapshotRestore/scale' -benchtime 1x -snapshot-keys 1000000
//
// restores a million keys once per version.
var benchSnapshotKeys = flag.Int("snapshot-keys", 100_000, "keys in the states of the snapshot benchmarks")

type benchState struct {
	name string
	s    *State
}

var benchStates = map[string]*State{}

// scaleBenchState is the state make bench-scale leaves: 16-byte keys and
// 100-byte values written once each, default limits, so every key has its
// live version in the history.
func scaleBenchState(b *testing.B, keys int) *State {
	name := fmt.Sprintf("scale/%d", keys)
	if s := benchStates[name]; s != nil {
		return s
	}
	value := val(`"` + strings.Repeat("v", 98) + `"`)
	s := New()
	for i := 0; i < keys; i++ {
		if r := s.ApplyCommand(Command{Op: OpPut, Now: t0 + int64(i/1000), Body: &Put{Key: fmt.Sprintf("scale.%d.%08d", i/100_000, i), Value: value}}); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	benchStates[name] = s
	return s
}

// mixedBenchState has every kind of record: leases with metadata (one
// key in two on one of 1,000), keys put again with a content type and
// metadata (so the history holds their earlier records), deleted keys
// (tombstones), anonymous leases, idempotency entries, and a floor that
// retention raised (so the history holds bases).
func mixedBenchState(b *testing.B, keys int) *State {
	name := fmt.Sprintf("mixed/%d", keys)
	if s := benchStates[name]; s != nil {
		return s
	}
	s := New()
	mustApply(b, s, t0, &Limits{MaxLeases: 1 << 30, MaxKeysPerLease: 1 << 30, HistoryRevisions: int64(keys), IdempotencyRevisions: int64(2 * keys)})
	for i := 1; i <= 1000; i++ {
		mustApply(b, s, t0, &Grant{TTL: 3600, Metadata: val(`{"owner":"bench"}`)})
	}
	apply := func(now int64, c Command) {
		c.Now = now
		if r := s.ApplyCommand(c); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	key := func(i int) string { return fmt.Sprintf("svc.api.n%07d", i) }
	for i := 0; i < keys; i++ {
		p := &Put{Key: key(i), Value: val(fmt.Sprintf(`{"addr":"10.0.%d.%d","port":8080}`, i/256%256, i%256))}
		switch {
		case i%2 == 0:
			p.Lease = int64(1 + i%1000)
		case i%7 == 1:
			p.TTL = 600
		}
		c := Command{Op: OpPut, Body: p}
		if i%50 == 0 {
			c.IdempotencyKey = fmt.Sprintf("client-%d:req-%d", i%16, i)
		}
		apply(t0+int64(i/100), c)
	}
	for i := 0; i < keys; i += 3 {
		apply(t0+int64(keys/100+i/100), Command{Op: OpPut, Body: &Put{Key: key(i), Value: val(`{"addr":"10.9.9.9","port":9090}`),
			ContentType: "application/json", Metadata: val(`{"rev":2}`), Lease: int64(1+i%1000) * int64(1-i%2)}})
	}
	for i := 5; i < keys; i += 10 {
		apply(t0+int64(keys/50+i/100), Command{Op: OpDelete, Body: &Delete{Key: key(i)}})
	}
	if s.CompactRevision() == 0 || s.IdempotencyCount() == 0 {
		b.Fatalf("floor %d, %d idempotency entries: the state lacks what it should exercise", s.CompactRevision(), s.IdempotencyCount())
	}
	benchStates[name] = s
	return s
}

func benchSnapshotStates(b *testing.B) []benchState {
	return []benchState{{"scale", scaleBenchState(b, *benchSnapshotKeys)}, {"mixed", mixedBenchState(b, *benchSnapshotKeys)}}
}

// BenchmarkSnapshotRestore restores the same state from version 4 and
// from version 5, and from version 5 with the trees built one after the
// other (sequential) rather than concurrently. MB/s is of each version's
// own bytes; ns/key compares the two.
func BenchmarkSnapshotRestore(b *testing.B) {
	for _, st := range benchSnapshotStates(b) {
		want := snap(b, st.s)
		for _, c := range []struct {
			name       string
			version    int
			concurrent bool
		}{{"v4", 4, true}, {"v5", 5, true}, {"v5-sequential", 5, false}} {
			b.Run(st.name+"/"+c.name, func(b *testing.B) {
				var buf bytes.Buffer
				if _, err := st.s.Snapshot().WriteVersion(&buf, c.version); err != nil {
					b.Fatal(err)
				}
				data := buf.Bytes()
				restoreConcurrently = c.concurrent
				defer func() { restoreConcurrently = true }()
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				b.ResetTimer()
				var s *State
				for i := 0; i < b.N; i++ {
					s = New()
					if err := s.Restore(bytes.NewReader(data)); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(st.s.KeyCount()), "ns/key")
				b.ReportMetric(float64(len(data))/float64(st.s.KeyCount()), "snapshot-B/key")
				if !bytes.Equal(snap(b, s), want) {
					b.Fatal("the restored state differs from the one written")
				}
			})
		}
	}
}

// BenchmarkSnapshotEncode writes the same state in version 4 and in
// version 5 to a discarding writer.
func BenchmarkSnapshotEncode(b *testing.B) {
	for _, st := range benchSnapshotStates(b) {
		for _, version := range []int{4, 5} {
			b.Run(fmt.Sprintf("%s/v%d", st.name, version), func(b *testing.B) {
				benchWriteSnapshot(b, st.s.Snapshot(), version)
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(st.s.KeyCount()), "ns/key")
			})
		}
	}
}

// overwrittenBenchState is make bench-history's default node at its
// retention, scaled by -snapshot-keys: about changes/32 keys (32 groups,
// as bench-history's clients), each put again and again round-robin until
// the history holds changes versions, nearly all of them no longer live.
func overwrittenBenchState(b *testing.B, changes int) *State {
	name := fmt.Sprintf("overwritten/%d", changes)
	if s := benchStates[name]; s != nil {
		return s
	}
	s := New()
	mustApply(b, s, t0, &Limits{MaxLeases: 1 << 30, MaxKeysPerLease: 1 << 30, HistoryRevisions: int64(changes)})
	perGroup := changes/32/32 + 1 // keys a group
	for i := 0; s.HistoryChanges() < changes; i++ {
		p := &Put{Key: fmt.Sprintf("bench.put.%d.%d", i%32, i/32%perGroup), Value: val(fmt.Sprintf(`"%062d"`, i))}
		if r := s.ApplyCommand(Command{Op: OpPut, Now: t0 + int64(i/1000), Body: p}); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	benchStates[name] = s
	return s
}

// BenchmarkSnapshotEncodeHistory writes a state whose snapshot is mostly
// history (overwrittenBenchState) in version 5 to a discarding writer:
// what a node under overwrites pays each time it takes a snapshot.
func BenchmarkSnapshotEncodeHistory(b *testing.B) {
	s := overwrittenBenchState(b, *benchSnapshotKeys)
	benchWriteSnapshot(b, s.Snapshot(), 5)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(s.HistoryChanges()), "ns/change")
}

// benchWriteSnapshot writes sn in version to a discarding writer b.N
// times, timed, each write checked to be as long as an untimed first one.
// The timer is stopped when it returns, for the caller's metrics.
func benchWriteSnapshot(b *testing.B, sn *Snapshot, version int) {
	size, err := sn.WriteVersion(io.Discard, version)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if n, err := sn.WriteVersion(io.Discard, version); err != nil || n != size {
			b.Fatalf("wrote %d bytes (want %d): %v", n, size, err)
		}
	}
	b.StopTimer()
}

// rewrittenBenchState is make bench-scale's state after its load
// (writes 1) or after its rewrites (--rewrites writes), scaled by
// -snapshot-keys: keys 16-byte keys with 100-byte values, each written
// writes times in key order, the history keeping the last keys revisions
// (the default retention at the bench's million keys).
func rewrittenBenchState(b *testing.B, keys, writes int) *State {
	name := fmt.Sprintf("rewritten/%d/%d", keys, writes)
	if s := benchStates[name]; s != nil {
		return s
	}
	s := New()
	mustApply(b, s, t0, &Limits{MaxLeases: 1 << 30, MaxKeysPerLease: 1 << 30, HistoryRevisions: int64(keys)})
	for w := 0; w < writes; w++ {
		value := val(fmt.Sprintf(`"%098d"`, w))
		for i := 0; i < keys; i++ {
			p := &Put{Key: fmt.Sprintf("scale.%d.%08d", i/100_000, i), Value: value}
			if r := s.ApplyCommand(Command{Op: OpPut, Now: t0 + int64((w*keys+i)/1000), Body: p}); r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	benchStates[name] = s
	return s
}

// BenchmarkSnapshotRestoreRewritten restores make bench-scale's state
// after the load and after every key was written 5 times (version 5):
// in process, what issue 15's bar compares (history must not make a
// restart more than 2x slower), without the disk, Raft or NATS.
func BenchmarkSnapshotRestoreRewritten(b *testing.B) {
	for _, writes := range []int{1, 5} {
		st := rewrittenBenchState(b, *benchSnapshotKeys, writes)
		b.Run(fmt.Sprintf("writes-%d", writes), func(b *testing.B) {
			var buf bytes.Buffer
			if _, err := st.Snapshot().WriteVersion(&buf, 5); err != nil {
				b.Fatal(err)
			}
			data := buf.Bytes()
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := New().Restore(bytes.NewReader(data)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(st.KeyCount()), "ns/key")
		})
	}
}
