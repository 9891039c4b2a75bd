package schema

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// randomKeyValue makes a record with every optional field present or
// absent, keys and content types with bytes that need escaping.
func randomKeyValue(r *rand.Rand) KeyValue {
	keyChars := []byte(`abc.XYZ-_09"\<>&~!@#$%^()`)
	values := []string{``, `null`, `1`, `"a<b>&\"c"`, `{"x":[1,2,{"y":null}]}`, `-0.5e10`, `"\u2028é"`}
	strs := []string{"", "text/plain", "tab\there", "é", "\u2028", "\x7f", "\xff"}
	key := make([]byte, 1+r.IntN(20))
	for j := range key {
		key[j] = keyChars[r.IntN(len(keyChars))]
	}
	kv := KeyValue{Key: string(key), Value: json.RawMessage(values[r.IntN(len(values))]),
		CreateRevision: r.Int64(), ModRevision: -r.Int64N(5), Version: r.Int64N(3)}
	if r.IntN(2) == 0 {
		kv.Lease = r.Int64N(1 << 53)
	}
	if r.IntN(3) == 0 {
		ms := r.Int64N(60_000) - 5
		kv.RemainingMS = &ms
	}
	if r.IntN(3) == 0 {
		kv.ContentType = strs[r.IntN(len(strs))]
		kv.Metadata = json.RawMessage([]string{``, `{}`, `{"a":"<&>","b":[1]}`}[r.IntN(3)])
	}
	return kv
}

func TestKVGetReplyAppendJSONMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 2000; i++ {
		reply := KVGetReply{Revision: r.Int64(), Count: r.Int64N(1 << 40), More: r.IntN(2) == 0}
		switch n := r.IntN(6); n {
		case 0:
			reply.KVs = nil
		default:
			reply.KVs = make([]KeyValue, n-1)
			for j := range reply.KVs {
				reply.KVs[j] = randomKeyValue(r)
			}
		}
		want := encodingJSON(t, &reply)
		if got := reply.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("reply %+v\nAppendJSON: %s\nencoding/json: %s", reply, got, want)
		}
		// Appends, leaving what b held.
		if got := reply.AppendJSON([]byte("x")); !bytes.Equal(got, append([]byte("x"), want...)) {
			t.Fatalf("AppendJSON after a prefix: %s", got)
		}
	}
}

func randomEvents(r *rand.Rand) []Event {
	n := r.IntN(5)
	if n == 0 {
		return nil
	}
	events := make([]Event, n-1)
	for i := range events {
		kv := randomKeyValue(r)
		events[i] = Event{Type: EventPut, Key: kv.Key, Value: kv.Value, Revision: kv.CreateRevision, OpIndex: r.IntN(9),
			CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease,
			Cause: CausePut, ContentType: kv.ContentType, Metadata: kv.Metadata}
		if r.IntN(3) == 0 {
			events[i].Type, events[i].Value, events[i].Cause = EventDelete, nil, CauseLeaseExpired
		}
	}
	return events
}

func TestChangesAndHistoryAppendJSONMatchEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 1000; i++ {
		changes := KVChangesReply{Events: randomEvents(r), NextRevision: r.Int64(), NextOpIndex: r.IntN(100) - 1,
			More: r.IntN(2) == 0, CompactRevision: r.Int64N(1000)}
		if got, want := changes.AppendJSON(nil), encodingJSON(t, &changes); !bytes.Equal(got, want) {
			t.Fatalf("changes %+v\nAppendJSON: %s\nencoding/json: %s", changes, got, want)
		}
		history := KVHistoryReply{Key: randomKeyValue(r).Key, Records: randomEvents(r), More: r.IntN(2) == 0,
			Revision: r.Int64(), CompactRevision: r.Int64N(1000)}
		if r.IntN(2) == 0 {
			history.NextRevision = r.Int64N(1 << 40)
		}
		if got, want := history.AppendJSON(nil), encodingJSON(t, &history); !bytes.Equal(got, want) {
			t.Fatalf("history %+v\nAppendJSON: %s\nencoding/json: %s", history, got, want)
		}
	}
}

// FuzzKeyValueAppendJSON holds the hand-written encoding to encoding/json's
// for any key and content type (values are stored compact JSON, so the
// fuzzer picks among such documents).
func FuzzKeyValueAppendJSON(f *testing.F) {
	f.Add("svc.a", "text/plain", int64(1), int64(7), uint8(0))
	f.Add("\"\\\x00\u2028\xff", "\x7f<&>", int64(-1), int64(0), uint8(5))
	docs := []string{``, `1`, `"x"`, `{"a":[true,null]}`, `"\u003c"`, `"é\u2028"`}
	f.Fuzz(func(t *testing.T, key, contentType string, lease, remaining int64, pick uint8) {
		kv := KeyValue{Key: key, Value: json.RawMessage(docs[int(pick)%len(docs)]), Lease: lease, ContentType: contentType,
			CreateRevision: remaining ^ lease, ModRevision: lease, Version: remaining}
		if pick&8 != 0 {
			kv.RemainingMS = &remaining
		}
		if pick&16 != 0 {
			kv.Metadata = json.RawMessage(docs[int(pick>>5)%len(docs)])
		}
		want := encodingJSON(t, &kv)
		if got := kv.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("record %+v\nAppendJSON: %s\nencoding/json: %s", kv, got, want)
		}
	})
}

func BenchmarkKVGetReplyAppendJSON(b *testing.B) {
	value := json.RawMessage(`"` + string(bytes.Repeat([]byte("v"), 98)) + `"`)
	reply := KVGetReply{Revision: 1_000_000, Count: 100_000, More: true, KVs: make([]KeyValue, 5000)}
	for i := range reply.KVs {
		reply.KVs[i] = KeyValue{Key: "r.0012345", Value: value, CreateRevision: int64(i), ModRevision: int64(i), Version: 1}
	}
	b.Run("append", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf = reply.AppendJSON(buf[:0])
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(&reply); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// AppendJSONYielding writes AppendJSON's bytes, and yields after every
// ListYieldEvery records, never for a short page.
func TestKVGetReplyAppendJSONYielding(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, ListYieldEvery, ListYieldEvery + 1, 3*ListYieldEvery + 7} {
		reply := &KVGetReply{Revision: 9, Count: int64(n), More: n > 1, KVs: []KeyValue{}}
		for range n {
			reply.KVs = append(reply.KVs, randomKeyValue(r))
		}
		yields := 0
		got := reply.AppendJSONYielding(nil, func() { yields++ })
		if want := reply.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("%d records: yielding wrote\n%s\nnot\n%s", n, got, want)
		}
		if want := max(n-1, 0) / ListYieldEvery; yields != want {
			t.Errorf("%d records: %d yields, want %d", n, yields, want)
		}
	}
}
