package fsm

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
)

// The benchmarks time Apply of an encoded log entry (decode included, as a
// replica pays it), with the entries encoded and the state built before the
// timer starts. Every result is checked, so a benchmark that quietly fails
// its commands cannot report a good number.

// benchLimits lifts the count limits so b.N can grow past them.
var benchLimits = &Limits{MaxLeases: 1 << 40, MaxKeysPerLease: 1 << 40}

func encodeAll(b *testing.B, n int, f func(i int) (int64, any)) [][]byte {
	b.Helper()
	out := make([][]byte, n)
	for i := range out {
		now, body := f(i)
		out[i] = encode(b, now, body)
	}
	return out
}

func applyAllTimed(b *testing.B, s *State, entries [][]byte) {
	b.Helper()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := s.Apply(entries[i]); r.Err != nil {
			b.Fatalf("entry %d: %v", i, r.Err)
		}
	}
	b.StopTimer()
}

// BenchmarkApplyPut: a put of a new key with a lease and a small JSON value
// (the service-registration write), spread over 100 leases.
func BenchmarkApplyPut(b *testing.B) {
	s := New()
	mustApply(b, s, t0, benchLimits)
	for i := 0; i < 100; i++ {
		mustApply(b, s, t0, &Grant{TTL: 3600})
	}
	entries := encodeAll(b, b.N, func(i int) (int64, any) {
		return t0 + int64(i/1000), &Put{
			Key:   fmt.Sprintf("svc.api.n%09d", i),
			Value: val(fmt.Sprintf(`{"addr":"10.0.%d.%d","port":8080}`, i/256%256, i%256)),
			Lease: int64(1 + i%100),
		}
	})
	applyAllTimed(b, s, entries)
	if s.KeyCount() != b.N {
		b.Fatalf("%d keys after %d puts", s.KeyCount(), b.N)
	}
}

// BenchmarkApplyGrant: a grant with an auto id.
func BenchmarkApplyGrant(b *testing.B) {
	s := New()
	mustApply(b, s, t0, benchLimits)
	entries := encodeAll(b, b.N, func(i int) (int64, any) {
		return t0 + int64(i/1000), &Grant{TTL: 10}
	})
	applyAllTimed(b, s, entries)
	if e, _ := s.LeaseCount(); e != int64(b.N) {
		b.Fatalf("%d leases after %d grants", e, b.N)
	}
}

// BenchmarkApplyKeepAlive: a keep-alive of one of 10,000 live leases, each
// with a key, the clock moving forward.
func BenchmarkApplyKeepAlive(b *testing.B) {
	const leases = 10_000
	s := New()
	for i := 1; i <= leases; i++ {
		mustApply(b, s, t0, &Grant{TTL: 10})
		s.ApplyCommand(Command{Op: OpPut, Now: t0, Body: &Put{Key: fmt.Sprintf("k.%d", i), Value: val(`1`), Lease: int64(i)}})
	}
	entries := encodeAll(b, b.N, func(i int) (int64, any) {
		return t0 + int64(i/100), &KeepAlive{ID: int64(1 + i%leases)}
	})
	applyAllTimed(b, s, entries)
	if d, _ := s.NextDeadline(); b.N >= leases && d < t0+10_000 {
		b.Fatalf("next deadline %d: some lease was not renewed", d)
	}
}

// BenchmarkRevoke10kKeys: applying the revoke of a lease with 10,000 keys
// (among 10,000 unrelated keys). Every iteration revokes in a fresh copy of
// the same state, made with the timer stopped; only the revoke is timed.
func BenchmarkRevoke10kKeys(b *testing.B) {
	const keys = 10_000
	base := New()
	mustApply(b, base, t0, &Grant{TTL: 60})
	for k := 0; k < keys; k++ {
		mustApply(b, base, t0, &Put{Key: fmt.Sprintf("svc.n%05d", k), Value: val(`{"addr":"10.0.0.1"}`), Lease: 1})
		mustApply(b, base, t0, &Put{Key: fmt.Sprintf("other.n%05d", k), Value: val(`1`)})
	}
	revoke := encode(b, t0+1, &Revoke{ID: 1})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := deepCopy(base)
		b.StartTimer()
		r := s.Apply(revoke)
		b.StopTimer()
		if r.Err != nil || len(r.Events) != keys || s.KeyCount() != keys {
			b.Fatalf("revoke: err %v, %d events, %d keys left", r.Err, len(r.Events), s.KeyCount())
		}
		b.StartTimer()
	}
}

// deepCopy copies a state into new trees, so that writes to the copy pay no
// copy-on-write cost (a btree Clone would make the timed revoke copy nodes).
// Records, leases, idempotency entries and change-log entries are immutable
// once in a tree, so they are shared.
func deepCopy(s *State) *State {
	c := New()
	c.revision, c.now, c.limits, c.leaseTotal, c.quotas = s.revision, s.now, s.limits, s.leaseTotal, s.quotas
	s.each(func(sp *space) {
		cs := newSpace(sp.name)
		sp.kv.Ascend(func(r *record) bool { cs.kv.ReplaceOrInsert(r); return true })
		sp.leases.Ascend(func(l *lease) bool { cs.leases.ReplaceOrInsert(l); return true })
		sp.attached.Ascend(func(a attachment) bool { cs.attached.ReplaceOrInsert(a); return true })
		sp.expiry.Ascend(func(e deadlineEntry) bool { cs.expiry.ReplaceOrInsert(e); return true })
		sp.idemBySeq.Ascend(func(e *idemEntry) bool {
			cs.idemBySeq.ReplaceOrInsert(e)
			cs.idemByKey.ReplaceOrInsert(e)
			return true
		})
		cs.nextLeaseID, cs.anonymous, cs.idemSeq, cs.valueBytes = sp.nextLeaseID, sp.anonymous, sp.idemSeq, sp.valueBytes
		cs.status, cs.movedTo, cs.fencedAt = sp.status, sp.movedTo, sp.fencedAt
		cs.hist = sp.hist.clone()
		if sp.name == DefaultTenant {
			c.spaces[DefaultTenant], c.space = cs, cs
		} else {
			c.addSpace(cs)
		}
	})
	return c
}

// BenchmarkSnapshotWrite: writing a snapshot of 100,000 keys (half of them
// on 1,000 leases) to a discarding writer. The snapshot is taken before the
// timer starts; writing it does not consume it.
func BenchmarkSnapshotWrite(b *testing.B) {
	const keys = 100_000
	s := New()
	for i := 1; i <= 1000; i++ {
		mustApply(b, s, t0, &Grant{TTL: 60, Metadata: val(`{"owner":"bench"}`)})
	}
	for k := 0; k < keys; k++ {
		p := &Put{Key: fmt.Sprintf("svc.api.n%06d", k), Value: val(`{"addr":"10.0.0.1","port":8080}`)}
		if k%2 == 0 {
			p.Lease = int64(1 + k%1000)
		}
		if r := s.ApplyCommand(Command{Op: OpPut, Now: t0, Body: p}); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	benchWriteSnapshot(b, s.Snapshot(), SnapshotVersion)
}

// BenchmarkApplyTxnLockAcquire: the lock-acquire transaction, each on its
// own key: compare create_revision == 0, put with a lease (one of 100),
// get the key back. Every one must take the success branch and write.
func BenchmarkApplyTxnLockAcquire(b *testing.B) {
	s := New()
	mustApply(b, s, t0, benchLimits)
	for i := 0; i < 100; i++ {
		mustApply(b, s, t0, &Grant{TTL: 3600})
	}
	entries := encodeAll(b, b.N, func(i int) (int64, any) {
		key := fmt.Sprintf("locks.job.%09d", i)
		return t0 + int64(i/1000), &Txn{
			Compare: []Compare{{Key: key, Target: TargetCreateRevision, Op: CmpEq, Int: 0}},
			Success: []TxnOp{
				{Put: &Put{Key: key, Value: val(fmt.Sprintf(`{"owner":"n%d","since":%d}`, i%7, i)), Lease: int64(1 + i%100)}},
				{Get: &GetQuery{Key: key}},
			},
			Failure: []TxnOp{{Get: &GetQuery{Key: key}}},
		}
	})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := s.Apply(entries[i])
		if r.Err != nil || len(r.Events) != 1 || !r.Reply.(*schema.KVTxnReply).Succeeded {
			b.Fatalf("entry %d: err %v, %d events, reply %+v", i, r.Err, len(r.Events), r.Reply)
		}
	}
	b.StopTimer()
	if s.KeyCount() != b.N || s.Revision() != int64(b.N) {
		b.Fatalf("%d keys at revision %d after %d acquisitions", s.KeyCount(), s.Revision(), b.N)
	}
}

// BenchmarkApplyIdempotentRetry: a retry of one of 10,000 remembered keyed
// puts, answered from the cache (decode, hash, look-up), stamped later than
// the first. Every one must be a cache hit that changes nothing.
func BenchmarkApplyIdempotentRetry(b *testing.B) {
	const remembered = 10_000
	s := New()
	mustApply(b, s, t0, &Grant{TTL: 3600})
	body := func(i int) Command {
		return Command{IdempotencyKey: fmt.Sprintf("client-%d:req-%d", i%16, i), Body: &Put{
			Key:   fmt.Sprintf("svc.api.n%05d", i),
			Value: val(fmt.Sprintf(`{"addr":"10.0.%d.%d","port":8080}`, i/256%256, i%256)),
			Lease: 1,
		}}
	}
	for i := 0; i < remembered; i++ {
		if r := s.Apply(encode(b, t0, body(i))); r.Err != nil || r.Cached {
			b.Fatalf("first apply %d: %+v", i, r)
		}
	}
	if s.IdempotencyCount() != remembered {
		b.Fatalf("%d entries remembered", s.IdempotencyCount())
	}
	rev := s.Revision()
	entries := encodeAll(b, b.N, func(i int) (int64, any) {
		return t0 + 1 + int64(i/1000), body(i * 7919 % remembered)
	})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := s.Apply(entries[i]); r.Err != nil || !r.Cached {
			b.Fatalf("retry %d: err %v, cached %v", i, r.Err, r.Cached)
		}
	}
	b.StopTimer()
	if s.Revision() != rev || s.KeyCount() != remembered {
		b.Fatalf("retries changed the state: revision %d -> %d, %d keys", rev, s.Revision(), s.KeyCount())
	}
}

// BenchmarkKeyCost reports what one key costs: bytes of Go heap (record,
// key, value, its version in the history, the index entries, and for keys
// on a lease the attachment) and bytes of snapshot, for keys shaped as make
// bench-scale writes them (16-byte keys, 100-byte values, written once,
// default retention, so every key still has its version in the history).
// One iteration builds the whole state, so run it with -benchtime 1x.
func BenchmarkKeyCost(b *testing.B) {
	const keys = 200_000
	value := val(`"` + strings.Repeat("v", 98) + `"`)
	for _, c := range []struct {
		name string
		// leases is how many leases the keys share; 0 puts them on none.
		leases int
	}{{"plain", 0}, {"on-1000-leases", 1000}} {
		b.Run(c.name, func(b *testing.B) {
			var cmds [][]byte
			for l := 0; l < c.leases; l++ {
				cmds = append(cmds, encode(b, t0, &Grant{TTL: 3600}))
			}
			cmds = append(cmds, encodeAll(b, keys, func(i int) (int64, any) {
				p := &Put{Key: fmt.Sprintf("scale.%d.%08d", i/100_000, i), Value: value}
				if c.leases > 0 {
					p.Lease = int64(1 + i%c.leases)
				}
				return t0, p
			})...)
			for i := 0; i < b.N; i++ {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				s := New()
				for _, cmd := range cmds {
					if r := s.Apply(cmd); r.Err != nil {
						b.Fatal(r.Err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				size, err := s.Snapshot().WriteTo(io.Discard)
				if err != nil {
					b.Fatal(err)
				}
				if s.KeyCount() != keys || s.HistoryChanges() != keys || s.AttachedKeyCount() != min(c.leases, 1)*keys {
					b.Fatalf("%d keys (%d attached), %d changes in the history, want %d of each", s.KeyCount(), s.AttachedKeyCount(), s.HistoryChanges(), keys)
				}
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "heap-B/key")
				b.ReportMetric(float64(size)/keys, "snapshot-B/key")
				runtime.KeepAlive(s)
			}
		})
	}
}
