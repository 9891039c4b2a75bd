package fsm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/concord-io/concord/schema"
)

func TestNewState(t *testing.T) {
	s := New()
	eq(t, "revision", s.Revision(), int64(0))
	eq(t, "now", s.Now(), int64(0))
	eq(t, "keys", s.KeyCount(), 0)
	e, a := s.LeaseCount()
	eq(t, "leases", [2]int64{e, a}, [2]int64{0, 0})
	if _, ok := s.NextDeadline(); ok {
		t.Fatal("an empty state has a deadline")
	}
	eq(t, "expired", s.Expired(1<<40, 0), []int64(nil))
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	bodies := []any{
		&Grant{TTL: 10},
		&Grant{ID: 42, TTL: 3, Metadata: val(`{"owner":"x"}`)},
		&KeepAlive{ID: 7},
		&KeepAlive{ID: 7, TTL: 30},
		&Revoke{ID: 9},
		&Put{Key: "svc.a", Value: val(`{"addr":"10.0.0.5"}`), Lease: 3, PrevKV: true},
		&Put{Key: "svc.b", Value: val(`[1,"two",null]`), TTL: 5},
		&Delete{Key: "svc.", IsPrefix: true, PrevKV: true},
		&Delete{Key: "k"},
		&Expire{IDs: []int64{1, 2, 3}},
		&Expire{},
		&Limits{MaxLeases: 5, MaxKeysPerLease: 6},
		&Limits{MaxLeases: 5, MaxKeysPerLease: 6, IdempotencyEntries: 7, IdempotencyRevisions: 8, HistoryRevisions: 1 << 40, HistoryAgeMS: 3_600_000},
		&KeepAliveMany{IDs: []int64{1, 1 << 53, 7, 7}},
		&KeepAliveMany{IDs: []int64{-3}},
		&KeepAliveMany{},
	}
	for _, b := range bodies {
		now := int64(1_700_000_000_123)
		data := encode(t, now, b)
		if data[0] != 1 || Op(data[1]) != opOf(b) || int64(binary.BigEndian.Uint64(data[2:10])) != now {
			t.Fatalf("%T: header % x", b, data[:10])
		}
		c, err := Decode(data)
		if err != nil {
			t.Fatalf("Decode(%T): %v", b, err)
		}
		want := Command{Op: opOf(b), Now: now, Body: b}
		if !reflect.DeepEqual(c, want) {
			t.Fatalf("round trip of %T: got %+v (%+v), want %+v", b, c, c.Body, b)
		}
	}
	// The op numbers are part of the log format.
	eq(t, "op numbers", []Op{OpGrant, OpKeepAlive, OpRevoke, OpPut, OpDelete, OpExpire, OpSetLimits, OpTxn, OpKeepAliveMany, OpCompact, OpSetQuota, OpTenantMove}, []Op{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	eq(t, "op names", []string{OpGrant.String(), OpKeepAlive.String(), OpRevoke.String(), OpPut.String(),
		OpDelete.String(), OpExpire.String(), OpSetLimits.String(), OpKeepAliveMany.String(), OpCompact.String(), OpSetQuota.String(), OpTenantMove.String(), Op(13).String()},
		[]string{"grant", "keepalive", "revoke", "put", "delete", "expire", "set_limits", "keepalive_many", "compact", "set_quota", "tenant_move", "op(13)"})
	// SetLimits carries six varints, in field order.
	data := encode(t, 0, &Limits{MaxLeases: 1, MaxKeysPerLease: 2, IdempotencyEntries: 3, IdempotencyRevisions: 4, HistoryRevisions: 5, HistoryAgeMS: 6})
	eq(t, "set_limits body", data[headerLen:], []byte{2, 4, 6, 8, 10, 12})
	// KeepAliveMany: a count, then the ids.
	data = encode(t, 0, &KeepAliveMany{IDs: []int64{1, -1, 64}})
	eq(t, "keepalive_many body", data[headerLen:], []byte{3, 2, 1, 0x80, 0x01})
}

func TestEncodeRejectsUnknownBodies(t *testing.T) {
	for _, b := range []any{nil, "grant", Grant{TTL: 1}, &struct{}{}, 42} {
		if data, err := Encode(1, b); !errors.Is(err, ErrBadCommand) || data != nil {
			t.Errorf("Encode(%#v) = %q, %v; want ErrBadCommand", b, data, err)
		}
	}
}

// Entries that cannot be decoded fail with ErrBadCommand and change nothing,
// not even the clock.
func TestDecodeErrors(t *testing.T) {
	later := int64(t0 + 50_000)
	header := func(format, op byte) []byte {
		b := []byte{format, op, 0, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint64(b[2:], uint64(later))
		return b
	}
	grant := encode(t, later, &Grant{TTL: 1})
	cases := []struct {
		name string
		data []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"format byte only", []byte{1}},
		{"9 bytes", grant[:9]},
		{"format 0", append([]byte{0}, grant[1:]...)},
		{"format 2", append([]byte{2}, grant[1:]...)},
		{"format 255", append([]byte{255}, grant[1:]...)},
		{"op 0", append(header(1, 0), grant[headerLen:]...)},
		{"op 8", append(header(1, 8), grant[headerLen:]...)},
		{"op 10", append(header(1, 10), grant[headerLen:]...)},
		{"keepalive_many claiming more ids than bytes", append(header(1, byte(OpKeepAliveMany)), 0xff, 0xff, 0x03, 2, 4)},
		{"op 255", append(header(1, 255), grant[headerLen:]...)},
		{"header without body", header(1, byte(OpGrant))},
		{"expire claiming more ids than bytes", append(header(1, byte(OpExpire)), 0xff, 0xff, 0x03, 2, 4)},
		{"length beyond the data", append(header(1, byte(OpPut)), 0x7f, 'a')},
		{"overlong integer", append(header(1, byte(OpRevoke)), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)},
		{"JSON body of a put", append(header(1, byte(OpPut)), `{"key":"a","value":1}`...)},
		// Found by FuzzDecodeApply: metadata is stored and later encoded
		// in replies, events and snapshots, so the decoder must hold it
		// to what the service proposes, a JSON object.
		{"put metadata not JSON", encode(t, later, &Put{Key: "a", Value: val(`1`), ContentType: "t", Metadata: json.RawMessage(`000`)})},
		{"put metadata a JSON array", encode(t, later, &Put{Key: "a", Value: val(`1`), Metadata: json.RawMessage(`[1]`)})},
		{"put metadata a JSON string", encode(t, later, &Put{Key: "a", Value: val(`1`), Metadata: json.RawMessage(`"x"`)})},
	}
	// The control: the same put with an object for metadata decodes, with
	// the object compacted like a value.
	if c, err := Decode(encode(t, later, &Put{Key: "a", Value: val(`1`), Metadata: json.RawMessage(`{ "a" : 1 }`)})); err != nil {
		t.Fatalf("put with object metadata: %v", err)
	} else if got := string(c.Body.(*Put).Metadata); got != `{"a":1}` {
		t.Fatalf("metadata decoded as %s", got)
	}
	// Every truncation of every kind of body, and every body with a byte
	// too many, is refused.
	for _, b := range []any{
		&Grant{ID: 300, TTL: 10, Metadata: val(`{"owner":"x"}`)},
		&KeepAlive{ID: 300, TTL: 5},
		&Revoke{ID: 300},
		&Put{Key: "svc.a", Value: val(`{"addr":"10.0.0.5"}`), Lease: 300, TTL: 0, PrevKV: true},
		&Delete{Key: "svc.", IsPrefix: true},
		&Expire{IDs: []int64{300, 301}},
		&Limits{MaxLeases: 300, MaxKeysPerLease: 300, IdempotencyEntries: 300, IdempotencyRevisions: 300, HistoryRevisions: 300, HistoryAgeMS: 300},
		&KeepAliveMany{IDs: []int64{300, 301}},
	} {
		data := encode(t, later, b)
		for n := headerLen; n < len(data); n++ {
			// A set_limits entry written before the idempotency (after 2
			// fields) or change-log (after 4) limits existed is an older
			// encoding, not a truncation; TestSetLimitsOlderEncodings
			// covers it.
			if _, ok := b.(*Limits); ok && (n == headerLen+4 || n == headerLen+8) {
				continue
			}
			cases = append(cases, struct {
				name string
				data []byte
			}{fmt.Sprintf("%v truncated to %d of %d bytes", opOf(b), n, len(data)), data[:n:n]})
		}
		cases = append(cases, struct {
			name string
			data []byte
		}{fmt.Sprintf("%v with a trailing byte", opOf(b)), append(data[:len(data):len(data)], 0)})
	}
	s := New()
	run(t, s, step{t0, &Grant{TTL: 10}}, step{t0, &Put{Key: "a", Value: val(`1`), Lease: 1}})
	before := snap(t, s)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := Decode(tc.data); !errors.Is(err, ErrBadCommand) {
				t.Fatalf("Decode = %+v (%+v), %v; want ErrBadCommand", c, c.Body, err)
			}
			r := s.Apply(tc.data)
			if !errors.Is(r.Err, ErrBadCommand) {
				t.Fatalf("Apply: %v, want ErrBadCommand", r.Err)
			}
			if r.Reply != nil || r.Events != nil || r.Expired != nil {
				t.Fatalf("Apply of a bad entry produced output: %+v", r)
			}
			if after := snap(t, s); !bytes.Equal(before, after) {
				t.Fatalf("state changed:\nbefore %s\nafter  %s", before, after)
			}
			eq(t, "now", s.Now(), int64(t0))
		})
	}
}

// FuzzDecodeApply: no entry, however broken, makes Decode or Apply panic;
// an entry either decodes or fails with ErrBadCommand and changes nothing.
// `go test` runs the seeds; `go test -fuzz FuzzDecodeApply ./fsm` explores.
func FuzzDecodeApply(f *testing.F) {
	for _, b := range []any{
		&Grant{TTL: 10}, &Grant{ID: 5, TTL: 1, Metadata: val(`{}`)}, &KeepAlive{ID: 1, TTL: 3}, &Revoke{ID: 1},
		&Put{Key: "a.b", Value: val(`1`), Lease: 1}, &Put{Key: "t", Value: val(`"x"`), TTL: 2, PrevKV: true},
		&Delete{Key: "", IsPrefix: true, PrevKV: true}, &Expire{IDs: []int64{1, 2}}, &Expire{}, &Limits{MaxLeases: 2, MaxKeysPerLease: 2},
		&Limits{MaxLeases: 2, MaxKeysPerLease: 2, HistoryRevisions: 3, HistoryAgeMS: 1_000}, &KeepAliveMany{IDs: []int64{1, 2, 1}}, &KeepAliveMany{},
		&SetQuota{Tenant: "A", Quota: Quota{Leases: 1, Keys: 2}}, &SetQuota{Tenant: "A", Quota: Quota{Keys: -1}}, &SetQuota{Tenant: QuotaDefault, Clear: true},
		&TenantMove{Tenant: "A", Phase: MoveImport, Leases: []MovedLease{{ID: 2, TTL: 5, RemainingMS: 10}},
			Keys: []MovedKey{{Key: "m", Value: val(`1`), Version: 2, Lease: 2}}, Idempotency: []MovedIdem{{Key: "r", Reply: val(`{}`)}}},
		&TenantMove{Tenant: "A", Phase: MoveFence, To: "c2"}, &TenantMove{Tenant: "A", Phase: MoveActivate, NextLeaseID: 3},
	} {
		data, err := Encode(t0+1_000, b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte{1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0xff})
	// Batch entries: mixed and keyed commands, a run of identical
	// keep-alives, an undecodable command, a nested batch.
	ka := encode(f, t0+2_000, &KeepAlive{ID: 1})
	put := encode(f, t0+1_000, Command{IdempotencyKey: "k1", Body: &Put{Key: "a.c", Value: val(`{"x":1}`), Lease: 1}})
	f.Add(batchOf(f, step{t0 + 1_000, &Grant{TTL: 5}}, step{t0 + 1_500, &Put{Key: "a.b", Value: val(`2`), TTL: 3}}, step{t0 + 900, &Revoke{ID: 1}}))
	f.Add(rawBatch(ka, ka, encode(f, t0+1_000, &KeepAlive{ID: 1}), ka))
	f.Add(rawBatch(put, put, ka[:5], ka))
	f.Add(rawBatch(put, rawBatch(ka)))
	f.Add(rawBatch(encode(f, t0+3_000, &Txn{Success: []TxnOp{{Delete: &Delete{Key: "a", IsPrefix: true, Limit: 1}}}}), encode(f, t0, &Expire{IDs: []int64{1}})))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkEntryLikeSingles(t, data)
		s := New()
		run(t, s, step{t0, &Grant{TTL: 10}}, step{t0, &Put{Key: "a.b", Value: val(`1`), Lease: 1}})
		before := snapBytes(s)
		c, err := Decode(data)
		r := s.Apply(data)
		if err != nil {
			if !errors.Is(err, ErrBadCommand) || !errors.Is(r.Err, ErrBadCommand) {
				t.Fatalf("Decode: %v, Apply: %v", err, r.Err)
			}
			if !bytes.Equal(before, snapBytes(s)) {
				t.Fatal("an undecodable entry changed the state")
			}
			return
		}
		if r.Op != c.Op {
			t.Fatalf("result op %v, decoded op %v", r.Op, c.Op)
		}
		if r.Err != nil && errors.Is(r.Err, ErrBadCommand) {
			t.Fatalf("decoded entry failed to apply: %v", r.Err)
		}
		checkAppliedState(t, s)
	})
}

// checkAppliedState: whatever an entry did, the state is consistent and a
// snapshot of it restores to the same state.
func checkAppliedState(t *testing.T, s *State) {
	t.Helper()
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
	if got, want := stateDigest(restored(t, snap(t, s))), stateDigest(s); got != want {
		t.Fatalf("restored state differs:\n%s\nwant\n%s", got, want)
	}
}

// checkEntryLikeSingles: ApplyEntry of any entry either fails as a whole
// (broken batch framing: one ErrBadCommand result, no change), or gives
// the results and the state of applying its commands one by one.
func checkEntryLikeSingles(t *testing.T, data []byte) {
	setup := func() *State {
		s := New()
		run(t, s, step{t0, &Grant{TTL: 10}}, step{t0, &Put{Key: "a.b", Value: val(`1`), Lease: 1}})
		return s
	}
	s, single := setup(), setup()
	before := snapBytes(s)
	rs := s.ApplyEntry(data)
	parts, err := entryCommands(data)
	if err != nil {
		if !errors.Is(err, ErrBadCommand) || len(rs) != 1 || !errors.Is(rs[0].Err, ErrBadCommand) {
			t.Fatalf("split: %v; ApplyEntry: %+v", err, rs)
		}
		if !bytes.Equal(before, snapBytes(s)) {
			t.Fatal("a batch with broken framing changed the state")
		}
		return
	}
	if len(rs) != len(parts) {
		t.Fatalf("%d results for %d commands", len(rs), len(parts))
	}
	for i, p := range parts {
		if got, want := fullResult(rs[i]), fullResult(single.Apply(p)); got != want {
			t.Fatalf("command %d: in the entry\n%s\nalone\n%s", i, got, want)
		}
	}
	if !bytes.Equal(snapBytes(s), snapBytes(single)) {
		t.Fatal("the entry and its commands one by one end in different states")
	}
}

// ApplyCommand with a body Apply would never decode fails with
// ErrBadCommand and changes nothing.
func TestApplyCommandBadBody(t *testing.T) {
	s := New()
	run(t, s, step{t0, &Grant{TTL: 10}})
	before := snap(t, s)
	for _, c := range []Command{
		{Op: OpGrant, Now: t0, Body: Grant{TTL: 1}},
		{Op: OpPut, Now: t0, Body: nil},
		{Op: 99, Now: t0, Body: "x"},
	} {
		r := s.ApplyCommand(c)
		if !errors.Is(r.Err, ErrBadCommand) || r.Reply != nil || r.Events != nil {
			t.Fatalf("ApplyCommand(%+v) = %+v, want ErrBadCommand", c, r)
		}
		if !bytes.Equal(before, snap(t, s)) {
			t.Fatalf("ApplyCommand(%+v) changed the state", c)
		}
	}
	// ApplyCommand and Apply agree on a valid command.
	r := s.ApplyCommand(Command{Op: OpGrant, Now: t0, Body: &Grant{TTL: 2}})
	eq(t, "reply", r.Reply, any(&schema.LeaseGrantReply{ID: 2, TTL: 2}))
}

// The lease clock: Apply uses max(stamped now, last applied now).
func TestLeaseClockNeverRunsBackwards(t *testing.T) {
	s := New()
	mustApply(t, s, t0+5_000, &Grant{TTL: 10}) // lease 1, deadline t0+15_000
	eq(t, "now", s.Now(), int64(t0+5_000))

	// A grant stamped earlier (proposed concurrently, ordered later) gets
	// its deadline from the later time.
	mustApply(t, s, t0, &Grant{TTL: 10}) // lease 2
	eq(t, "now after an earlier stamp", s.Now(), int64(t0+5_000))
	eq(t, "lease 2 deadline", s.getLease(2).deadline, int64(t0+15_000))
	eq(t, "lease 2 remaining", info(t, s, 2).RemainingMS, int64(10_000))

	// So does a keep-alive ...
	mustApply(t, s, t0+8_000, &Expire{})
	r := mustApply(t, s, t0+1_000, &KeepAlive{ID: 1, TTL: 4})
	eq(t, "keepalive reply", r.Reply, any(&schema.LeaseKeepAliveReply{ID: 1, TTL: 4, RemainingTTL: 4, RemainingMS: 4_000}))
	eq(t, "lease 1 deadline", s.getLease(1).deadline, int64(t0+12_000))

	// ... and the anonymous lease of a ttl put.
	mustApply(t, s, t0+2_000, &Put{Key: "a", Value: val(`1`), TTL: 3})
	eq(t, "anonymous deadline", s.getLease(getKey(t, s, "a").Lease).deadline, int64(t0+11_000))
	eq(t, "now", s.Now(), int64(t0+8_000))

	// An expire stamped before a lease's deadline still expires it when the
	// clock is already past the deadline.
	mustApply(t, s, t0+13_000, &Expire{})
	r = mustApply(t, s, t0+1, &Expire{IDs: []int64{1, 2, 3}})
	eq(t, "expired", r.Expired, []ExpiredLease{{ID: 1, Keys: 0, Deadline: t0 + 12_000}, {ID: 3, Keys: 1, Deadline: t0 + 11_000}})
	eq(t, "lease 2 kept", info(t, s, 2).RemainingMS, int64(2_000))
	eq(t, "now", s.Now(), int64(t0+13_000))

	// A prev_kv read during a put stamped early also uses the clock.
	mustApply(t, s, t0, &Put{Key: "b", Value: val(`1`), Lease: 2})
	r = mustApply(t, s, t0, &Put{Key: "b", Value: val(`2`), Lease: 2, PrevKV: true})
	eq(t, "prev remaining", *r.Reply.(*schema.KVPutReply).PrevKV.RemainingMS, int64(2_000))
}

// The clock survives a snapshot: a restored state goes on from the stored
// time, so a lease keeps exactly the remaining time it had.
func TestLeaseClockSurvivesRestore(t *testing.T) {
	s := New()
	run(t, s, step{t0, &Grant{TTL: 30}}, step{t0 + 12_345, &Put{Key: "a", Value: val(`1`), Lease: 1}})
	s2 := restored(t, snap(t, s))
	eq(t, "now", s2.Now(), int64(t0+12_345))
	eq(t, "remaining", info(t, s2, 1).RemainingMS, int64(30_000-12_345))
	// A new leader's first command may be stamped with a smaller value
	// (its clock base was an older entry): nothing moves backwards.
	mustApply(t, s2, t0+100, &Expire{IDs: []int64{1}})
	eq(t, "lease kept", info(t, s2, 1).RemainingMS, int64(30_000-12_345))
	eq(t, "now", s2.Now(), int64(t0+12_345))
}

// A state-dependent failure stamped later than the clock advances the clock
// (the entry was applied; ARCHITECTURE.md: now = max(now_in_entry,
// last_applied_now)) and changes nothing else: the state equals that of a
// tick at the same stamp.
func TestFailedCommandAdvancesOnlyTheClock(t *testing.T) {
	base := New()
	run(t, base, step{t0, &Grant{TTL: 10}}, step{t0, &Put{Key: "a", Value: val(`1`), Lease: 1}})
	data := snap(t, base)
	for _, f := range []struct {
		body any
		err  error
	}{
		{&Grant{ID: 1, TTL: 1}, ErrLeaseExists},
		{&KeepAlive{ID: 2}, ErrLeaseNotFound},
		{&Revoke{ID: 2}, ErrLeaseNotFound},
		{&Put{Key: "a", Value: val(`2`), TTL: 1}, ErrLeaseConflict},
	} {
		s, tick := restored(t, data), restored(t, data)
		r := apply(t, s, t0+7_000, f.body)
		if !errors.Is(r.Err, f.err) {
			t.Fatalf("%T: %v, want %v", f.body, r.Err, f.err)
		}
		mustApply(t, tick, t0+7_000, &Expire{})
		eq(t, "now", s.Now(), int64(t0+7_000))
		if !bytes.Equal(snap(t, s), snap(t, tick)) {
			t.Fatalf("%T: failed command changed more than the clock", f.body)
		}
	}
}

// Result.Op names the command; replies have the schema types the service
// sends.
func TestResultTypes(t *testing.T) {
	s := New()
	for _, c := range []struct {
		body  any
		reply any
	}{
		{&Grant{TTL: 10}, &schema.LeaseGrantReply{}},
		{&KeepAlive{ID: 1}, &schema.LeaseKeepAliveReply{}},
		{&Put{Key: "a", Value: val(`1`)}, &schema.KVPutReply{}},
		{&Delete{Key: "a"}, &schema.KVDeleteReply{}},
		{&Revoke{ID: 1}, &schema.LeaseRevokeReply{}},
		{&Expire{}, nil},
		{&Limits{MaxLeases: 1, MaxKeysPerLease: 1}, nil},
	} {
		r := mustApply(t, s, t0, c.body)
		eq(t, "op", r.Op, opOf(c.body))
		if reflect.TypeOf(r.Reply) != reflect.TypeOf(c.reply) {
			t.Fatalf("%T: reply type %T, want %T", c.body, r.Reply, c.reply)
		}
		if c.reply != nil {
			if _, err := json.Marshal(r.Reply); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Apply must not keep references into the entry it was given: the caller
// (Raft, a log store reading from bbolt's mmap, a pooled buffer) owns that
// memory and may reuse it once Apply returns. The state's values and
// metadata must stay what was applied.
func TestApplyDoesNotRetainEntryBuffer(t *testing.T) {
	s := New()
	grant := encode(t, t0, &Grant{TTL: 10, Metadata: val(`{"owner":"billing"}`)})
	put := encode(t, t0, &Put{Key: "svc.a", Value: val(`{"addr":"10.0.0.5"}`), Lease: 1})
	for _, e := range [][]byte{grant, put} {
		if r := s.Apply(e); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	want := snap(t, s)
	// The caller reuses its buffers.
	for _, e := range [][]byte{grant, put} {
		for i := headerLen; i < len(e); i++ {
			if e[i] >= 'a' && e[i] <= 'z' {
				e[i] = 'X'
			}
		}
	}
	if got := string(getKey(t, s, "svc.a").Value); got != `{"addr":"10.0.0.5"}` {
		t.Errorf("value changed with the caller's buffer: %s", got)
	}
	if got := string(info(t, s, 1).Metadata); got != `{"owner":"billing"}` {
		t.Errorf("metadata changed with the caller's buffer: %s", got)
	}
	if got := snap(t, s); !bytes.Equal(got, want) {
		t.Errorf("snapshot changed with the caller's buffer:\n%s", got)
	}
}

// set_limits entries from before the idempotency and change-log limits
// decode, and the missing limits take their defaults when applied.
func TestSetLimitsOlderEncodings(t *testing.T) {
	full := encode(t, t0, &Limits{MaxLeases: 300, MaxKeysPerLease: 300, IdempotencyEntries: 300, IdempotencyRevisions: 300, HistoryRevisions: 300, HistoryAgeMS: 300})
	for _, n := range []int{headerLen + 4, headerLen + 8} {
		c, err := Decode(full[:n])
		if err != nil {
			t.Fatalf("%d-byte set_limits: %v", n, err)
		}
		s := New()
		if r := s.ApplyCommand(c); r.Err != nil {
			t.Fatal(r.Err)
		}
		want := Limits{MaxLeases: 300, MaxKeysPerLease: 300, IdempotencyEntries: DefaultLimits.IdempotencyEntries, IdempotencyRevisions: DefaultLimits.IdempotencyRevisions,
			HistoryRevisions: DefaultLimits.HistoryRevisions, HistoryAgeMS: DefaultLimits.HistoryAgeMS}
		if n == headerLen+8 {
			want.IdempotencyEntries, want.IdempotencyRevisions = 300, 300
		}
		eq(t, fmt.Sprintf("limits from %d bytes", n), s.Limits(), want)
	}
}

// A lease-clock stamp or a ttl out of range does not decode: with both in
// range a deadline cannot overflow, and one that wrapped would expire a
// lease early. Nor does a put of the empty key, which no range returns.
func TestDecodeRefusesClockTTLAndKeyOutOfRange(t *testing.T) {
	for _, c := range []struct {
		now  int64
		body any
	}{
		{-1, &Grant{TTL: 1}},
		{maxNow + 1, &Grant{TTL: 1}},
		{t0, &Grant{TTL: -1}},
		{t0, &Grant{TTL: 0}},
		{t0, &Grant{TTL: schema.MaxTTL + 1}},
		{t0, &KeepAlive{ID: 1, TTL: schema.MaxTTL + 1}},
		{t0, &Put{Key: "k", Value: val(`1`), TTL: -2}},
		{t0, &Put{Key: "", Value: val(`1`)}},
		{t0, &Txn{Success: []TxnOp{{Put: &Put{Key: "k", Value: val(`1`), TTL: schema.MaxTTL + 1}}}}},
		{t0, &TenantMove{Tenant: "A", Phase: MoveImport, Leases: []MovedLease{{ID: 1, TTL: 1, RemainingMS: schema.MaxTTL*1000 + 1}}}},
	} {
		if _, err := Decode(encode(t, c.now, c.body)); !errors.Is(err, ErrBadCommand) {
			t.Errorf("%T %+v at %d decoded: %v", c.body, c.body, c.now, err)
		}
	}
	// The bounds themselves decode and apply, and the deadline is exact.
	s := New()
	mustApply(t, s, maxNow, &Grant{TTL: schema.MaxTTL})
	li, err := s.LeaseInfo(1, false, maxNow)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "remaining at the bounds", li.RemainingMS, int64(schema.MaxTTL*1000))
}
