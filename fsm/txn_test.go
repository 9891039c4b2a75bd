package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/concord-io/concord/schema"
)

// Transaction helpers: operations and compares in one line each.

func putOp(key, value string) TxnOp { return TxnOp{Put: &Put{Key: key, Value: val(value)}} }

func putLeaseOp(key, value string, lease int64) TxnOp {
	return TxnOp{Put: &Put{Key: key, Value: val(value), Lease: lease}}
}

func putTTLOp(key, value string, ttl int64) TxnOp {
	return TxnOp{Put: &Put{Key: key, Value: val(value), TTL: ttl}}
}

func getOp(key string) TxnOp { return TxnOp{Get: &GetQuery{Key: key}} }

func getPrefixOp(prefix string, limit int) TxnOp {
	return TxnOp{Get: &GetQuery{Key: prefix, IsPrefix: true, Limit: limit}}
}

func delOp(key string) TxnOp { return TxnOp{Delete: &Delete{Key: key}} }

func delPrefixOp(prefix string, limit int64) TxnOp {
	return TxnOp{Delete: &Delete{Key: prefix, IsPrefix: true, Limit: limit}}
}

func cmpInt(key string, target Target, op CompareOp, n int64) Compare {
	return Compare{Key: key, Target: target, Op: op, Int: n}
}

func cmpValue(key string, op CompareOp, v string) Compare {
	return Compare{Key: key, Target: TargetValue, Op: op, Value: val(v)}
}

func cmpField(key, path string, op CompareOp, v string) Compare {
	return Compare{Key: key, Target: TargetField, Op: op, Path: path, Value: val(v)}
}

// txnOf returns a result's transaction reply, checking the contract every
// reply keeps: its revision is the state's, and every response carries it.
func txnOf(t testing.TB, s *State, r Result) *schema.KVTxnReply {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("transaction failed: %v", r.Err)
	}
	rep, ok := r.Reply.(*schema.KVTxnReply)
	if !ok {
		t.Fatalf("reply %T, want *schema.KVTxnReply", r.Reply)
	}
	if r.Op != OpTxn {
		t.Fatalf("result op %v", r.Op)
	}
	if rep.Revision != s.Revision() {
		t.Fatalf("reply revision %d, state revision %d", rep.Revision, s.Revision())
	}
	if rep.Responses == nil {
		t.Fatal("responses is nil; it must encode as []")
	}
	for i, resp := range rep.Responses {
		n, rev := 0, int64(-1)
		if resp.Put != nil {
			n, rev = n+1, resp.Put.Revision
		}
		if resp.Get != nil {
			n, rev = n+1, resp.Get.Revision
		}
		if resp.Delete != nil {
			n, rev = n+1, resp.Delete.Revision
		}
		if n != 1 || rev != rep.Revision {
			t.Fatalf("response %d = %+v: want exactly one reply at revision %d", i, resp, rep.Revision)
		}
	}
	return rep
}

// applyTxn applies a transaction that must not fail and returns its reply.
func applyTxn(t testing.TB, s *State, now int64, body any) (*schema.KVTxnReply, Result) {
	t.Helper()
	r := mustApply(t, s, now, body)
	return txnOf(t, s, r), r
}

// mustFailAt applies body stamped at now, which may be later than the
// clock, and checks that it fails with sentinel and that the state equals
// the previous one after a tick at the same stamp: only the clock moved.
func mustFailAt(t testing.TB, s *State, now int64, body any, sentinel error) Result {
	t.Helper()
	before := snap(t, s)
	r := apply(t, s, now, body)
	if !errors.Is(r.Err, sentinel) {
		t.Fatalf("apply %T %+v: err = %v, want %v", body, body, r.Err, sentinel)
	}
	if r.Reply != nil || r.Events != nil || r.Expired != nil || r.Cached {
		t.Fatalf("failed %T carries output: %+v", body, r)
	}
	if got, want := snap(t, s), tickedSnap(t, before, now); !bytes.Equal(got, want) {
		t.Fatalf("failed %T changed more than the clock:\ngot  %s\nwant %s", body, got, want)
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
	return r
}

// tickedSnap is the snapshot of the state `before` after a tick stamped
// now: what a command that changes nothing but the clock leaves behind.
func tickedSnap(t testing.TB, before []byte, now int64) []byte {
	t.Helper()
	c := restored(t, before)
	mustApply(t, c, now, &Expire{})
	return snap(t, c)
}

// cmpTruth is the expected outcome of each operator for a < b, a == b and
// a > b.
var cmpTruth = map[CompareOp][3]bool{
	CmpEq: {false, true, false},
	CmpNe: {true, false, true},
	CmpLt: {true, false, false},
	CmpLe: {true, true, false},
	CmpGt: {false, false, true},
	CmpGe: {false, true, true},
}

var allOps = []CompareOp{CmpEq, CmpNe, CmpLt, CmpLe, CmpGt, CmpGe}

var opNames = map[CompareOp]string{CmpEq: "==", CmpNe: "!=", CmpLt: "<", CmpLe: "<=", CmpGt: ">", CmpGe: ">="}

var targetNames = map[Target]string{
	TargetExists: "exists", TargetValue: "value", TargetField: "field", TargetVersion: "version",
	TargetCreateRevision: "create_revision", TargetModRevision: "mod_revision", TargetLease: "lease", TargetTTL: "ttl",
}

// evalCompare runs a transaction with the one compare against s, at the
// clock, and reports whether it succeeded. The transaction only reads, so
// s is unchanged.
func evalCompare(t *testing.T, s *State, c Compare) bool {
	t.Helper()
	rev, before := s.Revision(), snap(t, s)
	rep, r := applyTxn(t, s, s.Now(), &Txn{Compare: []Compare{c}, Success: []TxnOp{getOp(c.Key)}})
	if len(r.Events) != 0 || s.Revision() != rev || rep.Revision != rev {
		t.Fatalf("a read-only transaction changed the revision %d -> %d or produced events %v", rev, s.Revision(), r.Events)
	}
	if want := map[bool]int{true: 1, false: 0}[rep.Succeeded]; len(rep.Responses) != want {
		t.Fatalf("succeeded %v with %d responses", rep.Succeeded, len(rep.Responses))
	}
	if !bytes.Equal(before, snap(t, s)) {
		t.Fatal("a read-only transaction changed the state")
	}
	return rep.Succeeded
}

// compareState is the state the compare tables read: "k" is present with
// version 2, create_revision 1, mod_revision 3, lease 1 and 7.5 s left on
// it (ttl 7); "plain" has no lease; "nope" is absent.
func compareState(t *testing.T) *State {
	s := New()
	run(t, s,
		step{t0, &Grant{TTL: 10}},                                                    // lease 1, deadline t0+10s
		step{t0, &Put{Key: "k", Value: val(`{"n":5}`), Lease: 1}},                    // rev 1
		step{t0, &Put{Key: "plain", Value: val(`"p"`)}},                              // rev 2
		step{t0, &Put{Key: "k", Value: val(`{"n":5,"s":"b"}`), Lease: 1}},            // rev 3
		step{t0, &Put{Key: "num", Value: val(`10`)}},                                 // rev 4
		step{t0, &Put{Key: "str", Value: val(`"b"`)}},                                // rev 5
		step{t0, &Put{Key: "nul", Value: val(`null`)}},                               // rev 6
		step{t0, &Put{Key: "arr", Value: val(`[1,"x",null]`)}},                       // rev 7
		step{t0, &Put{Key: "bool", Value: val(`false`)}},                             // rev 8
		step{t0, &Put{Key: "doc", Value: val(compareDoc)}},                           // rev 9
		step{t0, &Put{Key: "anon", Value: val(`1`), TTL: 3}},                         // rev 10, lease 2
		step{t0 + 2_500, &Expire{}},                                                  // the clock: 7.5 s left on lease 1
		step{t0 + 2_500, &Put{Key: "big", Value: val(`{"n":12345678901234567890}`)}}, // rev 11
	)
	return s
}

const compareDoc = `{"n":5,"s":"b","a":[1,2],"o":{"x":null},"big":12345678901234567890,"f":0.1,` +
	`"a/b":1,"m~n":2,"":3,"t":true,"u":"é<&>","neg":-2.5}`

// Every integer target (exists, version, create_revision, mod_revision,
// lease, ttl) with every operator, on a present key, a key without a
// lease, and an absent key, against operands below, at and above the value.
func TestTxnCompareIntTargets(t *testing.T) {
	s := compareState(t)
	type subject struct {
		key    string
		target Target
		actual int64
	}
	subjects := []subject{
		{"k", TargetExists, 1}, {"k", TargetVersion, 2}, {"k", TargetCreateRevision, 1},
		{"k", TargetModRevision, 3}, {"k", TargetLease, 1}, {"k", TargetTTL, 7},
		{"plain", TargetExists, 1}, {"plain", TargetVersion, 1}, {"plain", TargetCreateRevision, 2},
		{"plain", TargetModRevision, 2}, {"plain", TargetLease, 0}, {"plain", TargetTTL, 0},
		{"anon", TargetLease, 2}, {"anon", TargetTTL, 0}, // 3 s from t0, 0.5 s left at t0+2.5s
		{"nope", TargetExists, 0}, {"nope", TargetVersion, 0}, {"nope", TargetCreateRevision, 0},
		{"nope", TargetModRevision, 0}, {"nope", TargetLease, 0}, {"nope", TargetTTL, 0},
	}
	n := 0
	for _, sub := range subjects {
		for _, op := range allOps {
			for _, delta := range []int64{-1, 0, 1} {
				operand := sub.actual + delta
				want := cmpTruth[op][1-delta]
				name := fmt.Sprintf("%s %s %s %d", sub.key, targetNames[sub.target], opNames[op], operand)
				t.Run(name, func(t *testing.T) {
					if got := evalCompare(t, s, cmpInt(sub.key, sub.target, op, operand)); got != want {
						t.Fatalf("%s: %v, want %v", name, got, want)
					}
				})
				n++
			}
		}
	}
	if n != len(subjects)*6*3 {
		t.Fatal(n)
	}
}

type jsonCmpCase struct {
	c    Compare
	want bool
}

// Value and field compares with every operator: == and != by JSON meaning,
// ordering only between two numbers (exactly) or two strings (bytewise),
// false for anything else, a missing path or an absent key as null.
func TestTxnCompareJSONTargets(t *testing.T) {
	s := compareState(t)
	reordered := `{"neg":-25e-1,"u":"\u00e9\u003c\u0026>","t":true,"":3.0,"m~n":2,"a/b":1E0,"f":1e-1,` +
		`"big":12345678901234567890.0,"o":{"x":null},"a":[1.0,2],"s":"b","n":0.5e1}`
	cases := []jsonCmpCase{
		// value ==/!=: meaning, not bytes.
		{cmpValue("doc", CmpEq, reordered), true},
		{cmpValue("doc", CmpNe, reordered), false},
		{cmpValue("doc", CmpEq, compareDoc), true},
		{cmpValue("k", CmpEq, `{"s":"b","n":5.000}`), true},
		{cmpValue("k", CmpEq, `{"s":"b","n":5,"x":null}`), false}, // an extra member, even null
		{cmpValue("k", CmpEq, `{"n":5}`), false},                  // a missing member
		{cmpValue("k", CmpNe, `{"n":5}`), true},
		{cmpValue("k", CmpEq, `{"n":"5","s":"b"}`), false}, // a string is not a number
		{cmpValue("arr", CmpEq, `[1,"x",null]`), true},
		{cmpValue("arr", CmpEq, `["x",1,null]`), false}, // array order matters
		{cmpValue("arr", CmpEq, `[1,"x"]`), false},
		{cmpValue("num", CmpEq, `10`), true},
		{cmpValue("num", CmpEq, `1e1`), true},
		{cmpValue("num", CmpEq, `10.000`), true},
		{cmpValue("num", CmpEq, `100e-1`), true},
		{cmpValue("num", CmpEq, `"10"`), false},
		{cmpValue("num", CmpNe, `"10"`), true},
		{cmpValue("str", CmpEq, `"b"`), true},
		{cmpValue("str", CmpEq, `"\u0062"`), true},
		{cmpValue("str", CmpEq, `"B"`), false},
		{cmpValue("nul", CmpEq, `null`), true},
		{cmpValue("nul", CmpNe, `null`), false},
		{cmpValue("bool", CmpEq, `false`), true},
		{cmpValue("bool", CmpEq, `0`), false},
		{cmpValue("bool", CmpEq, `null`), false},
		// value on an absent key is null.
		{cmpValue("nope", CmpEq, `null`), true},
		{cmpValue("nope", CmpNe, `null`), false},
		{cmpValue("nope", CmpEq, `0`), false},
		{cmpValue("nope", CmpEq, `""`), false},
		{cmpValue("nope", CmpEq, `false`), false},
		{cmpValue("nope", CmpEq, `{}`), false},
		{cmpValue("nope", CmpNe, `{}`), true},
		// value ordering: numbers numerically and exactly, strings bytewise.
		{cmpValue("num", CmpLt, `10.5`), true},
		{cmpValue("num", CmpLt, `10`), false},
		{cmpValue("num", CmpLe, `1e1`), true},
		{cmpValue("num", CmpGt, `9.99`), true},
		{cmpValue("num", CmpGt, `10.0`), false},
		{cmpValue("num", CmpGe, `10.0`), true},
		{cmpValue("num", CmpGe, `10.000000000000000000001`), false}, // float64 would say equal
		{cmpValue("num", CmpGt, `-1e400`), true},                    // beyond float64
		{cmpValue("num", CmpLt, `1e400`), true},
		{cmpValue("num", CmpLt, `"11"`), false}, // number against string
		{cmpValue("num", CmpGt, `"1"`), false},
		{cmpValue("num", CmpGe, `null`), false},
		{cmpValue("str", CmpGt, `"a"`), true},
		{cmpValue("str", CmpLt, `"c"`), true},
		{cmpValue("str", CmpLt, `"bb"`), true},
		{cmpValue("str", CmpLe, `"b"`), true},
		{cmpValue("str", CmpGe, `"b"`), true},
		{cmpValue("str", CmpGt, `"B"`), true}, // bytewise: 'b' > 'B'
		{cmpValue("str", CmpLt, `"é"`), true}, // bytewise UTF-8: 0xC3 > 'b'
		{cmpValue("str", CmpLt, `1`), false},
		{cmpValue("arr", CmpLe, `[1,"x",null]`), false}, // arrays do not order
		{cmpValue("arr", CmpGe, `[1,"x",null]`), false},
		{cmpValue("k", CmpLe, `{"n":5,"s":"b"}`), false}, // objects do not order
		{cmpValue("bool", CmpLt, `true`), false},         // booleans do not order
		{cmpValue("bool", CmpGe, `false`), false},
		{cmpValue("nul", CmpLe, `null`), false}, // nor null
		{cmpValue("nope", CmpLt, `1`), false},
		{cmpValue("nope", CmpGe, `null`), false},

		// field: numbers.
		{cmpField("doc", "/n", CmpEq, `5`), true},
		{cmpField("doc", "/n", CmpEq, `5.0`), true},
		{cmpField("doc", "/n", CmpEq, `5e0`), true},
		{cmpField("doc", "/n", CmpNe, `5`), false},
		{cmpField("doc", "/n", CmpEq, `"5"`), false},
		{cmpField("doc", "/n", CmpLt, `6`), true},
		{cmpField("doc", "/n", CmpLt, `5`), false},
		{cmpField("doc", "/n", CmpLe, `5`), true},
		{cmpField("doc", "/n", CmpGt, `4.99999999999999999999`), true}, // float64 would round to 5
		{cmpField("doc", "/n", CmpGe, `5.00000000000000000001`), false},
		{cmpField("doc", "/neg", CmpLt, `-2`), true},
		{cmpField("doc", "/neg", CmpEq, `-25e-1`), true},
		{cmpField("doc", "/big", CmpEq, `12345678901234567890`), true},
		{cmpField("doc", "/big", CmpEq, `12345678901234567891`), false}, // float64 would say equal
		{cmpField("doc", "/big", CmpLt, `12345678901234567891`), true},
		{cmpField("doc", "/big", CmpGt, `12345678901234567889`), true},
		{cmpField("doc", "/f", CmpEq, `0.10`), true},
		{cmpField("doc", "/f", CmpLt, `0.1000000000000000000001`), true},
		{cmpField("big", "/n", CmpEq, `1.2345678901234567890e19`), true},
		// field: strings.
		{cmpField("doc", "/s", CmpEq, `"b"`), true},
		{cmpField("doc", "/s", CmpGt, `"a"`), true},
		{cmpField("doc", "/s", CmpGe, `"c"`), false},
		{cmpField("doc", "/u", CmpEq, `"é<&>"`), true},
		{cmpField("doc", "/u", CmpEq, `"\u00e9\u003c\u0026\u003e"`), true},
		{cmpField("doc", "/u", CmpGt, `"é<"`), true},
		// field: other types, == and != only.
		{cmpField("doc", "/t", CmpEq, `true`), true},
		{cmpField("doc", "/t", CmpGt, `false`), false},
		{cmpField("doc", "/a", CmpEq, `[1,2.0]`), true},
		{cmpField("doc", "/a", CmpLe, `[1,2]`), false},
		{cmpField("doc", "/o", CmpEq, `{"x":null}`), true},
		{cmpField("doc", "/o", CmpNe, `{}`), true},
		{cmpField("doc", "", CmpEq, reordered), true}, // the empty pointer is the whole value
		// field: paths into arrays.
		{cmpField("doc", "/a/0", CmpEq, `1`), true},
		{cmpField("doc", "/a/1", CmpGt, `1`), true},
		{cmpField("doc", "/a/2", CmpEq, `null`), true},   // past the end
		{cmpField("doc", "/a/-", CmpEq, `null`), true},   // "-" names no element
		{cmpField("doc", "/a/01", CmpEq, `null`), true},  // leading zero
		{cmpField("doc", "/a/01", CmpEq, `2`), false},    // ... does not read index 1
		{cmpField("doc", "/a/-1", CmpEq, `null`), true},  // negative
		{cmpField("doc", "/a/+1", CmpEq, `null`), true},  // signed
		{cmpField("doc", "/a/b", CmpEq, `null`), true},   // not an index
		{cmpField("doc", "/a/0/x", CmpEq, `null`), true}, // into a number
		{cmpField("arr", "/1", CmpEq, `"x"`), true},
		{cmpField("arr", "/2", CmpEq, `null`), true},
		{cmpField("arr", "/99999999999999999999999", CmpEq, `null`), true},
		// field: escapes (RFC 6901: ~1 is /, ~0 is ~) and the empty member name.
		{cmpField("doc", "/a~1b", CmpEq, `1`), true},
		{cmpField("doc", "/m~0n", CmpEq, `2`), true},
		{cmpField("doc", "/", CmpEq, `3`), true},
		{cmpField("doc", "/o/x", CmpEq, `null`), true}, // present and null
		{cmpField("doc", "/o/x", CmpNe, `null`), false},
		// field: missing paths read as null.
		{cmpField("doc", "/o/y", CmpEq, `null`), true},
		{cmpField("doc", "/missing", CmpEq, `null`), true},
		{cmpField("doc", "/missing", CmpNe, `null`), false},
		{cmpField("doc", "/missing", CmpNe, `1`), true},
		{cmpField("doc", "/missing/deeper", CmpEq, `null`), true},
		{cmpField("doc", "/missing", CmpLt, `1`), false},
		{cmpField("doc", "/missing", CmpGe, `""`), false},
		{cmpField("doc", "n", CmpEq, `null`), true}, // not a pointer: names nothing
		{cmpField("doc", "n", CmpEq, `5`), false},
		// field: into scalars.
		{cmpField("num", "", CmpEq, `10`), true},
		{cmpField("num", "", CmpGt, `9`), true},
		{cmpField("num", "/x", CmpEq, `null`), true},
		{cmpField("str", "/0", CmpEq, `null`), true}, // a string is not an array
		{cmpField("str", "", CmpLe, `"b"`), true},
		{cmpField("nul", "", CmpEq, `null`), true},
		{cmpField("nul", "/x", CmpEq, `null`), true},
		// field on an absent key: everything is null.
		{cmpField("nope", "", CmpEq, `null`), true},
		{cmpField("nope", "/n", CmpEq, `null`), true},
		{cmpField("nope", "/n", CmpNe, `null`), false},
		{cmpField("nope", "/n", CmpLt, `1`), false},
		{cmpField("nope", "/n", CmpGe, `1`), false},
		{cmpField("nope", "/n", CmpEq, `0`), false},
	}
	for i, tc := range cases {
		name := fmt.Sprintf("%d %s %s %s %s %s", i, tc.c.Key, targetNames[tc.c.Target], tc.c.Path, opNames[tc.c.Op], tc.c.Value)
		t.Run(name, func(t *testing.T) {
			if got := evalCompare(t, s, tc.c); got != tc.want {
				t.Fatalf("%s: %v, want %v", name, got, tc.want)
			}
		})
	}
}

// The ordering operators on value and field compares, for each kind of
// JSON pair: only number/number and string/string ever order.
func TestTxnCompareOrderingByKind(t *testing.T) {
	s := compareState(t)
	// key -> its value's kind, and an operand of each kind equal to or
	// below it where the kinds match.
	operands := []string{`1`, `"a"`, `null`, `true`, `[1]`, `{"a":1}`}
	kinds := map[string]int{"num": 0, "str": 1, "nul": 2, "bool": 3, "arr": 4, "k": 5, "nope": 2}
	for key, kind := range kinds {
		for j, operand := range operands {
			for _, op := range []CompareOp{CmpLt, CmpLe, CmpGt, CmpGe} {
				// num=10 > 1 and str="b" > "a": > and >= hold when the kinds match.
				want := j == kind && kind <= 1 && (op == CmpGt || op == CmpGe)
				for _, c := range []Compare{cmpValue(key, op, operand), cmpField(key, "", op, operand)} {
					name := fmt.Sprintf("%s %s %s %s", key, targetNames[c.Target], opNames[op], operand)
					if got := evalCompare(t, s, c); got != want {
						t.Errorf("%s: %v, want %v", name, got, want)
					}
				}
			}
		}
	}
}

// Compares are ANDed: the transaction succeeds only if every one holds,
// and any one failing (first, middle or last) selects the failure branch.
func TestTxnComparesAreANDed(t *testing.T) {
	s := compareState(t)
	good := []Compare{
		cmpInt("k", TargetExists, CmpEq, 1),
		cmpValue("num", CmpEq, `10`),
		cmpField("doc", "/s", CmpEq, `"b"`),
		cmpInt("k", TargetVersion, CmpEq, 2),
		cmpInt("k", TargetCreateRevision, CmpEq, 1),
		cmpInt("k", TargetModRevision, CmpEq, 3),
		cmpInt("k", TargetLease, CmpEq, 1),
		cmpInt("k", TargetTTL, CmpEq, 7),
		cmpInt("nope", TargetCreateRevision, CmpEq, 0),
	}
	txn := func(cs []Compare) *Txn {
		return &Txn{Compare: cs, Success: []TxnOp{getOp("num")}, Failure: []TxnOp{getOp("str"), getOp("nope")}}
	}
	rep, _ := applyTxn(t, s, s.Now(), txn(good))
	if !rep.Succeeded || len(rep.Responses) != 1 || rep.Responses[0].Get.KVs[0].Key != "num" {
		t.Fatalf("all compares hold: %+v", rep)
	}
	for i := range good {
		cs := append([]Compare(nil), good...)
		cs[i].Op = CmpNe
		rep, _ := applyTxn(t, s, s.Now(), txn(cs))
		if rep.Succeeded || len(rep.Responses) != 2 || rep.Responses[0].Get.KVs[0].Key != "str" || rep.Responses[1].Get.Count != 0 {
			t.Fatalf("compare %d fails: %+v", i, rep)
		}
	}
	// No compares: the success branch.
	rep, _ = applyTxn(t, s, s.Now(), txn(nil))
	eq(t, "no compares succeeds", rep.Succeeded, true)
}

// ttl is floor(remaining_ms/1000) at the command's time, 0 once the
// deadline has passed (even before the lease is expired) and for keys
// without a lease; the clock never runs back, so an older stamp reads at
// the clock.
func TestTxnCompareTTL(t *testing.T) {
	s := New()
	run(t, s,
		step{t0, &Grant{TTL: 10}},
		step{t0, &Put{Key: "k", Value: val(`1`), Lease: 1}},
		step{t0, &Put{Key: "a", Value: val(`1`), TTL: 3}}, // lease 2
	)
	ttlAt := func(now int64, key string) int64 {
		t.Helper()
		for n := int64(0); n <= 11; n++ {
			rep, _ := applyTxn(t, s, now, &Txn{Compare: []Compare{cmpInt(key, TargetTTL, CmpEq, n)}})
			if rep.Succeeded {
				return n
			}
		}
		t.Fatalf("no ttl of %q in 0..11 at %d", key, now)
		return 0
	}
	eq(t, "ttl at grant", ttlAt(t0, "k"), int64(10))
	eq(t, "anonymous ttl at put", ttlAt(t0, "a"), int64(3))
	eq(t, "1 ms later", ttlAt(t0+1, "k"), int64(9))
	eq(t, "anonymous 1 ms later", ttlAt(t0+1, "a"), int64(2))
	eq(t, "an older stamp reads at the clock", ttlAt(t0, "k"), int64(9))
	eq(t, "1000 ms left", ttlAt(t0+9_000, "k"), int64(1))
	eq(t, "999 ms left", ttlAt(t0+9_001, "k"), int64(0))
	eq(t, "at the deadline", ttlAt(t0+10_000, "k"), int64(0))
	eq(t, "past the deadline, not yet expired", ttlAt(t0+12_000, "k"), int64(0))
	rep, _ := applyTxn(t, s, s.Now(), &Txn{Compare: []Compare{
		cmpInt("k", TargetLease, CmpEq, 1), cmpInt("k", TargetTTL, CmpLe, 0), cmpInt("k", TargetTTL, CmpGe, 0),
		cmpInt("a", TargetLease, CmpEq, 2), cmpInt("k", TargetExists, CmpEq, 1),
	}})
	eq(t, "a key past its deadline keeps its lease until expired", rep.Succeeded, true)
	// A keep-alive moves it back up; the compare reads the new deadline.
	mustApply(t, s, t0+12_000, &KeepAlive{ID: 1, TTL: 5})
	eq(t, "after keep-alive", ttlAt(t0+12_000, "k"), int64(5))
	eq(t, "after keep-alive, 1.5 s on", ttlAt(t0+13_500, "k"), int64(3))
	// The lease expires: the key is gone and reads 0 everywhere.
	mustApply(t, s, t0+20_000, &Expire{IDs: []int64{1, 2}})
	eq(t, "expired", ttlAt(t0+20_000, "k"), int64(0))
	rep, _ = applyTxn(t, s, s.Now(), &Txn{Compare: []Compare{cmpInt("k", TargetExists, CmpEq, 0), cmpInt("k", TargetLease, CmpEq, 0)}})
	eq(t, "expired key is absent", rep.Succeeded, true)
}

// The lock-acquire pattern: many clients try to create the same key with
// create_revision == 0; exactly one wins, the others see the winner in
// their failure branch, and once the winner's lease is revoked the next
// attempt wins.
func TestTxnCreateOnceRace(t *testing.T) {
	const clients = 32
	s := New()
	mustApply(t, s, t0, &Limits{MaxLeases: 100, MaxKeysPerLease: 10})
	for i := 1; i <= clients; i++ {
		mustApply(t, s, t0, &Grant{TTL: 10})
	}
	acquire := func(client int) *Txn {
		return &Txn{
			Compare: []Compare{cmpInt("locks.build", TargetCreateRevision, CmpEq, 0)},
			Success: []TxnOp{putLeaseOp("locks.build", fmt.Sprintf(`"n%d"`, client), int64(client)), getOp("locks.build")},
			Failure: []TxnOp{getOp("locks.build")},
		}
	}
	winners := 0
	for i := 1; i <= clients; i++ {
		rep, r := applyTxn(t, s, t0+int64(i), acquire(i))
		if rep.Succeeded {
			winners++
			eq(t, "winner", i, 1)
			eq(t, "events", len(r.Events), 1)
			eq(t, "winner's get", rep.Responses[1].Get.KVs[0].Value, val(`"n1"`))
			continue
		}
		eq(t, "loser sees the winner", rep.Responses[0].Get.KVs[0].Value, val(`"n1"`))
		eq(t, "loser's revision", rep.Revision, int64(1))
		eq(t, "loser's events", len(r.Events), 0)
	}
	eq(t, "winners", winners, 1)
	eq(t, "revision", s.Revision(), int64(1))
	mustApply(t, s, t0+100, &Revoke{ID: 1})
	rep, _ := applyTxn(t, s, t0+101, acquire(7))
	eq(t, "after the revoke the next one wins", rep.Succeeded, true)
	eq(t, "new holder", getKey(t, s, "locks.build").Lease, int64(7))
	eq(t, "new create_revision", getKey(t, s, "locks.build").CreateRevision, int64(3))
}

// The request of the issue, end to end, with the exact reply JSON. As the
// issue writes it, it cannot succeed: create_revision == 0 means the key
// is absent, and an absent key's lease reads 0, not 42. Without the lease
// compare it succeeds.
func TestTxnIssueExample(t *testing.T) {
	s := New()
	run(t, s,
		step{t0, &Grant{ID: 42, TTL: 30}},
		step{t0, &Put{Key: "cfg.api", Value: val(`{"v":3}`)}},                             // rev 1
		step{t0, &Put{Key: "jobs.7.state", Value: val(`{"status":"pending","tries":0}`)}}, // rev 2
		step{t0, &Put{Key: "tmp.n1.a", Value: val(`1`)}},                                  // rev 3
		step{t0, &Put{Key: "tmp.n1.b", Value: val(`2`), Lease: 42}},                       // rev 4
		step{t0, &Put{Key: "tmp.n10", Value: val(`3`)}},                                   // rev 5: not under "tmp.n1."
	)
	issue := &Txn{
		Compare: []Compare{
			cmpInt("locks.build", TargetCreateRevision, CmpEq, 0),
			cmpValue("cfg.api", CmpEq, `{"v":3}`),
			cmpField("jobs.7.state", "/status", CmpEq, `"pending"`),
			cmpInt("locks.build", TargetLease, CmpEq, 42),
		},
		Success: []TxnOp{putLeaseOp("locks.build", `"n1"`, 42), getOp("cfg.api"), {Delete: &Delete{Key: "tmp.n1.", IsPrefix: true, Limit: 1000}}},
		Failure: []TxnOp{getOp("locks.build")},
	}
	rep, _ := applyTxn(t, s, t0+1_000, issue)
	eq(t, "as written", string(mustJSON(t, rep)), `{"succeeded":false,"revision":5,"responses":[{"get":{"revision":5,"kvs":[],"count":0,"more":false}}]}`)

	issue.Compare = issue.Compare[:3]
	rep, r := applyTxn(t, s, t0+1_000, issue)
	eq(t, "without the lease compare", string(mustJSON(t, rep)), `{"succeeded":true,"revision":6,"responses":[`+
		`{"put":{"revision":6}},`+
		`{"get":{"revision":6,"kvs":[{"key":"cfg.api","value":{"v":3},"create_revision":1,"mod_revision":1,"version":1}],"count":1,"more":false}},`+
		`{"delete":{"revision":6,"deleted":2}}]}`)
	eq(t, "events", string(mustJSON(t, r.Events)), `[`+
		`{"type":"put","key":"locks.build","value":"n1","revision":6,"op_index":0,"create_revision":6,"mod_revision":6,"version":1,"lease":42,"cause":"put"},`+
		`{"type":"delete","key":"tmp.n1.a","revision":6,"op_index":1,"create_revision":0,"mod_revision":6,"version":0,"lease":0,"cause":"delete"},`+
		`{"type":"delete","key":"tmp.n1.b","revision":6,"op_index":2,"create_revision":0,"mod_revision":6,"version":0,"lease":42,"cause":"delete"}]`)
	eq(t, "keys", keysOf(getAll(s, s.Now())), []string{"cfg.api", "jobs.7.state", "locks.build", "tmp.n10"})
	eq(t, "lease keys", info(t, s, 42).Keys, []string{"locks.build"})
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

// mustJSON encodes v as the service does (no HTML escaping, no newline).
func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// ryw is the state the read-your-writes cases start from, at revision 4.
func rywSetup() []step {
	return []step{
		{t0, &Grant{TTL: 10}},                                          // lease 1
		{t0, &Put{Key: "p.1", Value: val(`"one"`)}},                    // rev 1
		{t0, &Put{Key: "p.2", Value: val(`"two"`), Lease: 1}},          // rev 2
		{t0, &Put{Key: "q", Value: val(`"q"`)}},                        // rev 3
		{t0 + 1_000, &Put{Key: "p.2", Value: val(`"two'"`), Lease: 1}}, // rev 4
	}
}

// Operations run in order and later ones see what earlier ones wrote.
func TestTxnReadYourWrites(t *testing.T) {
	runCases(t, []cmdCase{
		{
			name:  "a get after a put sees the new record",
			setup: rywSetup(),
			cmd:   &Txn{Success: []TxnOp{getOp("p.1"), putOp("p.1", `"uno"`), getOp("p.1"), putOp("new", `1`), getOp("new")}},
			check: func(t *testing.T, s *State, r Result) {
				rep := txnOf(t, s, r)
				eq(t, "revision", rep.Revision, int64(5))
				eq(t, "get before", rep.Responses[0].Get.KVs, []schema.KeyValue{{Key: "p.1", Value: val(`"one"`), CreateRevision: 1, ModRevision: 1, Version: 1}})
				eq(t, "get after", rep.Responses[2].Get.KVs, []schema.KeyValue{{Key: "p.1", Value: val(`"uno"`), CreateRevision: 1, ModRevision: 5, Version: 2}})
				eq(t, "new key", rep.Responses[4].Get.KVs, []schema.KeyValue{{Key: "new", Value: val(`1`), CreateRevision: 5, ModRevision: 5, Version: 1}})
				eq(t, "put replies", [2]*schema.KVPutReply{rep.Responses[1].Put, rep.Responses[3].Put},
					[2]*schema.KVPutReply{{Revision: 5}, {Revision: 5}})
				eq(t, "events", checkEvents(t, r.Events, 5, schema.EventPut, schema.CausePut), []string{"p.1", "new"})
			},
		},
		{
			name:  "a prefix get sees staged puts and not staged deletes",
			setup: rywSetup(),
			cmd: &Txn{Success: []TxnOp{
				putOp("p.3", `"three"`), delOp("p.1"), putOp("p.0", `"zero"`), getPrefixOp("p.", 10),
				{Get: &GetQuery{Key: "p.", IsPrefix: true, Limit: 10, CountOnly: true}},
				{Get: &GetQuery{Key: "p.", IsPrefix: true, Limit: 1, KeysOnly: true, After: "p.0"}},
			}},
			check: func(t *testing.T, s *State, r Result) {
				rep := txnOf(t, s, r)
				g := rep.Responses[3].Get
				eq(t, "keys", keysOf(g.KVs), []string{"p.0", "p.2", "p.3"})
				eq(t, "count", [2]any{g.Count, g.More}, [2]any{int64(3), false})
				eq(t, "p.2 keeps its lease", g.KVs[1].Lease, int64(1))
				eq(t, "p.2 remaining", *g.KVs[1].RemainingMS, int64(9_000))
				eq(t, "count only", [3]any{rep.Responses[4].Get.Count, len(rep.Responses[4].Get.KVs), rep.Responses[4].Get.Revision}, [3]any{int64(3), 0, int64(5)})
				eq(t, "keys only, paged", rep.Responses[5].Get.KVs, []schema.KeyValue{{Key: "p.2", CreateRevision: 2, ModRevision: 4, Version: 2, Lease: 1, RemainingMS: i64(9_000)}})
				eq(t, "paged more", rep.Responses[5].Get.More, true)
			},
		},
		{
			name:  "a delete after a put deletes it, with the staged record as prev_kv",
			setup: rywSetup(),
			cmd:   &Txn{Success: []TxnOp{putOp("x", `"x"`), {Delete: &Delete{Key: "x", PrevKV: true}}, getOp("x")}},
			check: func(t *testing.T, s *State, r Result) {
				rep := txnOf(t, s, r)
				eq(t, "delete", rep.Responses[1].Delete, &schema.KVDeleteReply{Revision: 5, Deleted: 1,
					PrevKVs: []schema.KeyValue{{Key: "x", Value: val(`"x"`), CreateRevision: 5, ModRevision: 5, Version: 1}}})
				eq(t, "get", rep.Responses[2].Get.Count, int64(0))
				eq(t, "gone", getKey(t, s, "x") == nil, true)
				eq(t, "events", string(mustJSON(t, r.Events)), `[`+
					`{"type":"put","key":"x","value":"x","revision":5,"op_index":0,"create_revision":5,"mod_revision":5,"version":1,"lease":0,"cause":"put"},`+
					`{"type":"delete","key":"x","revision":5,"op_index":1,"create_revision":0,"mod_revision":5,"version":0,"lease":0,"cause":"delete"}]`)
				eq(t, "revision", s.Revision(), int64(5))
			},
		},
		{
			name:  "a put after a delete starts a new life at the transaction's revision",
			setup: rywSetup(),
			cmd:   &Txn{Success: []TxnOp{delOp("p.1"), {Put: &Put{Key: "p.1", Value: val(`"again"`), PrevKV: true}}}},
			check: func(t *testing.T, s *State, r Result) {
				rep := txnOf(t, s, r)
				eq(t, "put reply has no prev_kv: the key was gone", rep.Responses[1].Put, &schema.KVPutReply{Revision: 5})
				eq(t, "record", *getKey(t, s, "p.1"), schema.KeyValue{Key: "p.1", Value: val(`"again"`), CreateRevision: 5, ModRevision: 5, Version: 1})
			},
		},
		{
			name:  "a put's prev_kv is the staged record",
			setup: rywSetup(),
			cmd:   &Txn{Success: []TxnOp{putOp("p.1", `"a"`), {Put: &Put{Key: "p.1", Value: val(`"b"`), PrevKV: true}}}},
			check: func(t *testing.T, s *State, r Result) {
				rep := txnOf(t, s, r)
				eq(t, "prev", rep.Responses[1].Put.PrevKV, &schema.KeyValue{Key: "p.1", Value: val(`"a"`), CreateRevision: 1, ModRevision: 5, Version: 2})
				// Two writes of one key in one transaction: two versions at one
				// revision (see TestTxnTwoPutsOfOneKey).
				eq(t, "record", *getKey(t, s, "p.1"), schema.KeyValue{Key: "p.1", Value: val(`"b"`), CreateRevision: 1, ModRevision: 5, Version: 3})
			},
		},
		{
			name:  "a prefix delete sees staged puts and skips staged deletes",
			setup: rywSetup(),
			cmd: &Txn{Success: []TxnOp{
				putOp("p.3", `3`), delOp("p.1"), putOp("p.0", `0`),
				{Delete: &Delete{Key: "p.", IsPrefix: true, PrevKV: true, Limit: 3}}, getPrefixOp("", 10),
			}},
			check: func(t *testing.T, s *State, r Result) {
				rep := txnOf(t, s, r)
				d := rep.Responses[3].Delete
				eq(t, "deleted", d.Deleted, int64(3))
				eq(t, "prev keys", keysOf(d.PrevKVs), []string{"p.0", "p.2", "p.3"})
				eq(t, "left", keysOf(rep.Responses[4].Get.KVs), []string{"q"})
				var got []string
				for i, e := range r.Events {
					eq(t, "event revision", [3]any{e.Revision, e.OpIndex, e.ModRevision}, [3]any{int64(5), i, int64(5)})
					got = append(got, e.Type+" "+e.Key)
				}
				eq(t, "events in operation order", got, []string{"put p.3", "delete p.1", "put p.0", "delete p.0", "delete p.2", "delete p.3"})
				eq(t, "lease 1 lost p.2", info(t, s, 1).KeyCount, int64(0))
			},
		},
		{
			name:  "lease attachments are staged: attach, detach and re-attach in one transaction",
			setup: rywSetup(),
			cmd: &Txn{Success: []TxnOp{
				putLeaseOp("l.a", `1`, 1), putOp("p.2", `"off"`), putTTLOp("l.t", `1`, 4), getPrefixOp("l.", 10), delOp("l.a"), putLeaseOp("l.a", `2`, 1),
			}},
			check: func(t *testing.T, s *State, r Result) {
				rep := txnOf(t, s, r)
				g := rep.Responses[3].Get.KVs
				eq(t, "staged leases", [2]int64{g[0].Lease, g[1].Lease}, [2]int64{1, 2})
				eq(t, "staged remaining", [2]int64{*g[0].RemainingMS, *g[1].RemainingMS}, [2]int64{9_000, 4_000})
				eq(t, "lease 1 keys", info(t, s, 1).Keys, []string{"l.a"})
				li := info(t, s, 2)
				eq(t, "anonymous lease", [4]any{li.Anonymous, li.Keys, li.TTL, li.GrantedRevision}, [4]any{true, []string{"l.t"}, int64(4), int64(5)})
				eq(t, "p.2 detached", getKey(t, s, "p.2").Lease, int64(0))
			},
		},
	})
}

// Two puts of one key in one transaction are two modifications: the
// version goes up twice while create_revision and mod_revision are the
// transaction's one revision. (etcd refuses a transaction that writes a key
// twice; Concord's read-your-writes allows it.)
func TestTxnTwoPutsOfOneKey(t *testing.T) {
	s := New()
	rep, r := applyTxn(t, s, t0, &Txn{Success: []TxnOp{putOp("a", `1`), putOp("a", `2`)}})
	eq(t, "revision", rep.Revision, int64(1))
	eq(t, "record", *getKey(t, s, "a"), schema.KeyValue{Key: "a", Value: val(`2`), CreateRevision: 1, ModRevision: 1, Version: 2})
	eq(t, "event versions", [2]int64{r.Events[0].Version, r.Events[1].Version}, [2]int64{1, 2})
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

// The revision: a branch that writes anything advances it exactly once;
// one of only gets, deletes of nothing, or no operations leaves it. Every
// response and every event carries the transaction's resulting revision.
func TestTxnRevision(t *testing.T) {
	runCases(t, []cmdCase{
		{
			name:  "only gets",
			setup: rywSetup(),
			cmd:   &Txn{Success: []TxnOp{getOp("p.1"), getPrefixOp("p.", 10), getOp("missing")}},
			check: func(t *testing.T, s *State, r Result) {
				rep := txnOf(t, s, r)
				eq(t, "revision", [2]int64{rep.Revision, s.Revision()}, [2]int64{4, 4})
				eq(t, "events", len(r.Events), 0)
				eq(t, "get", rep.Responses[1].Get.Count, int64(2))
			},
		},
		{
			name:  "deletes that match nothing",
			setup: rywSetup(),
			cmd:   &Txn{Success: []TxnOp{delOp("missing"), delPrefixOp("zz.", 5), getOp("q"), delPrefixOp("nothing", 0)}},
			check: func(t *testing.T, s *State, r Result) {
				rep := txnOf(t, s, r)
				eq(t, "revision", s.Revision(), int64(4))
				eq(t, "replies", [3]any{rep.Responses[0].Delete, rep.Responses[1].Delete, rep.Responses[3].Delete},
					[3]any{&schema.KVDeleteReply{Revision: 4}, &schema.KVDeleteReply{Revision: 4}, &schema.KVDeleteReply{Revision: 4}})
				eq(t, "events", len(r.Events), 0)
			},
		},
		{
			name:  "empty success branch",
			setup: rywSetup(),
			cmd:   &Txn{},
			check: func(t *testing.T, s *State, r Result) {
				rep := txnOf(t, s, r)
				eq(t, "reply", string(mustJSON(t, rep)), `{"succeeded":true,"revision":4,"responses":[]}`)
				eq(t, "events", len(r.Events), 0)
			},
		},
		{
			name:  "failed compare with an empty failure branch is not an error",
			setup: rywSetup(),
			cmd:   &Txn{Compare: []Compare{cmpInt("q", TargetExists, CmpEq, 0)}, Success: []TxnOp{putOp("q", `1`)}},
			check: func(t *testing.T, s *State, r Result) {
				rep := txnOf(t, s, r)
				eq(t, "reply", string(mustJSON(t, rep)), `{"succeeded":false,"revision":4,"responses":[]}`)
				eq(t, "q untouched", getKey(t, s, "q").Value, val(`"q"`))
			},
		},
		{
			name:  "failed compare runs the failure branch, which may write",
			setup: rywSetup(),
			cmd: &Txn{Compare: []Compare{cmpValue("q", CmpEq, `"not q"`)}, Success: []TxnOp{putOp("s", `1`)},
				Failure: []TxnOp{getOp("q"), putOp("f", `1`), getOp("f")}},
			check: func(t *testing.T, s *State, r Result) {
				rep := txnOf(t, s, r)
				eq(t, "succeeded", rep.Succeeded, false)
				eq(t, "revision", rep.Revision, int64(5))
				eq(t, "get sees the failure branch's put", rep.Responses[2].Get.KVs[0].ModRevision, int64(5))
				eq(t, "success branch did not run", getKey(t, s, "s") == nil, true)
				eq(t, "events", checkEvents(t, r.Events, 5, schema.EventPut, schema.CausePut), []string{"f"})
			},
		},
		{
			name:  "gets, puts, deletes and deletes of nothing: one new revision for all",
			setup: rywSetup(),
			cmd: &Txn{Success: []TxnOp{
				getOp("q"), delOp("missing"), putOp("a", `1`), delOp("q"), putOp("b", `1`), getPrefixOp("", 100), delPrefixOp("p.", 2), putOp("a", `2`),
			}},
			check: func(t *testing.T, s *State, r Result) {
				rep := txnOf(t, s, r)
				eq(t, "revision", [2]int64{rep.Revision, s.Revision()}, [2]int64{5, 5})
				eq(t, "first get reports the final revision", rep.Responses[0].Get.Revision, int64(5))
				eq(t, "but reads the record as it was", rep.Responses[0].Get.KVs[0].ModRevision, int64(3))
				var got []string
				for i, e := range r.Events {
					if e.Revision != 5 || e.OpIndex != i || e.ModRevision != 5 {
						t.Fatalf("event %d = %+v", i, e)
					}
					got = append(got, e.Type+" "+e.Key)
				}
				eq(t, "events", got, []string{"put a", "delete q", "put b", "delete p.1", "delete p.2", "put a"})
				for _, kv := range getAll(s, s.Now()) {
					if kv.ModRevision != 5 {
						t.Fatalf("written key %+v does not carry the revision", kv)
					}
				}
				eq(t, "keys", keysOf(getAll(s, s.Now())), []string{"a", "b"})
			},
		},
		{
			name:  "a ttl put creates an anonymous lease granted at the transaction's revision",
			setup: rywSetup(),
			cmd:   &Txn{Success: []TxnOp{putTTLOp("t.a", `1`, 5), putTTLOp("t.b", `1`, 6), putTTLOp("t.a", `2`, 7)}},
			check: func(t *testing.T, s *State, r Result) {
				txnOf(t, s, r)
				// t.a's first anonymous lease (2) went with its re-put.
				leaseGone(t, s, 2)
				e, a := s.LeaseCount()
				eq(t, "leases", [2]int64{e, a}, [2]int64{1, 2})
				for _, c := range []struct {
					key      string
					id, ttl  int64
					deadline int64
				}{{"t.a", 4, 7, t0 + 8_000}, {"t.b", 3, 6, t0 + 7_000}} {
					kv := getKey(t, s, c.key)
					li := info(t, s, kv.Lease)
					eq(t, c.key, [5]any{kv.Lease, li.Anonymous, li.TTL, li.GrantedRevision, *kv.RemainingMS},
						[5]any{c.id, true, c.ttl, int64(5), c.deadline - s.Now()})
				}
				eq(t, "event leases", [3]int64{r.Events[0].Lease, r.Events[1].Lease, r.Events[2].Lease}, [3]int64{2, 3, 4})
			},
		},
	})
}

// A transaction of one operation leaves exactly what the plain command
// leaves: the same snapshot bytes, the same events, the same reply.
func TestTxnSingleOpEqualsPlainCommand(t *testing.T) {
	setup := []step{
		{t0, &Grant{TTL: 10}},
		{t0, &Put{Key: "a.1", Value: val(`1`), Lease: 1}},
		{t0, &Put{Key: "a.2", Value: val(`2`), TTL: 3}},
		{t0, &Put{Key: "b", Value: val(`"b"`)}},
		{t0 + 500, &Expire{}},
	}
	for i, body := range []any{
		&Put{Key: "new", Value: val(`{"x":[1,2]}`)},
		&Put{Key: "b", Value: val(`"b2"`), PrevKV: true},
		&Put{Key: "a.1", Value: val(`11`), Lease: 1, PrevKV: true},
		&Put{Key: "b", Value: val(`3`), Lease: 1},
		&Put{Key: "b", Value: val(`3`), TTL: 4, PrevKV: true},
		&Put{Key: "a.2", Value: val(`3`), TTL: 4},
		&Put{Key: "a.2", Value: val(`3`)},
		&Delete{Key: "a.2", PrevKV: true},
		&Delete{Key: "a.", IsPrefix: true, PrevKV: true},
		&Delete{Key: "", IsPrefix: true},
		&Delete{Key: "missing"},
	} {
		t.Run(fmt.Sprintf("%d %T %+v", i, body, body), func(t *testing.T) {
			plain, viaTxn := New(), New()
			run(t, plain, setup...)
			run(t, viaTxn, setup...)
			now := int64(t0 + 1_000)
			rp := mustApply(t, plain, now, body)
			var op TxnOp
			switch b := body.(type) {
			case *Put:
				op.Put = b
			case *Delete:
				op.Delete = b
			}
			rep, rt := applyTxn(t, viaTxn, now, &Txn{Success: []TxnOp{op}})
			eq(t, "snapshot", string(snap(t, viaTxn)), string(snap(t, plain)))
			eq(t, "events", rt.Events, rp.Events)
			var got any = rep.Responses[0].Put
			if op.Delete != nil {
				got = rep.Responses[0].Delete
			}
			eq(t, "reply", got, rp.Reply)
			eq(t, "revision", rep.Revision, plain.Revision())
			eq(t, "digest", stateDigest(viaTxn), stateDigest(plain))
		})
	}
}

// A transaction whose chosen branch fails anywhere fails as a whole, even
// after puts and deletes earlier in the branch, and leaves the state
// byte-identical (only the clock may move). The same transaction applies
// once the cause is fixed.
func TestTxnAtomicFailure(t *testing.T) {
	setup := func() []step {
		return []step{
			{t0, &Limits{MaxLeases: 5, MaxKeysPerLease: 2}},
			{t0, &Grant{TTL: 10}},                                 // lease 1
			{t0, &Grant{TTL: 20}},                                 // lease 2
			{t0, &Put{Key: "l1.a", Value: val(`1`), Lease: 1}},    // rev 1
			{t0, &Put{Key: "l1.b", Value: val(`1`), Lease: 1}},    // rev 2
			{t0, &Put{Key: "anon", Value: val(`1`), TTL: 5}},      // rev 3, lease 3
			{t0, &Put{Key: "d.1", Value: val(`1`)}},               // rev 4
			{t0, &Put{Key: "d.2", Value: val(`1`)}},               // rev 5
			{t0, &Put{Key: "d.3", Value: val(`1`), Lease: 2}},     // rev 6
			{t0 + 100, &Put{Key: "plain", Value: val(`"plain"`)}}, // rev 7
		}
	}
	// Writes that succeed on their own, placed before the failing operation.
	prefix := []TxnOp{
		putOp("plain", `"changed"`), putOp("fresh", `1`), putTTLOp("fresh.ttl", `1`, 9), delOp("d.1"),
		delPrefixOp("d.", 0), putLeaseOp("x.on2", `1`, 2), getPrefixOp("", 100),
	}
	cases := []struct {
		name string
		bad  TxnOp
		err  error
		fix  []step
	}{
		{"unknown lease", putLeaseOp("x", `1`, 99), ErrLeaseNotFound, []step{{t0 + 200, &Grant{ID: 99, TTL: 5}}}},
		{"anonymous lease", putLeaseOp("x", `1`, 3), ErrLeaseNotFound, []step{{t0 + 200, &Delete{Key: "anon"}}, {t0 + 200, &Grant{ID: 3, TTL: 5}}}},
		{"revoked lease", putLeaseOp("x", `1`, 2), ErrLeaseNotFound, nil}, // revokes 2 first: the prefix's x.on2 fails already
		{"key on another lease", putLeaseOp("l1.a", `1`, 2), ErrLeaseConflict, []step{{t0 + 200, &Delete{Key: "l1.a"}}}},
		{"ttl put on a key with an explicit lease", putTTLOp("l1.b", `1`, 3), ErrLeaseConflict, []step{{t0 + 200, &Delete{Key: "l1.b"}}}},
		{"keys per lease", putLeaseOp("l1.c", `1`, 1), ErrLimitExceeded, []step{{t0 + 200, &Limits{MaxLeases: 5, MaxKeysPerLease: 3}}}},
		{"lease count", putTTLOp("x", `1`, 3), ErrLimitExceeded, []step{{t0 + 200, &Limits{MaxLeases: 6, MaxKeysPerLease: 2}}}},
		{"prefix delete over its limit", delPrefixOp("l1.", 1), ErrTooLarge, []step{{t0 + 200, &Delete{Key: "l1.b"}}}},
	}
	for _, tc := range cases {
		for _, where := range []string{"success", "failure"} {
			t.Run(tc.name+" in the "+where+" branch", func(t *testing.T) {
				s := New()
				run(t, s, setup()...)
				if tc.name == "revoked lease" {
					run(t, s, step{t0 + 100, &Revoke{ID: 2}}, step{t0 + 100, &Put{Key: "d.3", Value: val(`1`)}})
					tc.fix = []step{{t0 + 200, &Grant{ID: 2, TTL: 5}}}
				}
				branch := append(append([]TxnOp(nil), prefix...), tc.bad, putOp("after", `1`))
				txn := &Txn{Compare: []Compare{cmpInt("plain", TargetExists, CmpEq, 1)}, Success: branch, Failure: []TxnOp{putLeaseOp("nope", `1`, 1234)}}
				if where == "failure" {
					txn.Compare[0].Int = 0
					txn.Success, txn.Failure = txn.Failure, txn.Success
				}
				if tc.name == "lease count" {
					// Leases 1, 2, 3 and anon2's make 4 of 5, the prefix's
					// fresh.ttl takes the 5th, and x's would be a 6th.
					run(t, s, step{t0 + 100, &Put{Key: "anon2", Value: val(`1`), TTL: 5}})
				}
				r := mustFailAt(t, s, t0+150, txn, tc.err)
				if !errors.Is(r.Err, tc.err) {
					t.Fatal(r.Err)
				}
				// Fix the cause; the same transaction now applies whole.
				run(t, s, tc.fix...)
				rev := s.Revision()
				rep, rt := applyTxn(t, s, t0+300, txn)
				eq(t, "succeeded", rep.Succeeded, where == "success")
				eq(t, "one new revision", rep.Revision, rev+1)
				if n := len(rt.Events); n < len(prefix) {
					t.Fatalf("%d events", n)
				}
				eq(t, "plain", getKey(t, s, "plain").Value, val(`"changed"`))
				eq(t, "after", getKey(t, s, "after").ModRevision, rev+1)
				if err := checkInvariants(s); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// Only the chosen branch runs: an operation that would fail in the other
// branch does not matter.
func TestTxnOtherBranchIsNotRun(t *testing.T) {
	s := New()
	bad := []TxnOp{putLeaseOp("x", `1`, 77), delPrefixOp("", 1)}
	run(t, s, step{t0, &Put{Key: "a", Value: val(`1`)}}, step{t0, &Put{Key: "b", Value: val(`1`)}})
	rep, _ := applyTxn(t, s, t0, &Txn{Success: []TxnOp{putOp("ok", `1`)}, Failure: bad})
	eq(t, "success", [2]any{rep.Succeeded, rep.Revision}, [2]any{true, int64(3)})
	rep, _ = applyTxn(t, s, t0, &Txn{Compare: []Compare{cmpInt("a", TargetVersion, CmpGt, 1)}, Success: bad, Failure: []TxnOp{putOp("ok", `2`)}})
	eq(t, "failure", [2]any{rep.Succeeded, rep.Revision}, [2]any{false, int64(4)})
}

// A prefix delete with a limit fails with ErrTooLarge when it matches more
// keys than the limit (counting what the transaction staged) and deletes
// them all when it matches at most that many; 0 means no limit.
func TestTxnPrefixDeleteLimit(t *testing.T) {
	setup := []step{
		{t0, &Put{Key: "p.1", Value: val(`1`)}},
		{t0, &Put{Key: "p.2", Value: val(`1`)}},
		{t0, &Put{Key: "p.3", Value: val(`1`)}},
		{t0, &Put{Key: "q", Value: val(`1`)}},
	}
	for _, c := range []struct {
		ops     []TxnOp
		deleted int64
		err     error
	}{
		{[]TxnOp{delPrefixOp("p.", 3)}, 3, nil},
		{[]TxnOp{delPrefixOp("p.", 2)}, 0, ErrTooLarge},
		{[]TxnOp{delPrefixOp("p.", 1)}, 0, ErrTooLarge},
		{[]TxnOp{delPrefixOp("p.", 0)}, 3, nil},
		{[]TxnOp{delPrefixOp("", 4)}, 4, nil},
		{[]TxnOp{delPrefixOp("", 3)}, 0, ErrTooLarge},
		{[]TxnOp{putOp("p.4", `1`), delPrefixOp("p.", 3)}, 0, ErrTooLarge},
		{[]TxnOp{putOp("p.4", `1`), delPrefixOp("p.", 4)}, 4, nil},
		{[]TxnOp{delOp("p.1"), delPrefixOp("p.", 2)}, 2, nil},
		{[]TxnOp{delPrefixOp("p.", 3), delPrefixOp("p.", 1)}, 0, nil}, // the second matches nothing now
		{[]TxnOp{delPrefixOp("zz", 1)}, 0, nil},
	} {
		t.Run(fmt.Sprint(c.ops), func(t *testing.T) {
			s := New()
			run(t, s, setup...)
			if c.err != nil {
				r := mustFail(t, s, &Txn{Success: c.ops}, c.err)
				if !errors.Is(r.Err, ErrTooLarge) {
					t.Fatal(r.Err)
				}
				return
			}
			rep, _ := applyTxn(t, s, t0, &Txn{Success: c.ops})
			eq(t, "deleted", rep.Responses[len(rep.Responses)-1].Delete.Deleted, c.deleted)
		})
	}
	// A plain delete with a limit behaves the same.
	s := New()
	run(t, s, setup...)
	mustFail(t, s, &Delete{Key: "p.", IsPrefix: true, Limit: 2}, ErrTooLarge)
	r := mustApply(t, s, t0, &Delete{Key: "p.", IsPrefix: true, Limit: 3})
	eq(t, "plain delete", r.Reply.(*schema.KVDeleteReply).Deleted, int64(3))
}

// An operation with nothing set cannot be encoded into a decodable entry;
// given to ApplyCommand it fails the transaction with ErrBadCommand and
// changes nothing, even after earlier writes.
func TestTxnEmptyOperation(t *testing.T) {
	s := New()
	run(t, s, step{t0, &Put{Key: "a", Value: val(`1`)}})
	before := snap(t, s)
	for _, txn := range []*Txn{
		{Success: []TxnOp{{}}},
		{Success: []TxnOp{putOp("b", `1`), delOp("a"), {}}},
		{Compare: []Compare{cmpInt("a", TargetExists, CmpEq, 0)}, Failure: []TxnOp{putOp("b", `1`), {}}},
	} {
		r := s.ApplyCommand(Command{Op: OpTxn, Now: t0, Body: txn})
		if !errors.Is(r.Err, ErrBadCommand) || r.Reply != nil || r.Events != nil {
			t.Fatalf("%+v: %+v", txn, r)
		}
		eq(t, "state", string(snap(t, s)), string(before))
		if _, err := Decode(encode(t, t0, txn)); !errors.Is(err, ErrBadCommand) {
			t.Fatalf("an empty operation decoded: %v", err)
		}
	}
}

// A transaction does not keep pointers into its log entry.
func TestTxnDoesNotRetainEntryBuffer(t *testing.T) {
	s := New()
	entry := encode(t, t0, Command{IdempotencyKey: "idem-key", Body: &Txn{
		Compare: []Compare{cmpValue("svc.a", CmpEq, `null`)},
		Success: []TxnOp{{Put: &Put{Key: "svc.a", Value: val(`{"addr":"abc"}`)}}, getOp("svc.a")},
	}})
	r := s.Apply(entry)
	txnOf(t, s, r)
	want := snap(t, s)
	wantReply := string(mustJSON(t, r.Reply))
	for i := headerLen; i < len(entry); i++ {
		if entry[i] >= 'a' && entry[i] <= 'z' {
			entry[i] = 'X'
		}
	}
	eq(t, "value", string(getKey(t, s, "svc.a").Value), `{"addr":"abc"}`)
	eq(t, "snapshot", string(snap(t, s)), string(want))
	retry := encode(t, t0, Command{IdempotencyKey: "idem-key", Body: &Txn{
		Compare: []Compare{cmpValue("svc.a", CmpEq, `null`)},
		Success: []TxnOp{{Put: &Put{Key: "svc.a", Value: val(`{"addr":"abc"}`)}}, getOp("svc.a")},
	}})
	rr := s.Apply(retry)
	if !rr.Cached {
		t.Fatalf("retry: %+v", rr)
	}
	eq(t, "cached reply", string(rr.Reply.(json.RawMessage)), wantReply)
}

// A transaction's deletes say "txn" when marked (a leader marks them once
// every member reads LogFormatTxnCause), "delete" as before when not; the
// mark survives encoding, is refused outside a transaction, and does not
// change which request an idempotency key names.
func TestTxnDeleteCause(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Put{Key: "a", Value: val(`1`)})
	mustApply(t, s, t0, &Put{Key: "b", Value: val(`2`)})

	old := &Txn{Success: []TxnOp{{Delete: &Delete{Key: "a"}}}}
	eq(t, "unmarked needs", RequiredLogFormat(old), 1)
	r := mustApply(t, s, t0, old)
	eq(t, "unmarked delete's cause", r.Events[0].Cause, schema.CauseDelete)

	marked := &Txn{Success: []TxnOp{{Put: &Put{Key: "c", Value: val(`3`)}}, {Delete: &Delete{Key: "b"}}}}
	marked.MarkDeletes()
	eq(t, "marked needs", RequiredLogFormat(marked), LogFormatTxnCause)
	cmd, err := Decode(encode(t, t0, marked))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "the mark after decoding", cmd.Body.(*Txn).Success[1].Delete.ByTxn, true)
	r = mustApply(t, s, t0, marked)
	eq(t, "marked delete's cause", r.Events[1].Cause, schema.CauseTxn)
	h, err := s.History(HistoryQuery{Key: "b", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "history of b", len(h.Records), 2)
	eq(t, "tombstone's cause", h.Records[1].Cause, schema.CauseTxn)

	// Outside a transaction the mark would be a lie.
	mustApply(t, s, t0, &Put{Key: "d", Value: val(`4`)})
	before := snap(t, s)
	if r := apply(t, s, t0, &Delete{Key: "d", ByTxn: true}); !errors.Is(r.Err, ErrBadCommand) {
		t.Fatalf("a marked plain delete: %v, want ErrBadCommand", r.Err)
	}
	if !bytes.Equal(before, snap(t, s)) {
		t.Fatal("a refused delete changed the state")
	}

	unmarkedHash, err := bodyHash(&Txn{Success: []TxnOp{{Put: &Put{Key: "c", Value: val(`3`)}}, {Delete: &Delete{Key: "b"}}}})
	if err != nil {
		t.Fatal(err)
	}
	markedHash, _ := bodyHash(marked)
	eq(t, "the request hash ignores the mark", markedHash, unmarkedHash)
	eq(t, "hashing left the mark in place", marked.Success[1].Delete.ByTxn, true)
}
