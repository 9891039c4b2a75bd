package fsm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"testing"

	"github.com/concord-io/concord/schema"
)

// batchOf encodes steps (a Command body carries its idempotency key) as
// one batch entry.
func batchOf(t testing.TB, steps ...step) []byte {
	t.Helper()
	parts := make([][]byte, len(steps))
	for i, st := range steps {
		parts[i] = encode(t, st.now, st.body)
	}
	b, err := EncodeBatch(parts)
	if err != nil {
		t.Fatalf("EncodeBatch: %v", err)
	}
	return b
}

// rawBatch frames parts as a batch entry without EncodeBatch's checks, so
// tests can put anything in one.
func rawBatch(parts ...[]byte) []byte {
	b := binary.AppendUvarint([]byte{formatBatch}, uint64(len(parts)))
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

// fullResult renders everything a Result carries, the telemetry and the
// clock included, for comparing a batch with the same commands one by one.
func fullResult(r Result) string {
	return fmt.Sprintf("%s cached=%v leases=%+v now=%d", resultJSON(r), r.Cached, r.Leases, r.Now)
}

// applySingly applies each command entry of a batch as its own entry.
func applySingly(t testing.TB, s *State, batch []byte) []Result {
	t.Helper()
	parts, err := entryCommands(batch)
	if err != nil {
		t.Fatalf("split batch: %v", err)
	}
	out := make([]Result, len(parts))
	for i, p := range parts {
		out[i] = s.Apply(p)
	}
	return out
}

// applyBatchChecked applies a batch entry to s and the same commands one
// by one to a copy of s, and fails unless both give the same results and
// end in the same state.
func applyBatchChecked(t testing.TB, s *State, batch []byte) []Result {
	t.Helper()
	single := restored(t, snap(t, s))
	want := applySingly(t, single, batch)
	got := s.ApplyEntry(batch)
	if len(got) != len(want) {
		t.Fatalf("batch gave %d results for %d commands", len(got), len(want))
	}
	for i := range got {
		if g, w := fullResult(got[i]), fullResult(want[i]); g != w {
			t.Fatalf("command %d: in a batch\n%s\nalone\n%s", i, g, w)
		}
	}
	if !bytes.Equal(snap(t, s), snap(t, single)) {
		t.Fatal("a batch and the same commands one by one end in different states")
	}
	eq(t, "digest", stateDigest(s), stateDigest(single))
	if err := checkInvariants(s); err != nil {
		t.Fatalf("invariant: %v", err)
	}
	return got
}

func TestEncodeBatchFormat(t *testing.T) {
	a := encode(t, t0, &Revoke{ID: 1})
	b := encode(t, t0+1, Command{IdempotencyKey: "k", Body: &KeepAlive{ID: 2}})
	got, err := EncodeBatch([][]byte{a, b})
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]byte{3, 2, byte(len(a))}, a...), byte(len(b))), b...)
	eq(t, "bytes", got, want)
	if !IsBatch(got) || IsBatch(a) || IsBatch(b) || IsBatch(nil) {
		t.Fatal("IsBatch does not tell batch entries from single ones")
	}
	parts, err := entryCommands(got)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "parts", parts, [][]byte{a, b})

	for _, tc := range []struct {
		name  string
		parts [][]byte
	}{
		{"no commands", nil},
		{"a batch inside a batch", [][]byte{a, got}},
		{"a truncated command", [][]byte{a, b[:headerLen-1]}},
		{"an unknown format", [][]byte{append([]byte{9}, a[1:]...)}},
		{"too many commands", make([][]byte, MaxBatchCommands+1)},
	} {
		if data, err := EncodeBatch(tc.parts); !errors.Is(err, ErrBadCommand) || data != nil {
			t.Errorf("%s: EncodeBatch = %q, %v; want ErrBadCommand", tc.name, data, err)
		}
	}
}

// A batch whose framing is broken is one bad entry: one result, which
// fails with ErrBadCommand, and nothing changes, not even the clock. Apply,
// which takes single-command entries, refuses every batch entry the same
// way.
func TestBatchFramingErrors(t *testing.T) {
	later := int64(t0 + 50_000)
	put := encode(t, later, &Put{Key: "b", Value: val(`2`)})
	good := rawBatch(put, put)
	cases := map[string][]byte{
		"format byte only":           {formatBatch},
		"no commands":                {formatBatch, 0},
		"count beyond the data":      {formatBatch, 0xff, 0xff, 0x03, 1, 1},
		"more than the most":         append(binary.AppendUvarint([]byte{formatBatch}, MaxBatchCommands+1), make([]byte, MaxBatchCommands+1)...),
		"command longer than data":   append([]byte{formatBatch, 1, byte(len(put) + 1)}, put...),
		"trailing bytes":             append(rawBatch(put), 0),
		"truncated second command":   good[:len(good)-1],
		"length prefix cut in half":  {formatBatch, 1, 0x80},
		"count says two, holds one":  append([]byte{formatBatch, 2}, rawBatch(put)[2:]...),
		"empty command length only":  {formatBatch, 1},
		"overlong count":             {formatBatch, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"batch of nothing but bytes": {formatBatch, 0xff},
	}
	cases["fewer commands than count"] = append([]byte{formatBatch, 3}, good[2:]...)
	s := New()
	run(t, s, step{t0, &Grant{TTL: 10}}, step{t0, &Put{Key: "a", Value: val(`1`), Lease: 1}})
	before := snap(t, s)
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			rs := s.ApplyEntry(data)
			if len(rs) != 1 || !errors.Is(rs[0].Err, ErrBadCommand) || rs[0].Reply != nil || rs[0].Events != nil {
				t.Fatalf("ApplyEntry = %+v, want one ErrBadCommand result", rs)
			}
			if r := s.Apply(data); !errors.Is(r.Err, ErrBadCommand) {
				t.Fatalf("Apply: %v, want ErrBadCommand", r.Err)
			}
			if !bytes.Equal(before, snap(t, s)) {
				t.Fatal("state changed")
			}
			eq(t, "now", s.Now(), int64(t0))
		})
	}
	// Apply refuses a well-formed batch too: its results are ApplyEntry's.
	if r := s.Apply(good); !errors.Is(r.Err, ErrBadCommand) {
		t.Fatalf("Apply of a batch: %v, want ErrBadCommand", r.Err)
	}
	if !bytes.Equal(before, snap(t, s)) {
		t.Fatal("Apply of a batch changed the state")
	}
}

// batchCase is one row of the batch table: set-up steps applied one by
// one, then a batch entry, whose results must equal those of its commands
// applied one by one (applyBatchChecked) and pass check.
type batchCase struct {
	name  string
	setup []step
	batch func(t *testing.T) []byte
	check func(t *testing.T, s *State, rs []Result)
}

func TestBatchApply(t *testing.T) {
	steps := func(st ...step) func(t *testing.T) []byte {
		return func(t *testing.T) []byte { return batchOf(t, st...) }
	}
	noOutput := func(t *testing.T, r Result, sentinel error) {
		t.Helper()
		if !errors.Is(r.Err, sentinel) || r.Reply != nil || r.Events != nil || r.Leases != (LeaseActivity{}) {
			t.Fatalf("result %+v, want a bare %v", r, sentinel)
		}
	}
	cases := []batchCase{
		{
			name: "mixed commands apply in order, each at its own revision",
			batch: steps(
				step{t0, &Grant{TTL: 10}},
				step{t0 + 1, &Put{Key: "a", Value: val(`1`), Lease: 1}},
				step{t0 + 2, &Put{Key: "b", Value: val(`"x"`), PrevKV: true}},
				step{t0 + 3, &KeepAlive{ID: 1, TTL: 20}},
				step{t0 + 4, &Txn{
					Compare: []Compare{{Key: "a", Target: TargetCreateRevision, Op: CmpEq, Int: 1}},
					Success: []TxnOp{{Put: &Put{Key: "c", Value: val(`3`)}}, {Get: &GetQuery{Key: "b"}}},
				}},
				step{t0 + 5, &Delete{Key: "b"}},
				step{t0 + 6, &Put{Key: "b", Value: val(`4`), PrevKV: true}},
				step{t0 + 7, &Expire{}},
			),
			check: func(t *testing.T, s *State, rs []Result) {
				eq(t, "grant", rs[0].Reply, any(&schema.LeaseGrantReply{ID: 1, TTL: 10}))
				eq(t, "put a", rs[1].Reply, any(&schema.KVPutReply{Revision: 1}))
				eq(t, "put b", rs[2].Reply, any(&schema.KVPutReply{Revision: 2}))
				eq(t, "keepalive", rs[3].Reply, any(&schema.LeaseKeepAliveReply{ID: 1, TTL: 20, RemainingTTL: 20, RemainingMS: 20_000}))
				eq(t, "txn revision", rs[4].Reply.(*schema.KVTxnReply).Revision, int64(3))
				eq(t, "delete", rs[5].Reply, any(&schema.KVDeleteReply{Revision: 4, Deleted: 1}))
				eq(t, "put b again has no prev_kv", rs[6].Reply, any(&schema.KVPutReply{Revision: 5}))
				for i, rev := range []int64{0, 1, 2, 0, 3, 4, 5, 0} {
					for _, e := range rs[i].Events {
						eq(t, fmt.Sprintf("command %d event revision", i), e.Revision, rev)
					}
					eq(t, fmt.Sprintf("command %d now", i), rs[i].Now, int64(t0+i))
				}
				eq(t, "ops", []Op{rs[0].Op, rs[3].Op, rs[7].Op}, []Op{OpGrant, OpKeepAlive, OpExpire})
				eq(t, "telemetry", []LeaseActivity{rs[0].Leases, rs[3].Leases}, []LeaseActivity{{Granted: 1}, {Renewed: 1}})
				eq(t, "revision", s.Revision(), int64(5))
				eq(t, "lease 1 deadline", s.getLease(1).deadline, int64(t0+3+20_000))
				eq(t, "keys", keysOf(getAll(s, s.Now())), []string{"a", "b", "c"})
				eq(t, "change log", len(loggedEvents(s)), 5)
			},
		},
		{
			name:  "failing commands change nothing and leave their neighbours alone",
			setup: []step{{t0, &Grant{TTL: 10}}, {t0, &Put{Key: "k", Value: val(`1`), Lease: 1}}},
			batch: steps(
				step{t0 + 10, &Put{Key: "x", Value: val(`1`), Lease: 99}},
				step{t0 + 20, &Put{Key: "y", Value: val(`2`)}},
				step{t0 + 30, &Grant{ID: 1, TTL: 5}},
				step{t0 + 40, &KeepAlive{ID: 99}},
				step{t0 + 50, &Put{Key: "k", Value: val(`3`), TTL: 4}},
				step{t0 + 60, &Txn{Success: []TxnOp{{Delete: &Delete{Key: "", IsPrefix: true, Limit: 1}}}}},
				step{t0 + 70, &Revoke{ID: 1}},
				step{t0 + 80, &Revoke{ID: 1}},
			),
			check: func(t *testing.T, s *State, rs []Result) {
				noOutput(t, rs[0], ErrLeaseNotFound)
				eq(t, "put y", rs[1].Reply, any(&schema.KVPutReply{Revision: 2}))
				noOutput(t, rs[2], ErrLeaseExists)
				noOutput(t, rs[3], ErrLeaseNotFound)
				noOutput(t, rs[4], ErrLeaseConflict)
				noOutput(t, rs[5], ErrTooLarge)
				eq(t, "revoke", rs[6].Reply, any(&schema.LeaseRevokeReply{Revision: 3, Deleted: 1}))
				noOutput(t, rs[7], ErrLeaseNotFound)
				eq(t, "revision", s.Revision(), int64(3))
				eq(t, "keys", keysOf(getAll(s, s.Now())), []string{"y"})
				// The clock moves with every command, failed or not.
				eq(t, "now", s.Now(), int64(t0+80))
				eq(t, "now of a failed command", rs[4].Now, int64(t0+50))
			},
		},
		{
			name:  "a command that does not decode fails alone",
			setup: []step{{t0, &Grant{TTL: 10}}},
			batch: func(t *testing.T) []byte {
				put := encode(t, t0+10, &Put{Key: "a", Value: val(`1`), Lease: 1})
				nested := batchOf(t, step{t0 + 20, &Put{Key: "n", Value: val(`1`)}})
				later := encode(t, t0+90_000, &Revoke{ID: 1})
				return rawBatch(
					put,
					later[:headerLen-1],                      // truncated
					append(later[:len(later):len(later)], 0), // trailing byte
					nested,                                   // a batch is never a command of a batch
					nil,                                      // empty
					encode(t, t0+30, &Put{Key: "b", Value: val(`2`), Lease: 1}),
				)
			},
			check: func(t *testing.T, s *State, rs []Result) {
				eq(t, "put a", rs[0].Reply, any(&schema.KVPutReply{Revision: 1}))
				for i := 1; i <= 4; i++ {
					noOutput(t, rs[i], ErrBadCommand)
				}
				eq(t, "put b", rs[5].Reply, any(&schema.KVPutReply{Revision: 2}))
				eq(t, "keys", keysOf(getAll(s, s.Now())), []string{"a", "b"})
				// The undecodable revoke's stamp did not move the clock.
				eq(t, "now", s.Now(), int64(t0+30))
			},
		},
		{
			name: "idempotency keys within one batch",
			batch: steps(
				step{t0, Command{IdempotencyKey: "c1:1", Body: &Put{Key: "a", Value: val(`1`)}}},
				step{t0 + 1, Command{IdempotencyKey: "c1:1", Body: &Put{Key: "a", Value: val(`1`)}}},
				step{t0 + 2, Command{IdempotencyKey: "c1:1", Body: &Put{Key: "a", Value: val(`2`)}}},
				step{t0 + 3, Command{IdempotencyKey: "c1:2", Body: &Grant{TTL: 5}}},
				step{t0 + 4, Command{IdempotencyKey: "c1:2", Body: &Grant{TTL: 5}}},
				// A failed keyed command is not remembered: its retry applies.
				step{t0 + 5, Command{IdempotencyKey: "c1:3", Body: &Put{Key: "l", Value: val(`1`), Lease: 2}}},
				step{t0 + 6, &Grant{TTL: 5}},
				step{t0 + 7, Command{IdempotencyKey: "c1:3", Body: &Put{Key: "l", Value: val(`1`), Lease: 2}}},
			),
			check: func(t *testing.T, s *State, rs []Result) {
				eq(t, "first put", rs[0].Reply, any(&schema.KVPutReply{Revision: 1}))
				if !rs[1].Cached || string(rs[1].Reply.(json.RawMessage)) != `{"revision":1}` || rs[1].Events != nil {
					t.Fatalf("retry in the same batch: %+v, want the cached first reply", rs[1])
				}
				noOutput(t, rs[2], ErrIdempotencyConflict)
				eq(t, "grant", rs[3].Reply, any(&schema.LeaseGrantReply{ID: 1, TTL: 5, Revision: 1}))
				if !rs[4].Cached || rs[4].Leases != (LeaseActivity{}) {
					t.Fatalf("grant retry: %+v, want cached with no lease activity", rs[4])
				}
				noOutput(t, rs[5], ErrLeaseNotFound)
				eq(t, "put l on retry", rs[7].Reply, any(&schema.KVPutReply{Revision: 2}))
				eq(t, "value of a", string(getKey(t, s, "a").Value), `1`)
				eq(t, "revision", s.Revision(), int64(2))
				eq(t, "remembered", s.IdempotencyCount(), 3)
			},
		},
		{
			name: "idempotency keys across batches and single entries",
			setup: []step{
				{t0, Command{IdempotencyKey: "single", Body: &Put{Key: "s", Value: val(`1`)}}},
			},
			batch: steps(
				// The retry of a single command, in a batch.
				step{t0 + 1, Command{IdempotencyKey: "single", Body: &Put{Key: "s", Value: val(`1`)}}},
				step{t0 + 2, Command{IdempotencyKey: "batched", Body: &Put{Key: "b", Value: val(`2`)}}},
			),
			check: func(t *testing.T, s *State, rs []Result) {
				if !rs[0].Cached {
					t.Fatalf("retry of a single command in a batch: %+v, want cached", rs[0])
				}
				eq(t, "batched put", rs[1].Reply, any(&schema.KVPutReply{Revision: 2}))
				// The retry of a batched command, alone and in another batch.
				r := apply(t, s, t0+3, Command{IdempotencyKey: "batched", Body: &Put{Key: "b", Value: val(`2`)}})
				if !r.Cached || string(r.Reply.(json.RawMessage)) != `{"revision":2}` {
					t.Fatalf("single retry of a batched command: %+v", r)
				}
				rs2 := applyBatchChecked(t, s, batchOf(t,
					step{t0 + 4, Command{IdempotencyKey: "batched", Body: &Put{Key: "b", Value: val(`2`)}}},
					step{t0 + 5, Command{IdempotencyKey: "batched", Body: &Put{Key: "b", Value: val(`3`)}}},
				))
				if !rs2[0].Cached {
					t.Fatalf("retry of a batched command in a later batch: %+v", rs2[0])
				}
				noOutput(t, rs2[1], ErrIdempotencyConflict)
				eq(t, "revision", s.Revision(), int64(2))
			},
		},
		{
			name:  "consecutive keep-alives of one lease cost one renewal and each gets its reply",
			setup: []step{{t0, &Grant{TTL: 10}}, {t0, &Grant{TTL: 30}}, {t0, &Put{Key: "k", Value: val(`1`), Lease: 1}}},
			batch: steps(
				step{t0 + 300, &KeepAlive{ID: 1}},
				step{t0 + 500, &KeepAlive{ID: 1}},
				step{t0 + 400, &KeepAlive{ID: 1}}, // stamped earlier: proposed concurrently
				step{t0 + 450, &KeepAlive{ID: 2}},
				step{t0 + 460, &KeepAlive{ID: 1, TTL: 4}},
				step{t0 + 470, &KeepAlive{ID: 1}}, // keeps the ttl of 4 just set
				step{t0 + 480, &KeepAlive{ID: 7}},
				step{t0 + 490, &KeepAlive{ID: 7}},
			),
			check: func(t *testing.T, s *State, rs []Result) {
				for i := 0; i < 3; i++ {
					eq(t, fmt.Sprintf("reply %d", i), rs[i].Reply, any(&schema.LeaseKeepAliveReply{ID: 1, TTL: 10, RemainingTTL: 10, RemainingMS: 10_000}))
					eq(t, fmt.Sprintf("renewals of %d", i), rs[i].Leases, LeaseActivity{Renewed: 1})
				}
				if rs[0].Reply == rs[1].Reply || rs[1].Reply == rs[2].Reply {
					t.Fatal("coalesced keep-alives share one reply value")
				}
				eq(t, "nows", []int64{rs[0].Now, rs[1].Now, rs[2].Now}, []int64{t0 + 300, t0 + 500, t0 + 500})
				eq(t, "lease 2", rs[3].Reply, any(&schema.LeaseKeepAliveReply{ID: 2, TTL: 30, RemainingTTL: 30, RemainingMS: 30_000}))
				eq(t, "new ttl", rs[4].Reply, any(&schema.LeaseKeepAliveReply{ID: 1, TTL: 4, RemainingTTL: 4, RemainingMS: 4_000}))
				eq(t, "kept ttl", rs[5].Reply, any(&schema.LeaseKeepAliveReply{ID: 1, TTL: 4, RemainingTTL: 4, RemainingMS: 4_000}))
				noOutput(t, rs[6], ErrLeaseNotFound)
				noOutput(t, rs[7], ErrLeaseNotFound)
				eq(t, "deadline 1", s.getLease(1).deadline, int64(t0+500+4_000))
				eq(t, "deadline 2", s.getLease(2).deadline, int64(t0+500+30_000))
				eq(t, "key remaining", *getKey(t, s, "k").RemainingMS, int64(4_000))
			},
		},
		{
			name:  "keyed keep-alives are each remembered",
			setup: []step{{t0, &Grant{TTL: 10}}},
			batch: steps(
				step{t0 + 1, Command{IdempotencyKey: "ka-1", Body: &KeepAlive{ID: 1}}},
				step{t0 + 2, &KeepAlive{ID: 1}},
				step{t0 + 3, Command{IdempotencyKey: "ka-2", Body: &KeepAlive{ID: 1}}},
				step{t0 + 4, Command{IdempotencyKey: "ka-2", Body: &KeepAlive{ID: 1}}},
			),
			check: func(t *testing.T, s *State, rs []Result) {
				eq(t, "remembered", s.IdempotencyCount(), 2)
				if rs[2].Cached || !rs[3].Cached {
					t.Fatalf("keyed keep-alives: cached %v and %v, want false, true", rs[2].Cached, rs[3].Cached)
				}
				eq(t, "deadline", s.getLease(1).deadline, int64(t0+3+10_000))
			},
		},
		{
			name:  "limits set in a batch bind its later commands",
			setup: []step{{t0, &Grant{TTL: 10}}},
			batch: steps(
				step{t0, &Limits{MaxLeases: 2, MaxKeysPerLease: 1}},
				step{t0, &Grant{TTL: 10}},
				step{t0, &Grant{TTL: 10}},
				step{t0, &Put{Key: "a", Value: val(`1`), Lease: 1}},
				step{t0, &Put{Key: "b", Value: val(`1`), Lease: 1}},
			),
			check: func(t *testing.T, s *State, rs []Result) {
				eq(t, "grant", rs[1].Reply, any(&schema.LeaseGrantReply{ID: 2, TTL: 10}))
				noOutput(t, rs[2], ErrLimitExceeded)
				noOutput(t, rs[4], ErrLimitExceeded)
			},
		},
		{
			name:  "expiry in a batch, and a keep-alive just before it wins",
			setup: []step{{t0, &Grant{TTL: 1}}, {t0, &Grant{TTL: 1}}, {t0, &Put{Key: "a", Value: val(`1`), Lease: 1}}, {t0, &Put{Key: "b", Value: val(`1`), Lease: 2}}},
			batch: steps(
				step{t0 + 1_500, &KeepAlive{ID: 2}},
				step{t0 + 1_600, &Expire{IDs: []int64{1, 2}}},
				step{t0 + 1_700, &Put{Key: "c", Value: val(`1`), Lease: 1}},
			),
			check: func(t *testing.T, s *State, rs []Result) {
				eq(t, "expired", rs[1].Expired, []ExpiredLease{{ID: 1, Keys: 1, Deadline: t0 + 1_000}})
				checkEvents(t, rs[1].Events, 3, schema.EventDelete, schema.CauseLeaseExpired)
				noOutput(t, rs[2], ErrLeaseNotFound)
				eq(t, "keys", keysOf(getAll(s, s.Now())), []string{"b"})
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			run(t, s, tc.setup...)
			data := tc.batch(t)
			rs := applyBatchChecked(t, s, data)
			if tc.check != nil {
				tc.check(t, s, rs)
			}
		})
	}
}

// withKeepAliveRuns returns log with copies of some unkeyed keep-alives
// inserted right after them, stamped a little earlier or later, as a
// client's retries or several clients of one lease might send them.
func withKeepAliveRuns(t testing.TB, r *rand.Rand, log [][]byte) [][]byte {
	var out [][]byte
	for _, e := range log {
		out = append(out, e)
		c, err := Decode(e)
		if err != nil || c.IdempotencyKey != "" || r.Intn(2) == 0 {
			continue
		}
		if _, ok := c.Body.(*KeepAlive); !ok {
			continue
		}
		for i := 1 + r.Intn(3); i > 0; i-- {
			out = append(out, encode(t, c.Now+int64(r.Intn(400)-200), c.Body))
		}
	}
	return out
}

// splitBatches groups a log into entries of 1 to 24 commands; a group of
// one is sometimes a batch of one, mostly the single entry itself.
// EncodeBatch refuses undecodable commands, so groups holding one are
// framed by hand.
func splitBatches(t testing.TB, r *rand.Rand, log [][]byte) [][]byte {
	var out [][]byte
	for len(log) > 0 {
		n := min(len(log), 1+r.Intn(24))
		group := log[:n]
		log = log[n:]
		if n == 1 && r.Intn(4) > 0 {
			out = append(out, group[0])
			continue
		}
		b, err := EncodeBatch(group)
		if err != nil {
			b = rawBatch(group...)
		}
		out = append(out, b)
	}
	return out
}

// A random command stream applied one entry per command and applied in
// batches of random sizes gives the same result for every command and the
// same state, byte for byte, along the way and at the end. The stream
// holds every command type, failures, undecodable commands, idempotent
// retries, stamps out of order, and runs of identical keep-alives, which a
// batch coalesces.
func TestBatchEquivalentToSingles(t *testing.T) {
	for _, seed := range []int64{1, 2, 3, 4} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := rand.New(rand.NewSource(seed))
			log, _ := genLog(seed, 4000)
			log = withKeepAliveRuns(t, r, log)
			entries := splitBatches(t, r, log)
			singles, batched := New(), New()
			cov := newCoverage()
			var coalesced, batches int
			i := 0
			for n, e := range entries {
				parts, err := entryCommands(e)
				if err != nil {
					t.Fatalf("entry %d: %v", n, err)
				}
				got := batched.ApplyEntry(e)
				if len(got) != len(parts) {
					t.Fatalf("entry %d: %d results for %d commands", n, len(got), len(parts))
				}
				if IsBatch(e) {
					batches++
				}
				for k, p := range parts {
					if k > 0 && IsBatch(e) && sameKeepAliveEntry(p, parts[k-1]) {
						coalesced++
					}
					if c, err := Decode(p); err == nil && c.Now < singles.Now() {
						cov.rewound++
					}
					want := singles.Apply(p)
					if g, w := fullResult(got[k]), fullResult(want); g != w {
						t.Fatalf("command %d (entry %d, #%d of %d): batched\n%s\nsingle\n%s", i, n, k, len(parts), g, w)
					}
					cov.add(want)
					i++
				}
				if n%500 == 0 {
					if !bytes.Equal(snap(t, singles), snap(t, batched)) {
						t.Fatalf("entry %d: states differ", n)
					}
				}
			}
			cov.check(t)
			if !bytes.Equal(snap(t, singles), snap(t, batched)) {
				t.Fatal("singles and batches end in different states")
			}
			eq(t, "digest", stateDigest(batched), stateDigest(singles))
			if err := checkInvariants(batched); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d commands in %d entries, %d batches; %d keep-alives coalesced", i, len(entries), batches, coalesced)
			if batches < 200 || coalesced < 50 {
				t.Fatalf("%d batches, %d coalesced keep-alives: too few", batches, coalesced)
			}
		})
	}
}

// sameKeepAliveEntry reports whether two entries are unkeyed keep-alives
// of one lease with one ttl, which a batch coalesces.
func sameKeepAliveEntry(a, b []byte) bool {
	ca, err1 := Decode(a)
	cb, err2 := Decode(b)
	return err1 == nil && err2 == nil && sameKeepAlive(ca, cb)
}

// goldenBatch is the batch in testdata/batch-v1.golden, applied to the
// state goldenBatchSetup builds. Its results are spelled out by hand in
// TestBatchGoldenApply.
const goldenBatch = "testdata/batch-v1.golden"

func goldenBatchSetup() []step {
	return []step{{t0, &Grant{TTL: 10}}, {t0, &Put{Key: "svc.a", Value: val(`1`), Lease: 1}}}
}

func goldenBatchSteps() []step {
	return []step{
		{t0 + 100, &Put{Key: "svc.b", Value: val(`{"addr":"10.0.0.6"}`), Lease: 1}},                 // rev 2
		{t0 + 200, Command{IdempotencyKey: "c:1", Body: &Grant{TTL: 30, Metadata: val(`{"o":1}`)}}}, // lease 2
		{t0 + 150, &KeepAlive{ID: 1}},                             // stamped early: at t0+200
		{t0 + 300, &KeepAlive{ID: 1}},                             // coalesced with the one before
		{t0 + 400, &Put{Key: "svc.a", Value: val(`2`), Lease: 2}}, // conflict
		{t0 + 500, Command{IdempotencyKey: "c:1", Body: &Grant{TTL: 30, Metadata: val(`{"o":1}`)}}}, // cached
		{t0 + 600, &Txn{
			Compare: []Compare{{Key: "svc.b", Target: TargetVersion, Op: CmpEq, Int: 1}},
			Success: []TxnOp{{Delete: &Delete{Key: "svc.", IsPrefix: true}}},
		}}, // rev 3
		{t0 + 700, &Expire{}},
	}
}

// The encoding of a batch entry is byte for byte the golden file, so logs
// written with it stay readable. -update rewrites it; a change of format
// needs a new format byte and a new file instead.
func TestBatchGoldenWrite(t *testing.T) {
	got := batchOf(t, goldenBatchSteps()...)
	if *update {
		if err := os.WriteFile(goldenBatch, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", goldenBatch)
	}
	if want := readGoldenFile(t, goldenBatch); !bytes.Equal(got, want) {
		t.Fatalf("batch encoding differs from %s:\ngot  %x\nwant %x", goldenBatch, got, want)
	}
}

// The golden batch entry applies with the results spelled out here, and
// like its commands one by one.
func TestBatchGoldenApply(t *testing.T) {
	data := readGoldenFile(t, goldenBatch)
	s := New()
	run(t, s, goldenBatchSetup()...)
	rs := applyBatchChecked(t, s, data)
	eq(t, "results", len(rs), 8)
	eq(t, "put svc.b", rs[0].Reply, any(&schema.KVPutReply{Revision: 2}))
	eq(t, "grant", rs[1].Reply, any(&schema.LeaseGrantReply{ID: 2, TTL: 30, Revision: 2}))
	for i := 2; i <= 3; i++ {
		eq(t, "keep-alive", rs[i].Reply, any(&schema.LeaseKeepAliveReply{ID: 1, TTL: 10, RemainingTTL: 10, RemainingMS: 10_000}))
	}
	eq(t, "keep-alive nows", []int64{rs[2].Now, rs[3].Now}, []int64{t0 + 200, t0 + 300})
	if !errors.Is(rs[4].Err, ErrLeaseConflict) {
		t.Fatalf("put svc.a on lease 2: %v, want a conflict", rs[4].Err)
	}
	if !rs[5].Cached || string(rs[5].Reply.(json.RawMessage)) != `{"id":2,"ttl":30,"revision":2}` {
		t.Fatalf("grant retry: %+v", rs[5])
	}
	txn := rs[6].Reply.(*schema.KVTxnReply)
	if !txn.Succeeded || txn.Revision != 3 {
		t.Fatalf("txn: %+v", txn)
	}
	eq(t, "deleted", checkEvents(t, rs[6].Events, 3, schema.EventDelete, schema.CauseDelete), []string{"svc.a", "svc.b"})
	eq(t, "tick", rs[7].Op, OpExpire)
	eq(t, "revision", s.Revision(), int64(3))
	eq(t, "now", s.Now(), int64(t0+700))
	eq(t, "lease 1 deadline", s.getLease(1).deadline, int64(t0+300+10_000))
	eq(t, "lease 2 deadline", s.getLease(2).deadline, int64(t0+200+30_000))
	eq(t, "keys", s.KeyCount(), 0)
}

// The commands that older releases cannot apply say so; the rest need
// nothing new.
func TestRequiredLogFormat(t *testing.T) {
	for _, c := range []struct {
		body any
		want int
	}{
		{&Put{Key: "a", Value: val(`1`)}, 1},
		{&Put{Key: "a", Value: val(`1`), ContentType: "text/plain"}, LogFormatHistory},
		{&Put{Key: "a", Value: val(`1`), Metadata: val(`{}`)}, LogFormatHistory},
		{&Delete{Key: "a", IsPrefix: true}, 1},
		{&Delete{Key: "a", IsRange: true}, LogFormatHistory},
		{&Compact{Revision: 3}, LogFormatHistory},
		{&Txn{Success: []TxnOp{{Put: &Put{Key: "a", Value: val(`1`)}}}}, 1},
		{&Txn{Failure: []TxnOp{{Put: &Put{Key: "a", Value: val(`1`), ContentType: "x"}}}}, LogFormatHistory},
		{&Txn{Success: []TxnOp{{Delete: &Delete{Key: "a"}}}}, 1},
		{&Txn{Success: []TxnOp{{Delete: &Delete{Key: "a", ByTxn: true}}}}, LogFormatTxnCause},
		{&Delete{Key: "a", ByTxn: true}, LogFormatTxnCause},
		{&Grant{TTL: 5}, 1},
		{&KeepAliveMany{IDs: []int64{1}}, 1},
	} {
		eq(t, fmt.Sprintf("%T %+v", c.body, c.body), RequiredLogFormat(c.body), c.want)
	}
	eq(t, "this release reads them", LogFormat >= LogFormatTxnCause, true)
}
