package decode

import (
	"reflect"
	"testing"

	"github.com/concord-io/concord/schema"
)

var fastDecodeSeeds = []string{
	`{"id":1}`, `{"id":42,"ttl":10}`, ` { "ttl" : 10 , "id" : 7 } `, `{"ttl":10}`, `{}`, `{"ttl":0}`,
	`{"id":-3}`, `{"id":9007199254740991}`, `{"id":123456789012345678}`, `{"id":1234567890123456789}`,
	`{"id":01}`, `{"id":1.0}`, `{"id":1e3}`, `{"id":"1"}`, `{"ID":1}`, `{"id":1,"id":2}`, `{"id":1}x`,
	`{"id":1,}`, `{"i\u0064":1}`, `{"id":-0}`, `{"id":1}{}`, `{"ttl":10,"metadata":{}}`, "{\"id\":1}\n",
	`{"id" 1}`, `{"id":}`, `{"id":-}`, `[1]`, ``, `{`, `{"id":1`, `{"x":1}`,
	// Puts.
	`{"key":"a.b","value":1}`, `{"key":"a","value":"x","lease":3}`, ` {"value" : {"a":[1,"}",{"b":null}]} , "key":"k" , "ttl":5} `,
	`{"key":"a","value":null}`, `{"key":"a","value":true,"lease":0}`, `{"key":"a","value":"\u00e9\"}"}`,
	`{"key":"a","value":1,"lease":1,"ttl":2}`, `{"key":"a","value":-1.5e3}`, `{"key":"a","value":[]}`,
	`{"key":"a","value":01}`, `{"key":"a","value":1,}`, `{"key":"a","value":}`, `{"key":"a","value":[1}`,
	`{"key":"a","value":{"a" 1}}`, `{"key":"a","value":"x}`, `{"key":"a","value":tru}`, `{"key":"a","value":1 2}`,
	`{"key":"\u0061","value":1}`, `{"key":"é","value":1}`, `{"key":"a","key":"b","value":1}`, `{"Key":"a","value":1}`,
	`{"key":"a","value":1,"prev_kv":true}`, `{"key":"a","value":1}]`, `{"key":1,"value":1}`, `{"key":"a","value":"ÿ"}`,
	`{"key":"a","value":{"x":1}}}`, `{"key":"a","value":]`, `{"key":"a","value":"a\`, "{\"key\":\"a\",\"value\":\"\t\"}", "{\"key\":\"a\",\"value\":\"\xff\"}",
}

// FuzzFastDecode checks that every body the fast path takes, Strict
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
	for _, s := range []string{`{"key":"a.b","value":1}`, `{"key":"a","value":"x","lease":3}`, `{"value":{"a":[1,"}"]},"key":"k","ttl":5}`,
		`{"key":"a","value":null}`, ` { "key" : "a" , "value" : [ 1 , 2 ] } `} {
		var req schema.KVPutRequest
		if !decodePutFast([]byte(s), &req) {
			t.Errorf("%s did not take the put fast path", s)
		}
	}
	if taken < 20 {
		t.Fatalf("only %d seeds took the fast path", taken)
	}
}

// checkFastDecode compares the fast path with Strict on data, as a
// keep-alive and as a grant, and reports whether the fast path took it.
func checkFastDecode(t *testing.T, data []byte) bool {
	t.Helper()
	took := false
	if f, ok := decodeIntObject(data, "id", "ttl"); ok {
		took = true
		var req schema.LeaseKeepAliveRequest
		if e := Strict(data, &req); e != nil {
			t.Fatalf("%q: fast path took it, Strict refused: %v", data, e)
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
		if e := Strict(data, &req); e != nil {
			t.Fatalf("%q: fast path took it, Strict refused: %v", data, e)
		}
		if req.TTL != f.val[0] || req.ID != f.val[1] || hasMember(data, "ttl") != f.present[0] {
			t.Fatalf("%q: fast %+v, strict %+v", data, f, req)
		}
	}
	var fast schema.KVPutRequest
	if decodePutFast(data, &fast) {
		took = true
		var strict schema.KVPutRequest
		if e := Strict(data, &strict); e != nil {
			t.Fatalf("%q: the put fast path took it, Strict refused: %v", data, e)
		}
		if !reflect.DeepEqual(fast, strict) {
			t.Fatalf("%q: fast %+v, strict %+v", data, fast, strict)
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
