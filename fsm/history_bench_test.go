package fsm

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
)

// historyBenchState holds 100,000 keys under "k." written once, then 20,000
// overwrites spread over the first 20,000 of them: a read 10,000 revisions
// back sees many keys whose versions live in the history, not the live tree.
func historyBenchState(b *testing.B) *State {
	b.Helper()
	s := New()
	mustApply(b, s, t0, benchLimits)
	for i := 0; i < 100_000; i++ {
		mustApply(b, s, t0, &Put{Key: fmt.Sprintf("k.%06d", i), Value: val(`{"v":"` + fmt.Sprint(i) + `"}`)})
	}
	for i := 0; i < 20_000; i++ {
		mustApply(b, s, t0, &Put{Key: fmt.Sprintf("k.%06d", i), Value: val(`{"w":` + fmt.Sprint(i) + `}`)})
	}
	return s
}

// BenchmarkGetAt compares a read at the present with the same read 10,000
// revisions back: one key, and a 1,000-key page of a prefix, the page
// starting where the overwritten keys are. The bar: within 2x.
func BenchmarkGetAt(b *testing.B) {
	s := historyBenchState(b)
	past := s.Revision() - 10_000
	for _, c := range []struct {
		name string
		q    GetQuery
	}{
		{"key", GetQuery{Key: "k.005000"}},
		// A page of 1,000 from a prefix of 100,000 (the reply counts them
		// all), and a whole prefix of 1,000 keys.
		{"page1000of100k", GetQuery{Key: "k.", IsPrefix: true, After: "k.004999", Limit: 1000}},
		{"prefix1000", GetQuery{Key: "k.005", IsPrefix: true, Limit: 1000}},
	} {
		for _, at := range []struct {
			name string
			rev  int64
		}{{"present", 0}, {"past10k", past}} {
			b.Run(c.name+"/"+at.name, func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					r, err := s.GetAt(c.q, at.rev, s.Now())
					if err != nil || len(r.KVs) == 0 {
						b.Fatalf("read: %d records, %v", len(r.KVs), err)
					}
				}
			})
		}
	}
}

// BenchmarkGetAtHotPage is the shape of concord bench get-at-revision: a
// prefix of 100,000 keys whose first 1,000 were each written 20 more times,
// read as its first page of 1,000 (the reply counts all 100,000), at the
// present and 10,000 revisions back, when every key of the page had
// changed since.
func BenchmarkGetAtHotPage(b *testing.B) {
	s := New()
	mustApply(b, s, t0, benchLimits)
	for i := 0; i < 100_000; i++ {
		mustApply(b, s, t0, &Put{Key: fmt.Sprintf("k.%06d", i), Value: val(`"` + fmt.Sprint(i) + `"`)})
	}
	for i := 0; i < 20_000; i++ {
		mustApply(b, s, t0, &Put{Key: fmt.Sprintf("k.%06d", i%1000), Value: val(fmt.Sprint(i))})
	}
	q := GetQuery{Key: "k.", IsPrefix: true, Limit: 1000}
	for _, at := range []struct {
		name string
		rev  int64
	}{{"present", 0}, {"past10k", s.Revision() - 10_000}} {
		b.Run(at.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				r, err := s.GetAt(q, at.rev, s.Now())
				if err != nil || len(r.KVs) != 1000 || r.Count != 100_000 {
					b.Fatalf("read: %d records of %d, %v", len(r.KVs), r.Count, err)
				}
			}
		})
	}
}

// BenchmarkApplyPutOverwrite: a put that replaces a key's live record, over
// 100,000 keys written once before the timer starts, so that each put moves
// the version it replaces into the history (default retention keeps it).
func BenchmarkApplyPutOverwrite(b *testing.B) {
	const keys = 100_000
	s := New()
	mustApply(b, s, t0, benchLimits)
	for i := 0; i < keys; i++ {
		mustApply(b, s, t0, &Put{Key: fmt.Sprintf("svc.api.n%06d", i), Value: val(`{"addr":"10.0.0.1","port":8080}`)})
	}
	entries := encodeAll(b, b.N, func(i int) (int64, any) {
		return t0 + int64(i/1000), &Put{
			Key:   fmt.Sprintf("svc.api.n%06d", i%keys),
			Value: val(fmt.Sprintf(`{"addr":"10.0.%d.%d","port":8080}`, i/256%256, i%256)),
		}
	})
	applyAllTimed(b, s, entries)
	if s.KeyCount() != keys || s.HistoryChanges() != keys+b.N {
		b.Fatalf("%d keys and %d changes after %d overwrites", s.KeyCount(), s.HistoryChanges(), b.N)
	}
}

// BenchmarkApplyPutRetained is the steady state of make bench-history's
// default server, scaled down: 32,000 keys overwritten round-robin with the
// history full, so that each put both adds a version and compacts the
// oldest. Its time includes the collector's work on the retained history,
// which is what keeping history costs a node under writes; retained-B/version
// is the heap one retained overwrite holds (the old record, its value and
// key, its version and the index entries).
func BenchmarkApplyPutRetained(b *testing.B) {
	const (
		keys     = 32_000
		retained = 256_000
	)
	value := func(i int) json.RawMessage { return val(fmt.Sprintf(`"%062d"`, i)) }
	key := func(i int) string { return fmt.Sprintf("bench.put.%d.%d", i%32, i/32%1000) }
	s := New()
	mustApply(b, s, t0, &Limits{MaxLeases: 1 << 40, MaxKeysPerLease: 1 << 40, HistoryRevisions: retained})
	for i := 0; i < keys; i++ {
		mustApply(b, s, t0, &Put{Key: key(i), Value: value(i)})
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for i := keys; i < keys+retained; i++ {
		mustApply(b, s, t0, &Put{Key: key(i), Value: value(i)})
	}
	perVersion := float64(heap()-before) / retained
	// What one collection costs with this heap: the marking every cycle
	// under writes pays, whatever the allocation that triggers it.
	var marks []time.Duration
	for range 5 {
		t := time.Now()
		runtime.GC()
		marks = append(marks, time.Since(t))
	}
	slices.Sort(marks)
	entries := encodeAll(b, b.N, func(i int) (int64, any) {
		return t0, &Put{Key: key(keys + retained + i), Value: value(i)}
	})
	applyAllTimed(b, s, entries)
	if s.KeyCount() != keys || s.HistoryChanges() != retained {
		b.Fatalf("%d keys and %d changes, want %d and %d", s.KeyCount(), s.HistoryChanges(), keys, retained)
	}
	// After the timer: ResetTimer drops reported metrics.
	b.ReportMetric(perVersion, "retained-B/version")
	b.ReportMetric(float64(marks[len(marks)/2].Microseconds())/1000, "gc-ms")
}
