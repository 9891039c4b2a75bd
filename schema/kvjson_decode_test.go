package schema

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// decodePlain decodes data as encoding/json does without UnmarshalJSON.
func decodePlain(data []byte, into KVGetReply) (KVGetReply, error) {
	type plain KVGetReply
	p := plain(into)
	err := json.Unmarshal(data, &p)
	return KVGetReply(p), err
}

// sameDecode fails t unless data decodes into a copy of into the same
// way through UnmarshalJSON called directly (no validation first),
// through json.Unmarshal and through DecodeJSON, as through encoding/json
// alone.
func sameDecode(t *testing.T, data []byte, into KVGetReply) {
	t.Helper()
	want, wantErr := decodePlain(data, cloneReply(into))
	direct := cloneReply(into)
	directErr := direct.UnmarshalJSON(data)
	viaJSON := cloneReply(into)
	viaErr := json.Unmarshal(data, &viaJSON)
	viaDecode := cloneReply(into)
	decodeErr := DecodeJSON(data, &viaDecode)
	for _, c := range []struct {
		how string
		got KVGetReply
		err error
	}{{"UnmarshalJSON", direct, directErr}, {"json.Unmarshal", viaJSON, viaErr}, {"DecodeJSON", viaDecode, decodeErr}} {
		if (c.err == nil) != (wantErr == nil) {
			t.Fatalf("%s of %.300q: error %v, encoding/json's %v", c.how, data, c.err, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(c.got, want) {
			t.Fatalf("%s of %.300q:\n got %s\nwant %s", c.how, data, dump(c.got), dump(want))
		}
	}
}

func cloneReply(r KVGetReply) KVGetReply {
	if r.KVs != nil {
		r.KVs = append([]KeyValue{}, r.KVs...)
	}
	return r
}

func dump(r KVGetReply) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{rev %d count %d more %v kvs(nil=%v)", r.Revision, r.Count, r.More, r.KVs == nil)
	for _, kv := range r.KVs {
		rem := "nil"
		if kv.RemainingMS != nil {
			rem = fmt.Sprint(*kv.RemainingMS)
		}
		fmt.Fprintf(&b, " {%q %q(nil=%v) %d %d %d %d %s %q %q}", kv.Key, kv.Value, kv.Value == nil, kv.CreateRevision,
			kv.ModRevision, kv.Version, kv.Lease, rem, kv.ContentType, kv.Metadata)
	}
	return b.String() + "}"
}

// plainKeyValue is a record as most servers hold them: a key without
// escapes, a JSON value, sometimes a lease.
func plainKeyValue(r *rand.Rand, i int) KeyValue {
	kv := KeyValue{Key: fmt.Sprintf("app/%d/é%d", r.IntN(100), i), Value: json.RawMessage(`"` + strings.Repeat("v", r.IntN(40)) + `"`),
		CreateRevision: r.Int64N(1 << 40), ModRevision: r.Int64N(1 << 40), Version: 1 + r.Int64N(9)}
	if r.IntN(4) == 0 {
		kv.Lease = 1 + r.Int64N(1<<53)
		ms := r.Int64N(60_000)
		kv.RemainingMS = &ms
	}
	return kv
}

func TestKVGetReplyUnmarshalMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 3000; i++ {
		reply := KVGetReply{Revision: r.Int64(), Count: r.Int64N(1 << 40), More: r.IntN(2) == 0}
		if n := r.IntN(8); n > 0 {
			reply.KVs = make([]KeyValue, n-1)
			for j := range reply.KVs {
				if r.IntN(2) == 0 {
					reply.KVs[j] = plainKeyValue(r, j)
				} else {
					reply.KVs[j] = randomKeyValue(r)
				}
			}
		}
		sameDecode(t, reply.AppendJSON(nil), KVGetReply{})
		indented, err := json.MarshalIndent(&reply, " ", "\t")
		if err != nil {
			t.Fatal(err)
		}
		sameDecode(t, indented, KVGetReply{})
	}
}

func TestKVGetReplyUnmarshalOddInputs(t *testing.T) {
	rec := `{"key":"k","value":1,"create_revision":2,"mod_revision":3,"version":1}`
	for _, in := range []string{
		`{}`, `{"kvs":[]}`, `{"kvs":null}`, `{"kvs":[{}]}`, `null`, `[]`, `""`, ``, ` `,
		`{"revision":1,"kvs":[` + rec + `],"count":1,"more":false}`,
		` { "revision" : 1 , "kvs" : [ ` + rec + ` , ` + rec + ` ] , "more" : true } `,
		// What the fast path leaves to encoding/json.
		`{"Revision":1}`, `{"KVS":[` + rec + `]}`, `{"kvs":[{"Key":"k"}]}`, `{"kvs":[{"KEY":"k","key":"j"}]}`,
		`{"revision":1,"revision":2}`, `{"kvs":[{"key":"a","key":"b"}]}`,
		`{"kvs":[` + rec + `],"kvs":[]}`,
		`{"extra":1,"revision":1}`, `{"kvs":[{"key":"k","extra":{"a":[1]}}]}`,
		`{"revision":null}`, `{"more":null}`, `{"kvs":[{"key":null}]}`, `{"kvs":[{"value":null}]}`,
		`{"kvs":[{"remaining_ms":null}]}`, `{"kvs":[{"metadata":null,"key":"k"}]}`,
		`{"revision":1.5}`, `{"revision":1e3}`, `{"revision":-0}`, `{"revision":01}`, `{"revision":-}`,
		`{"revision":9223372036854775807}`, `{"revision":9223372036854775808}`, `{"revision":-9223372036854775808}`,
		`{"revision":"1"}`, `{"more":"true"}`, `{"more":tru}`, `{"more":1}`,
		`{"kvs":[{"key":"a\"b"}]}`, `{"kvs":[{"key":"\u00e9\ud83d\ude00"}]}`, `{"kvs":[{"key":"\ud800"}]}`,
		"{\"kvs\":[{\"key\":\"\xff\xfe\"}]}", "{\"kvs\":[{\"key\":\"é\"}]}", "{\"kvs\":[{\"key\":\"a\tb\"}]}",
		"{\"kvs\":[{\"value\":\"\xff\"}]}", `{"kvs":[{"value":"\x"}]}`, `{"kvs":[{"value":"\u12"}]}`,
		`{"kvs":[{"value":{"a":[1,-2.5e+3,true,false,null,"s",{}]},"metadata":[]}]}`,
		`{"kvs":[{"value":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}]}`,
		`{"kvs":[{"value":01}]}`, `{"kvs":[{"value":1.}]}`, `{"kvs":[{"value":.5}]}`, `{"kvs":[{"value":1e}]}`,
		`{"kvs":[{"value":{"a" 1}}]}`, `{"kvs":[{"value":{"a":1,}}]}`, `{"kvs":[{"value":[1,]}]}`, `{"kvs":[{"value":nul}]}`,
		`{"kvs":[{"content_type":""}]}`, `{"kvs":[{"content_type":"a/b","metadata":{"x":"y"}}]}`,
		// Not JSON, or cut short.
		`{`, `{"revision"`, `{"revision":`, `{"revision":1`, `{"revision":1,}`, `{"kvs":[`, `{"kvs":[{`,
		`{"kvs":[` + rec, `{"kvs":[` + rec + `,]}`, `{"revision":1}x`, `{"revision":1}{}`, `{"revision":1 "count":2}`,
		"{\"kvs\":[{\"key\":\"a\x01\"}]}", `{"kvs":[{"value":"unterminated}]}`,
	} {
		sameDecode(t, []byte(in), KVGetReply{})
	}
}

// A reply that already holds something is decoded into as encoding/json
// does, merging.
func TestKVGetReplyUnmarshalIntoNonZero(t *testing.T) {
	ms := int64(5)
	held := KVGetReply{Revision: 9, More: true, KVs: []KeyValue{{Key: "old", Lease: 7, RemainingMS: &ms}, {Key: "old2"}}}
	sameDecode(t, []byte(`{"kvs":[{"key":"new","value":1}],"count":3}`), held)
	sameDecode(t, []byte(`{"revision":0}`), held)
}

func TestKVGetReplyUnmarshalOwnsItsBytes(t *testing.T) {
	data := []byte(`{"revision":1,"kvs":[{"key":"a","value":"xy"},{"key":"b","value":"zw"}],"count":2,"more":false}`)
	var got KVGetReply
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = '#'
	}
	if got.KVs[0].Key != "a" || string(got.KVs[0].Value) != `"xy"` || got.KVs[1].Key != "b" || string(got.KVs[1].Value) != `"zw"` {
		t.Fatalf("decoded reply changed with its input: %s", dump(got))
	}
	// An append to one value must not write over the next one.
	_ = append(got.KVs[0].Value, "!!!!"...)
	if string(got.KVs[1].Value) != `"zw"` {
		t.Fatalf("appending to a value wrote over the next: %q", got.KVs[1].Value)
	}
}

// The fast path is the one taken for what servers write: a page of a
// thousand records costs a handful of allocations, not thousands.
func TestKVGetReplyUnmarshalTakesFastPath(t *testing.T) {
	page := benchPage(1000)
	allocs := testing.AllocsPerRun(20, func() {
		var r KVGetReply
		if err := json.Unmarshal(page, &r); err != nil || len(r.KVs) != 1000 {
			t.Fatalf("decode: %v, %d records", err, len(r.KVs))
		}
	})
	if allocs > 16 {
		t.Fatalf("decoding a page of 1000 records allocated %v times; the fast path was not taken", allocs)
	}
}

// benchPage is a page like the ones `etcdbench scale` reads: n records
// with 100-byte values, some on leases.
func benchPage(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	reply := KVGetReply{Revision: 2_000_000, Count: int64(n), More: true}
	v := json.RawMessage(`"` + strings.Repeat("v", 98) + `"`)
	for i := range n {
		kv := KeyValue{Key: fmt.Sprintf("bench.read.%07d", i), Value: v, CreateRevision: 500_000 + int64(i), ModRevision: 500_000 + int64(i), Version: 1}
		if r.IntN(10) == 0 {
			kv.Lease = 1 << 40
			ms := r.Int64N(60_000)
			kv.RemainingMS = &ms
		}
		reply.KVs = append(reply.KVs, kv)
	}
	return reply.AppendJSON(nil)
}

func BenchmarkKVGetReplyDecode(b *testing.B) {
	page := benchPage(10_000)
	b.Run("UnmarshalJSON", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		b.ReportAllocs()
		for b.Loop() {
			var r KVGetReply
			if err := json.Unmarshal(page, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeJSON", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		b.ReportAllocs()
		for b.Loop() {
			var r KVGetReply
			if err := DecodeJSON(page, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodePlain(page, KVGetReply{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func FuzzKVGetReplyUnmarshal(f *testing.F) {
	f.Add([]byte(`{"revision":1,"kvs":[{"key":"k","value":{"a":[1,2.5,"x\u00e9"]},"create_revision":2,"mod_revision":3,"version":1,"lease":4,"remaining_ms":5,"content_type":"t","metadata":{}}],"count":1,"more":true}`))
	f.Add([]byte(`{"kvs":[{"Key":"k","key":"j"}]}`))
	f.Add([]byte(`{"kvs":[]}`))
	f.Add(benchPage(3))
	f.Fuzz(func(t *testing.T, data []byte) {
		sameDecode(t, data, KVGetReply{})
	})
}

// DecodeJSON decodes anything else as json.Unmarshal does.
func TestDecodeJSONOtherTypes(t *testing.T) {
	var p KVPutReply
	if err := DecodeJSON([]byte(`{"revision":7}`), &p); err != nil || p.Revision != 7 {
		t.Fatalf("DecodeJSON into a KVPutReply: %+v, %v", p, err)
	}
	if err := DecodeJSON([]byte(`{"revision":`), &p); err == nil {
		t.Fatal("DecodeJSON of a cut reply: no error")
	}
	var nilReply *KVGetReply
	if err := DecodeJSON([]byte(`{}`), nilReply); err == nil {
		t.Fatal("DecodeJSON into a nil *KVGetReply: no error")
	}
}
