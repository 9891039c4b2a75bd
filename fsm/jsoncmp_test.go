package fsm

import (
	"strings"
	"testing"
	"time"
)

// compareJSON directly: every operator over pairs of every JSON kind.
func TestCompareJSON(t *testing.T) {
	type row struct {
		a, b string
		want [6]bool // ==, !=, <, <=, >, >=
	}
	ordered := func(c int) [6]bool { // the six results for a numeric or string pair with a cmp b = c
		return [6]bool{c == 0, c != 0, c < 0, c <= 0, c > 0, c >= 0}
	}
	unordered := func(equal bool) [6]bool { return [6]bool{equal, !equal, false, false, false, false} }
	rows := []row{
		{`1`, `1`, ordered(0)},
		{`1`, `1.0`, ordered(0)},
		{`1`, `1e0`, ordered(0)},
		{`1`, `10e-1`, ordered(0)},
		{`1`, `0.1E1`, ordered(0)},
		{`-0`, `0`, ordered(0)},
		{`-0.0`, `0e5`, ordered(0)},
		{`1`, `2`, ordered(-1)},
		{`-1`, `-2`, ordered(1)},
		{`0.1`, `0.10000000000000000001`, ordered(-1)},
		{`9007199254740993`, `9007199254740992`, ordered(1)}, // 2^53+1 > 2^53; float64 says equal
		{`1e308`, `1e309`, ordered(-1)},                      // 1e309 overflows float64
		{`-1e-400`, `0`, ordered(-1)},                        // underflows float64
		{`123456789012345678901234567890`, `123456789012345678901234567891`, ordered(-1)},
		{`"a"`, `"a"`, ordered(0)},
		{`"a"`, `"b"`, ordered(-1)},
		{`"b"`, `"B"`, ordered(1)},
		{`"a"`, `"ab"`, ordered(-1)},
		{`""`, `"a"`, ordered(-1)},
		{`"é"`, `"\u00e9"`, ordered(0)},
		{`"é"`, `"z"`, ordered(1)}, // bytewise UTF-8
		{`"\ud83d\ude00"`, `"😀"`, ordered(0)},
		{`"10"`, `"9"`, ordered(-1)}, // strings are not numbers
		{`1`, `"1"`, unordered(false)},
		{`"1"`, `1`, unordered(false)},
		{`null`, `null`, unordered(true)},
		{`null`, `0`, unordered(false)},
		{`null`, `false`, unordered(false)},
		{`null`, `""`, unordered(false)},
		{`true`, `true`, unordered(true)},
		{`true`, `false`, unordered(false)},
		{`false`, `0`, unordered(false)},
		{`[]`, `[]`, unordered(true)},
		{`[1,2]`, `[1.0,2e0]`, unordered(true)},
		{`[1,2]`, `[2,1]`, unordered(false)},
		{`[1,2]`, `[1,2,3]`, unordered(false)},
		{`[[1]]`, `[[1.0]]`, unordered(true)},
		{`{}`, `{}`, unordered(true)},
		{`{}`, `[]`, unordered(false)},
		{`{"a":1,"b":[true,null]}`, `{"b":[true,null],"a":1.00}`, unordered(true)},
		{`{"a":1}`, `{"a":1,"b":null}`, unordered(false)},
		{`{"a":1,"b":null}`, `{"a":1}`, unordered(false)},
		{`{"a":{"b":{"c":1}}}`, `{"a":{"b":{"c":1e0}}}`, unordered(true)},
		{`{"a":{"b":{"c":1}}}`, `{"a":{"b":{"c":"1"}}}`, unordered(false)},
		{`{"a":1}`, `{"A":1}`, unordered(false)},
	}
	for _, r := range rows {
		for i, op := range allOps {
			if got := compareJSON(op, val(r.a), val(r.b)); got != r.want[i] {
				t.Errorf("%s %s %s = %v, want %v", r.a, opNames[op], r.b, got, r.want[i])
			}
			// Swapping the operands mirrors the ordering operators.
			mirror := map[CompareOp]CompareOp{CmpEq: CmpEq, CmpNe: CmpNe, CmpLt: CmpGt, CmpLe: CmpGe, CmpGt: CmpLt, CmpGe: CmpLe}[op]
			if got := compareJSON(mirror, val(r.b), val(r.a)); got != r.want[i] {
				t.Errorf("%s %s %s = %v, want %v", r.b, opNames[mirror], r.a, got, r.want[i])
			}
		}
	}
	// Invalid documents and unknown operators compare false.
	for _, c := range [][2]string{{`{`, `{`}, {``, ``}, {`1`, ``}, {``, `null`}} {
		for _, op := range allOps {
			if compareJSON(op, val(c[0]), val(c[1])) {
				t.Errorf("%q %s %q is true", c[0], opNames[op], c[1])
			}
		}
	}
	for _, op := range []CompareOp{0, 7, 255} {
		if compareJSON(op, val(`1`), val(`1`)) || compareJSON(op, val(`1`), val(`2`)) {
			t.Errorf("operator %d is true", op)
		}
	}
}

func TestJSONPointer(t *testing.T) {
	doc := val(`{"a":[10,{"b":"<x>"}],"a/b":1,"m~n":2,"":{"":3},"~1":4,"n":null,"big":123456789012345678901234567890,"f":1.50}`)
	for _, c := range []struct{ ptr, want string }{
		{"", string(doc)},
		{"/a", `[10,{"b":"\u003cx\u003e"}]`},
		{"/a/0", `10`},
		{"/a/1/b", `"\u003cx\u003e"`},
		{"/a/2", `null`},
		{"/a/-", `null`},
		{"/a/00", `null`},
		{"/a/01", `null`},
		{"/a/ 1", `null`},
		{"/a/1e0", `null`},
		{"/a/18446744073709551616", `null`},
		{"/a/0/x", `null`},
		{"/a~1b", `1`},
		{"/m~0n", `2`},
		{"/~01", `4`}, // ~01 is "~1", not "/"
		{"/", `{"":3}`},
		{"//", `3`},
		{"/n", `null`},
		{"/n/x", `null`},
		{"/missing", `null`},
		{"/big", `123456789012345678901234567890`}, // exact, not through float64
		{"/f", `1.50`},                             // as written
		{"a", `null`},                              // no leading slash
		{"#/a", `null`},                            // URI fragments are not pointers
	} {
		if got := string(jsonPointer(doc, c.ptr)); got != c.want {
			t.Errorf("jsonPointer(%q) = %s, want %s", c.ptr, got, c.want)
		}
	}
	for _, d := range []string{`1`, `"s"`, `null`, `true`, `[]`, `{`} {
		if got := string(jsonPointer(val(d), "/0")); got != "null" {
			t.Errorf("jsonPointer(%s, /0) = %s", d, got)
		}
	}
	eq(t, "array index into an array", string(jsonPointer(val(`[[1,2],[3]]`), "/1/0")), `3`)
}

func TestValidJSONPointer(t *testing.T) {
	for p, want := range map[string]bool{
		"": true, "/": true, "/a": true, "/a/b": true, "/a~0": true, "/a~1b": true, "/~01": true, "//": true,
		"a": false, "#/a": false, "/a~": false, "/a~2": false, "/~": false, "/a~a": false,
	} {
		if got := ValidJSONPointer(p); got != want {
			t.Errorf("ValidJSONPointer(%q) = %v, want %v", p, got, want)
		}
	}
}

// Numbers compare exactly whatever their exponent: 1e1000001 is a valid
// JSON number greater than 2 and equal to 10e1000000. big.Rat refuses
// decimal exponents beyond 1e6, and compareNumbers then falls back to
// comparing the spellings bytewise, so "1e1000001" < "2" and
// 1e1000001 != 10e1000000.
func TestCompareJSONHugeExponents(t *testing.T) {
	for _, c := range []struct {
		a, b string
		op   CompareOp
	}{
		{`1e1000001`, `2`, CmpGt},
		{`2`, `1e1000001`, CmpLt},
		{`1e1000001`, `10e1000000`, CmpEq},
		{`1e1000001`, `1E+1000001`, CmpEq},
		{`1e-1000001`, `0.5`, CmpLt},
		{`-1e1000001`, `-5`, CmpLt},
	} {
		if !compareJSON(c.op, val(c.a), val(c.b)) {
			t.Errorf("%s %s %s is false", c.a, opNames[c.op], c.b)
		}
	}
	// Through a transaction, as a client would meet it.
	s := New()
	run(t, s, step{t0, &Put{Key: "k", Value: val(`{"n":1e1000001}`)}})
	rep, _ := applyTxn(t, s, t0, &Txn{Compare: []Compare{cmpField("k", "/n", CmpGt, `2`)}})
	if !rep.Succeeded {
		t.Errorf("field /n = 1e1000001 > 2 is false")
	}
}

// Comparing numbers must not cost in proportion to their exponent: a
// compare runs inside Apply on every replica, so its cost must be bounded
// by the size of the log entry. big.Rat.SetString("1e999999") builds
// 10^999999 exactly (about 40 ms); a value compare of two arrays of such
// numbers costs that per element, and a 1 MiB transaction of them stalls
// every replica for minutes.
func TestCompareJSONCostIsBoundedByExponent(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	const n = 10
	arr := "[" + strings.TrimSuffix(strings.Repeat("1e999999,", n), ",") + "]"
	start := time.Now()
	if !compareJSON(CmpEq, val(arr), val(arr)) {
		t.Fatal("the arrays differ")
	}
	// A sane comparison of 10 pairs of 8-byte numbers takes microseconds;
	// allow a generous 100 ms even under -race on a slow machine.
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("comparing %d pairs of 1e999999 took %v (%v per number)", n, d, d/time.Duration(2*n))
	}
}
