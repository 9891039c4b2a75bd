package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
)

// stateDigest renders everything the exported API shows of a state,
// including what the snapshot does not carry (attachments, key counts, the
// deadline index, the anonymous-lease count), so a restored state can be
// compared with the original beyond its snapshot bytes.
func stateDigest(all *State) string {
	var b strings.Builder
	nd, ok := all.NextDeadline()
	e, a := all.LeaseCount()
	fmt.Fprintf(&b, "rev %d now %d limits %+v keys %d leases %d/%d next %d %v tenants %q\n", all.Revision(), all.Now(), all.Limits(),
		all.KeyCount(), e, a, nd, ok, all.Tenants())
	fmt.Fprintf(&b, "quotas %v\n", all.Quotas()) // fmt prints a map in key order
	for _, t := range all.Tenants() {
		s := all.In(t)
		now := s.Now()
		fmt.Fprintf(&b, "tenant %q usage %+v\n", t, s.Usage())
		fmt.Fprintf(&b, "expired %v\n", s.Expired(now+1_000_000, 0))
		for _, kv := range getAll(s, now) {
			rem := "-"
			if kv.RemainingMS != nil {
				rem = fmt.Sprint(*kv.RemainingMS)
			}
			fmt.Fprintf(&b, "kv %s=%s c%d m%d v%d l%d r%s\n", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease, rem)
		}
		for _, l := range s.LeaseList(true, 0, math.MaxInt, now).Leases {
			li, _ := s.LeaseInfo(l.ID, true, now)
			fmt.Fprintf(&b, "lease %+v keys %v\n", l, li.Keys)
		}
	}
	return b.String()
}

// coverage counts what a command stream exercised, so a determinism or
// property test can show it was not vacuous.
type coverage struct {
	ok      map[Op]int
	errs    map[error]int
	causes  map[string]int
	expired int // leases removed by expire that had keys
	bad     int // undecodable entries
	rewound int // entries stamped earlier than the clock
	cached  int // retries answered from the idempotency cache
	// Transactions that applied, by outcome.
	txnSucceeded, txnFailedCompare, txnWrote, txnReadOnly int
}

func newCoverage() *coverage {
	return &coverage{ok: map[Op]int{}, errs: map[error]int{}, causes: map[string]int{}}
}

func (c *coverage) add(r Result) {
	switch {
	case r.Cached:
		c.cached++
	case r.Err == nil:
		c.ok[r.Op]++
		if rep, ok := r.Reply.(*schema.KVTxnReply); ok {
			if rep.Succeeded {
				c.txnSucceeded++
			} else {
				c.txnFailedCompare++
			}
			if len(r.Events) > 0 {
				c.txnWrote++
			} else {
				c.txnReadOnly++
			}
		}
	case errors.Is(r.Err, ErrBadCommand):
		c.bad++
	default:
		for _, s := range coveredErrors {
			if errors.Is(r.Err, s) {
				c.errs[s]++
			}
		}
	}
	for _, e := range r.Events {
		c.causes[e.Cause]++
	}
	for _, x := range r.Expired {
		if x.Keys > 0 {
			c.expired++
		}
	}
}

// coveredErrors are the failures a random stream must produce.
var coveredErrors = []error{ErrLeaseNotFound, ErrLeaseExists, ErrLeaseConflict, ErrLimitExceeded, ErrTooLarge, ErrIdempotencyConflict}

func (c *coverage) check(t *testing.T) {
	t.Helper()
	t.Logf("coverage: ok %v errs %v cached %d txn succeeded %d failed-compare %d wrote %d read-only %d", c.ok, c.errs, c.cached, c.txnSucceeded, c.txnFailedCompare, c.txnWrote, c.txnReadOnly)
	for _, op := range []Op{OpGrant, OpKeepAlive, OpKeepAliveMany, OpRevoke, OpPut, OpDelete, OpExpire, OpSetLimits, OpTxn} {
		if c.ok[op] < 5 {
			t.Errorf("only %d successful %s commands", c.ok[op], op)
		}
	}
	if c.cached < 5 || c.txnSucceeded < 5 || c.txnFailedCompare < 5 || c.txnWrote < 5 || c.txnReadOnly < 5 {
		t.Errorf("cached retries %d; transactions succeeded %d, failed their compares %d, wrote %d, wrote nothing %d: too few",
			c.cached, c.txnSucceeded, c.txnFailedCompare, c.txnWrote, c.txnReadOnly)
	}
	for _, e := range coveredErrors {
		if c.errs[e] < 5 {
			t.Errorf("only %d failures with %v", c.errs[e], e)
		}
	}
	for _, cause := range []string{schema.CausePut, schema.CauseDelete, schema.CauseLeaseExpired, schema.CauseLeaseRevoked} {
		if c.causes[cause] < 5 {
			t.Errorf("only %d events with cause %s", c.causes[cause], cause)
		}
	}
	if c.expired < 5 || c.bad < 5 || c.rewound < 5 {
		t.Errorf("expired leases with keys %d, undecodable entries %d, rewound stamps %d: too few", c.expired, c.bad, c.rewound)
	}
}

// Two states fed the same log end byte-identical, and produce identical
// results along the way.
func TestDeterminismSameLogSameBytes(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			log, shadow := genTenantLog(seed, 5000)
			a, b := New(), New()
			cov := newCoverage()
			for i, e := range log {
				if c, err := Decode(e); err == nil && c.Now < a.Now() {
					cov.rewound++
				}
				ra, rb := a.Apply(e), b.Apply(e)
				if ja, jb := resultJSON(ra), resultJSON(rb); ja != jb {
					t.Fatalf("entry %d: results differ:\n%s\n%s", i, ja, jb)
				}
				cov.add(ra)
			}
			cov.check(t)
			sa, sb := snap(t, a), snap(t, b)
			if !bytes.Equal(sa, sb) {
				t.Fatal("snapshots of two states fed the same log differ")
			}
			if !bytes.Equal(sa, snap(t, shadow)) {
				t.Fatal("the generator's shadow state differs from a replay of its log")
			}
			if a.KeyCount() == 0 || a.Revision() < 1000 {
				t.Fatalf("the log left %d keys at revision %d: too little happened", a.KeyCount(), a.Revision())
			}
			for _, tenant := range genTenants {
				if u := a.In(tenant).Usage(); u.Keys == 0 || u.HistoryChanges == 0 {
					t.Fatalf("tenant %q was left %+v: its commands did too little", tenant, u)
				}
			}
			if len(a.Quotas()) == 0 {
				t.Fatal("the log set no quota")
			}
			eq(t, "digest", stateDigest(a), stateDigest(b))
		})
	}
}

// The same with batch entries: two states fed one log that mixes single
// entries and batches end byte-identical, result by result, and identical
// to the generator's shadow, which applied every command as its own entry.
func TestDeterminismSameLogSameBytesBatched(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			log, shadow := genTenantLog(seed, 5000)
			entries := splitBatches(t, rand.New(rand.NewSource(seed)), log)
			a, b := New(), New()
			cov := newCoverage()
			for i, e := range entries {
				parts, err := entryCommands(e)
				if err != nil {
					t.Fatal(err)
				}
				ra, rb := a.ApplyEntry(e), b.ApplyEntry(e)
				if len(ra) != len(rb) || len(ra) != len(parts) {
					t.Fatalf("entry %d: %d and %d results for %d commands", i, len(ra), len(rb), len(parts))
				}
				for k := range ra {
					// Applied at a later time than stamped: the clock was ahead.
					if c, err := Decode(parts[k]); err == nil && c.Now < ra[k].Now {
						cov.rewound++
					}
					if ja, jb := fullResult(ra[k]), fullResult(rb[k]); ja != jb {
						t.Fatalf("entry %d command %d: results differ:\n%s\n%s", i, k, ja, jb)
					}
					cov.add(ra[k])
				}
			}
			cov.check(t)
			sa := snap(t, a)
			if !bytes.Equal(sa, snap(t, b)) {
				t.Fatal("snapshots of two states fed the same batched log differ")
			}
			if !bytes.Equal(sa, snap(t, shadow)) {
				t.Fatal("the batched log ends different from its commands applied one by one")
			}
			eq(t, "digest", stateDigest(a), stateDigest(b))
			if len(entries) > len(log)/5 {
				t.Fatalf("%d entries for %d commands: too few batches", len(entries), len(log))
			}
		})
	}
}

// Snapshot -> Restore -> Snapshot gives the same bytes, the restored state
// shows the same everything (including the derived indexes), and applying
// the rest of the log to the original and to the restored state keeps them
// identical, result by result.
func TestDeterminismSnapshotRestoreContinue(t *testing.T) {
	log, _ := genTenantLog(42, 6000)
	orig := New()
	var copies []*State
	for i, e := range log {
		if i > 0 && i%1000 == 0 {
			data := snap(t, orig)
			c := restored(t, data)
			if again := snap(t, c); !bytes.Equal(data, again) {
				t.Fatalf("entry %d: snapshot -> restore -> snapshot differs", i)
			}
			eq(t, fmt.Sprintf("entry %d: restored digest", i), stateDigest(c), stateDigest(orig))
			if err := checkInvariants(c); err != nil {
				t.Fatalf("entry %d: restored state: %v", i, err)
			}
			copies = append(copies, c)
		}
		want := resultJSON(orig.Apply(e))
		for j, c := range copies {
			if got := resultJSON(c.Apply(e)); got != want {
				t.Fatalf("entry %d: the state restored at entry %d answers\n%s\nthe original\n%s", i, (j+1)*1000, got, want)
			}
		}
	}
	final := snap(t, orig)
	for j, c := range copies {
		if !bytes.Equal(final, snap(t, c)) {
			t.Fatalf("the state restored at entry %d ends different", (j+1)*1000)
		}
		eq(t, "final digest", stateDigest(c), stateDigest(orig))
	}
	if len(copies) != 5 {
		t.Fatalf("%d restore points", len(copies))
	}
}

// Restoring into a State that already holds data replaces it completely.
func TestRestoreReplacesExistingState(t *testing.T) {
	_, src := genTenantLog(7, 1500)
	data := snap(t, src)
	dst := New()
	run(t, dst,
		step{t0, &Limits{MaxLeases: 3, MaxKeysPerLease: 3}},
		step{t0, &Grant{ID: 500, TTL: 99}},
		step{t0, &Put{Key: "only.in.dst", Value: val(`1`), Lease: 500}},
		step{t0, &Put{Key: "anon.in.dst", Value: val(`1`), TTL: 9}},
	)
	if err := dst.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	eq(t, "digest", stateDigest(dst), stateDigest(src))
	if err := checkInvariants(dst); err != nil {
		t.Fatal(err)
	}
	eq(t, "bytes", string(snap(t, dst)), string(data))
}

// A Snapshot is a point-in-time copy: commands applied after taking it do
// not show in what it writes, and it can be written more than once.
func TestSnapshotIsPointInTime(t *testing.T) {
	log, _ := genTenantLog(11, 3000)
	s := New()
	for _, e := range log[:1500] {
		s.Apply(e)
	}
	want := snap(t, s)
	sn := s.Snapshot()
	for _, e := range log[1500:] {
		s.Apply(e)
	}
	// Touch every kind of record after the snapshot was taken.
	run(t, s,
		step{s.Now(), &Limits{MaxLeases: 1000, MaxKeysPerLease: 1000}},
		step{s.Now(), &Grant{TTL: 5}},
	)
	id := s.nextLeaseID - 1
	for _, k := range newCmdGen(0).keys {
		apply(t, s, s.Now(), &Put{Key: k, Value: val(`"after"`), Lease: id})
	}
	mustApply(t, s, s.Now(), &KeepAlive{ID: id, TTL: 6})
	mustApply(t, s, s.Now(), &Delete{Key: "a", IsPrefix: true})
	for i := 0; i < 2; i++ {
		var buf bytes.Buffer
		if _, err := sn.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("write %d of a snapshot shows later changes", i+1)
		}
	}
	if bytes.Equal(want, snap(t, s)) {
		t.Fatal("the state did not change after the snapshot; the test shows nothing")
	}
}

// Apply may go on while a snapshot is written (the service writes it from
// Raft's snapshot goroutine): the written bytes are the state at the time
// the snapshot was taken. Run with -race to check the copy-on-write sharing.
func TestSnapshotWriteConcurrentWithApply(t *testing.T) {
	log, _ := genTenantLog(13, 4000)
	s := New()
	for _, e := range log[:2000] {
		s.Apply(e)
	}
	want := snap(t, s)
	sn := s.Snapshot()
	done := make(chan []byte)
	go func() {
		var buf bytes.Buffer
		if _, err := sn.WriteTo(&buf); err != nil {
			buf.Reset()
		}
		done <- buf.Bytes()
	}()
	for _, e := range log[2000:] {
		s.Apply(e)
	}
	if got := <-done; !bytes.Equal(got, want) {
		t.Fatal("a snapshot written while Apply went on does not show the state it was taken at")
	}
}

// deepCopy (used by BenchmarkRevoke10kKeys) copies a state exactly.
func TestDeepCopyForBenchmarks(t *testing.T) {
	log, src := genTenantLog(17, 2000)
	c := deepCopy(src)
	eq(t, "digest", stateDigest(c), stateDigest(src))
	if err := checkInvariants(c); err != nil {
		t.Fatal(err)
	}
	more, _ := genTenantLog(18, 500)
	for _, e := range append(more, log[:100]...) {
		eq(t, "result", resultJSON(c.Apply(e)), resultJSON(src.Apply(e)))
	}
	eq(t, "bytes", string(snap(t, c)), string(snap(t, src)))
}
