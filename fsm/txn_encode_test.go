package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// txnShapes are transactions of every shape the encoding must carry.
func txnShapes() []*Txn {
	every := []Compare{
		{Key: "k", Target: TargetExists, Op: CmpEq, Int: 1},
		{Key: "k", Target: TargetValue, Op: CmpNe, Value: val(`{"a":[1,2.5,"x"],"b":null}`)},
		{Key: "k.é", Target: TargetField, Op: CmpGe, Path: "/a/0", Value: val(`"s"`)},
		{Key: "k", Target: TargetField, Op: CmpEq, Path: "", Value: val(`null`)},
		{Key: "k", Target: TargetField, Op: CmpLt, Path: "/m~0n/a~1b", Value: val(`1e-7`)},
		{Key: "k", Target: TargetVersion, Op: CmpLt, Int: 3},
		{Key: "k", Target: TargetCreateRevision, Op: CmpEq, Int: 0},
		{Key: "k", Target: TargetModRevision, Op: CmpLe, Int: 1 << 40},
		{Key: "k", Target: TargetLease, Op: CmpNe, Int: MaxLeaseID},
		{Key: "k", Target: TargetTTL, Op: CmpGt, Int: -1},
		{Key: "", Target: TargetExists, Op: CmpEq},
	}
	ops := []TxnOp{
		{Put: &Put{Key: "a", Value: val(`1`)}},
		{Put: &Put{Key: "b", Value: val(`{"x":"<&>"}`), Lease: 7, PrevKV: true}},
		{Put: &Put{Key: "c", Value: val(`[null]`), TTL: 30}},
		{Get: &GetQuery{Key: "a"}},
		{Get: &GetQuery{Key: "p.", IsPrefix: true, After: "p.3", Limit: 1000, KeysOnly: true, MaxBytes: 1 << 20}},
		{Get: &GetQuery{Key: "", IsPrefix: true, Limit: 1, CountOnly: true}},
		{Delete: &Delete{Key: "a"}},
		{Delete: &Delete{Key: "p.", IsPrefix: true, PrevKV: true, Limit: 1000}},
		{Delete: &Delete{Key: "", IsPrefix: true}},
	}
	return []*Txn{
		{},
		{Compare: every},
		{Success: ops},
		{Failure: ops},
		{Compare: every, Success: ops, Failure: ops},
		{Compare: every[:1], Success: ops[3:4]},
		{Compare: every[6:7], Success: ops[:1], Failure: ops[3:4]},
	}
}

// Every transaction shape, with and without an idempotency key, decodes to
// what was encoded; the key travels in the header.
func TestEncodeDecodeTxnRoundTrip(t *testing.T) {
	const now = int64(1_700_000_000_123)
	for i, txn := range txnShapes() {
		for _, key := range []string{"", "k", "n1:req-1842", "ключ with spaces and \x00"} {
			data, err := EncodeKeyed(now, key, txn)
			if err != nil {
				t.Fatal(err)
			}
			wantFormat := byte(formatPlain)
			if key != "" {
				wantFormat = formatKeyed
			}
			if data[0] != wantFormat || Op(data[1]) != OpTxn || int64(binary.BigEndian.Uint64(data[2:10])) != now {
				t.Fatalf("shape %d key %q: header % x", i, key, data[:10])
			}
			c, err := Decode(data)
			if err != nil {
				t.Fatalf("shape %d key %q: %v", i, key, err)
			}
			want := Command{Op: OpTxn, Now: now, IdempotencyKey: key, Body: txn}
			if !reflect.DeepEqual(c, want) {
				t.Fatalf("shape %d key %q: got %+v (%+v), want %+v", i, key, c, c.Body, txn)
			}
			// Re-encoding the decoded command gives the same bytes.
			again, err := EncodeKeyed(c.Now, c.IdempotencyKey, c.Body)
			if err != nil || !bytes.Equal(again, data) {
				t.Fatalf("shape %d key %q: re-encoded differently: %v", i, key, err)
			}
		}
	}
	// Every other command carries a key the same way.
	for _, b := range []any{
		&Grant{ID: 3, TTL: 10, Metadata: val(`{"o":1}`)}, &KeepAlive{ID: 3, TTL: 4}, &Revoke{ID: 3},
		&Put{Key: "a", Value: val(`1`), TTL: 2}, &Delete{Key: "a.", IsPrefix: true, Limit: 5},
		&Expire{IDs: []int64{1}}, &Limits{MaxLeases: 1, MaxKeysPerLease: 2, IdempotencyEntries: 3, IdempotencyRevisions: 4},
	} {
		data := encode(t, now, Command{IdempotencyKey: "key-1", Body: b})
		c, err := Decode(data)
		if err != nil || !reflect.DeepEqual(c, Command{Op: opOf(b), Now: now, IdempotencyKey: "key-1", Body: b}) {
			t.Fatalf("%T: %+v, %v", b, c, err)
		}
		plain := encode(t, now, b)
		eq(t, fmt.Sprintf("%T: keyed entry is the plain one with the key after the header", b),
			data[headerLen:], append(append([]byte{5}, "key-1"...), plain[headerLen:]...))
	}
	eq(t, "txn op number", OpTxn, Op(8))
	eq(t, "txn op name", OpTxn.String(), "txn")
	eq(t, "target numbers", []Target{TargetExists, TargetValue, TargetField, TargetVersion, TargetCreateRevision, TargetModRevision, TargetLease, TargetTTL},
		[]Target{1, 2, 3, 4, 5, 6, 7, 8})
	eq(t, "operator numbers", allOps, []CompareOp{1, 2, 3, 4, 5, 6})
}

// JSON operands are compacted on decode, like put values, so every replica
// holds and hashes the same bytes however the leader spaced them.
func TestDecodeTxnCompactsJSON(t *testing.T) {
	data := encode(t, t0, &Txn{
		Compare: []Compare{{Key: "k", Target: TargetValue, Op: CmpEq, Value: val(" { \"a\" : [ 1 , 2 ] } ")}},
		Success: []TxnOp{{Put: &Put{Key: "k", Value: val("[ true ,\n null ]")}}},
	})
	c, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	txn := c.Body.(*Txn)
	eq(t, "compare value", string(txn.Compare[0].Value), `{"a":[1,2]}`)
	eq(t, "put value", string(txn.Success[0].Put.Value), `[true,null]`)
}

// Every truncation of a transaction entry, keyed or not, and every entry
// with a byte too many, is refused with ErrBadCommand and changes nothing.
func TestDecodeTxnTruncatedOrCorrupt(t *testing.T) {
	s := New()
	run(t, s, step{t0, &Grant{TTL: 10}}, step{t0, &Put{Key: "k", Value: val(`1`), Lease: 1}})
	before := snap(t, s)
	check := func(name string, data []byte) {
		t.Helper()
		if c, err := Decode(data); !errors.Is(err, ErrBadCommand) {
			t.Fatalf("%s: Decode = %+v (%+v), %v; want ErrBadCommand", name, c, c.Body, err)
		}
		if r := s.Apply(data); !errors.Is(r.Err, ErrBadCommand) || r.Reply != nil || r.Events != nil {
			t.Fatalf("%s: Apply = %+v", name, r)
		}
		if !bytes.Equal(before, snap(t, s)) {
			t.Fatalf("%s: state changed", name)
		}
	}
	n := 0
	for i, txn := range txnShapes() {
		for _, key := range []string{"", "key"} {
			data, err := EncodeKeyed(t0+10, key, txn)
			if err != nil {
				t.Fatal(err)
			}
			for cut := 0; cut < len(data); cut++ {
				check(fmt.Sprintf("shape %d key %q cut to %d of %d", i, key, cut, len(data)), data[:cut:cut])
				n++
			}
			check(fmt.Sprintf("shape %d key %q with a trailing byte", i, key), append(data[:len(data):len(data)], 0))
		}
	}
	if n < 500 {
		t.Fatalf("only %d truncations", n)
	}

	hdr := func(format byte) []byte {
		b := []byte{format, byte(OpTxn), 0, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint64(b[2:], uint64(t0+10))
		return b
	}
	body := func(parts ...[]byte) []byte { return append(hdr(formatPlain), bytes.Join(parts, nil)...) }
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"keyed with an empty key", append(append(hdr(formatKeyed), 0), 0, 0, 0)},
		{"keyed with a key longer than the entry", append(hdr(formatKeyed), 9, 'k')},
		{"keyed with only the key", append(hdr(formatKeyed), 1, 'k')},
		{"compare count beyond the data", body([]byte{0x7f, 1, 'k'})},
		{"branch count beyond the data", body([]byte{0, 0x7f, 4})},
		{"operation kind 0", body([]byte{0, 1, 0, 0})},
		{"operation kind 3 (revoke)", body([]byte{0, 1, 3, 2, 0})},
		{"operation kind 99", body([]byte{0, 1, 99, 0})},
		{"operation kind 101", body([]byte{0, 1, 101, 0})},
		{"compare value not JSON", body([]byte{1, 1, 'k', byte(TargetValue), byte(CmpEq), 0, 3, '{', 'a', '}', 0, 0, 0})},
		{"compare value two documents", body([]byte{1, 1, 'k', byte(TargetValue), byte(CmpEq), 0, 3, '1', ' ', '2', 0, 0, 0})},
		{"put without a value", body([]byte{0, 1, byte(OpPut), 1, 'a', 0, 0, 0, 0, 0})},
		{"put value not JSON", body([]byte{0, 1, byte(OpPut), 1, 'a', 1, 'x', 0, 0, 0, 0})},
	} {
		check(c.name, c.data)
	}
	// The same bytes with the value fixed decode, so the cases above fail
	// for the reason they name.
	for _, good := range [][]byte{
		body([]byte{1, 1, 'k', byte(TargetValue), byte(CmpEq), 0, 3, '"', 'a', '"', 0, 0, 0}),
		body([]byte{0, 1, byte(OpPut), 1, 'a', 1, '1', 0, 0, 0, 0}),
	} {
		if _, err := Decode(good); err != nil {
			t.Fatalf("control entry % x: %v", good, err)
		}
	}
}

// A compare target or operator the encoding does not define is as corrupt
// as an unknown operation kind: Decode must refuse it with ErrBadCommand
// rather than hand Apply a compare it evaluates by accident (an unknown
// target reads as the integer 0, so target 9 == 0 holds and the success
// branch runs; an unknown operator is always false).
func TestDecodeTxnRejectsUnknownCompareTargetAndOp(t *testing.T) {
	for _, c := range []Compare{
		{Key: "k", Target: 0, Op: CmpEq},
		{Key: "k", Target: TargetTTL + 1, Op: CmpEq},
		{Key: "k", Target: 255, Op: CmpEq},
		{Key: "k", Target: TargetExists, Op: 0},
		{Key: "k", Target: TargetVersion, Op: CmpGe + 1, Int: 0},
		{Key: "k", Target: TargetValue, Op: 255, Value: val(`null`)},
	} {
		data := encode(t, t0, &Txn{Compare: []Compare{c}, Success: []TxnOp{putOp("k", `"claimed"`)}})
		if got, err := Decode(data); !errors.Is(err, ErrBadCommand) {
			s := New()
			r := s.Apply(data)
			t.Errorf("target %d op %d: Decode = %+v, %v; want ErrBadCommand (Apply: err %v, key written %v)",
				c.Target, c.Op, got.Body, err, r.Err, getKey(t, s, "k") != nil)
		}
	}
}

// FuzzDecodeApplyTxn: no transaction entry, however broken, makes Decode
// or Apply panic; one that decodes either applies, is refused for a state
// reason, or (only with an empty operation) fails with ErrBadCommand, and
// a failure changes nothing.
func FuzzDecodeApplyTxn(f *testing.F) {
	for _, txn := range txnShapes() {
		for _, key := range []string{"", "key"} {
			data, err := EncodeKeyed(t0+1_000, key, txn)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New()
		run(t, s, step{t0, &Grant{TTL: 10}}, step{t0, &Put{Key: "k", Value: val(`{"a":[1]}`), Lease: 1}}, step{t0, &Put{Key: "p.1", Value: val(`1`)}})
		before := snapBytes(s)
		_, err := Decode(data)
		r := s.Apply(data)
		if err != nil {
			if !errors.Is(r.Err, ErrBadCommand) || !bytes.Equal(before, snapBytes(s)) {
				t.Fatalf("undecodable entry: Apply %v, or the state changed", r.Err)
			}
			return
		}
		if errors.Is(r.Err, ErrBadCommand) {
			t.Fatalf("decoded entry failed to apply: %v", r.Err)
		}
		checkAppliedState(t, s)
	})
}
