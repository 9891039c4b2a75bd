package fsm

import (
	"fmt"
	"math/rand"
	"testing"
)

// viewBenchState holds 100,000 keys under "svc.api.", one in two on one of
// 100 leases, each written once.
func viewBenchState(b *testing.B) *State {
	b.Helper()
	s := New()
	mustApply(b, s, t0, benchLimits)
	for i := 0; i < 100; i++ {
		mustApply(b, s, t0, &Grant{TTL: 3600})
	}
	for i := 0; i < 100_000; i++ {
		p := &Put{Key: fmt.Sprintf("svc.api.n%06d", i), Value: val(`{"addr":"10.0.0.1","port":8080}`)}
		if i%2 == 0 {
			p.Lease = int64(1 + i%100)
		}
		if r := s.ApplyCommand(Command{Op: OpPut, Now: t0, Body: p}); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	return s
}

// ownCopy copies a state into trees of its own, the history's too, so that
// a benchmark's writes pay no copy-on-write cost left by an earlier clone.
func ownCopy(s *State) *State {
	c := deepCopy(s)
	c.hist = newHistory()
	c.hist.floor = s.hist.floor
	s.hist.byRev.Ascend(func(v *version) bool { c.hist.byRev.ReplaceOrInsert(v); return true })
	s.hist.byKey.Ascend(func(v *version) bool { c.hist.byKey.insert(v); return true })
	return c
}

// BenchmarkApplyPutBesideViews measures what views cost writes. A view is
// O(1) to take, but the next write to each tree it cloned copies the nodes
// on its path that the view still shares. Puts into a state of 100,000
// keys (a new key with a lease, one of 100), a new key at the end of the keyspace or
// an overwrite of a random key, with a view taken before every put, before
// every 16th, or never.
func BenchmarkApplyPutBesideViews(b *testing.B) {
	base := viewBenchState(b)
	for _, kind := range []string{"new", "overwrite"} {
		for _, every := range []int{0, 16, 1} {
			name := fmt.Sprintf("%s/view-every-%d", kind, every)
			if every == 0 {
				name = kind + "/no-view"
			}
			b.Run(name, func(b *testing.B) {
				s := ownCopy(base)
				r := rand.New(rand.NewSource(1))
				entries := encodeAll(b, b.N, func(i int) (int64, any) {
					k, lease := 100_000+i, int64(1+i%100)
					if kind == "overwrite" {
						// The key keeps its lease, or its lack of one.
						k, lease = r.Intn(100_000), 0
						if k%2 == 0 {
							lease = int64(1 + k%100)
						}
					}
					return t0 + int64(i/1000), &Put{Key: fmt.Sprintf("svc.api.n%06d", k),
						Value: val(fmt.Sprintf(`{"addr":"10.0.%d.%d","port":8080}`, i/256%256, i%256)), Lease: lease}
				})
				var v *View
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if every > 0 && i%every == 0 {
						v = s.View()
					}
					if r := s.Apply(entries[i]); r.Err != nil {
						b.Fatalf("entry %d: %v", i, r.Err)
					}
				}
				b.StopTimer()
				if every > 0 && v.Revision() >= s.Revision() {
					b.Fatalf("the last view is at revision %d, the state at %d", v.Revision(), s.Revision())
				}
			})
		}
	}
}

// BenchmarkView: taking a view of a state of 100,000 keys (what a read
// holds the state's lock for).
func BenchmarkView(b *testing.B) {
	s := viewBenchState(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if v := s.View(); v.KeyCount() != 100_000 {
			b.Fatalf("a view of %d keys", v.KeyCount())
		}
	}
}
