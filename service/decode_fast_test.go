package service

import (
	"testing"

	"github.com/concord-io/concord/schema"
)

var fastDecodeSeeds = []string{
	`{"id":1}`, `{"id":42,"ttl":10}`, ` { "ttl" : 10 , "id" : 7 } `, `{"ttl":10}`, `{}`, `{"ttl":0}`,
	`{"id":-3}`, `{"id":9007199254740991}`, `{"id":123456789012345678}`, `{"id":1234567890123456789}`,
	`{"id":01}`, `{"id":1.0}`, `{"id":1e3}`, `{"id":"1"}`, `{"ID":1}`, `{"id":1,"id":2}`, `{"id":1}x`,
	`{"id":1,}`, `{"i\u0064":1}`, `{"id":-0}`, `{"id":1}{}`, `{"ttl":10,"metadata":{}}`, "{\"id\":1}\n",
	`{"id" 1}`, `{"id":}`, `{"id":-}`, `[1]`, ``, `{`, `{"id":1`, `{"x":1}`,
}

// FuzzFastDecode checks that every body the fast path takes, decodeStrict
// takes too, with the same values: the fast path may only say less.
func FuzzFastDecode(f *testing.F) {
	for _, s := range fastDecodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkFastDecode(t, data) })
}

func TestFastDecodeAgreesWithStrict(t *testing.T) {
	taken := 0
	for _, s := range fastDecodeSeeds {
		if checkFastDecode(t, []byte(s)) {
			taken++
		}
	}
	// The plain forms must take the fast path, or it would be dead code.
	for _, s := range []string{`{"id":1}`, `{"id":42,"ttl":10}`, ` { "ttl" : 10 , "id" : 7 } `, `{"ttl":10}`} {
		if _, ok := decodeIntObject([]byte(s), "id", "ttl"); !ok {
			t.Errorf("%s did not take the fast path", s)
		}
	}
	if taken < 8 {
		t.Fatalf("only %d seeds took the fast path", taken)
	}
}

// checkFastDecode compares the fast path with decodeStrict on data, as a
// keep-alive and as a grant, and reports whether the fast path took it.
func checkFastDecode(t *testing.T, data []byte) bool {
	t.Helper()
	took := false
	if f, ok := decodeIntObject(data, "id", "ttl"); ok {
		took = true
		var req schema.LeaseKeepAliveRequest
		if e := decodeStrict(data, &req); e != nil {
			t.Fatalf("%q: fast path took it, decodeStrict refused: %v", data, e)
		}
		if req.ID != f.val[0] || (req.TTL != nil) != f.present[1] || req.TTL != nil && *req.TTL != f.val[1] {
			t.Fatalf("%q: fast %+v, strict %+v", data, f, req)
		}
		if hasMember(data, "id") != f.present[0] {
			t.Fatalf("%q: presence of id differs", data)
		}
	}
	if f, ok := decodeIntObject(data, "ttl", "id"); ok {
		took = true
		var req schema.LeaseGrantRequest
		if e := decodeStrict(data, &req); e != nil {
			t.Fatalf("%q: fast path took it, decodeStrict refused: %v", data, e)
		}
		if req.TTL != f.val[0] || req.ID != f.val[1] || hasMember(data, "ttl") != f.present[0] {
			t.Fatalf("%q: fast %+v, strict %+v", data, f, req)
		}
	}
	return took
}

func TestFastDecodeDoesNotAllocate(t *testing.T) {
	body := []byte(`{"id":42}`)
	if n := testing.AllocsPerRun(1000, func() { decodeIntObject(body, "id", "ttl") }); n != 0 {
		t.Fatalf("%v allocations per decode", n)
	}
}
