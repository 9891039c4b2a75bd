package schema

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

func encodingJSON(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func TestEventAppendJSONMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	keyChars := []byte(`abc.XYZ-_09"\<>&~!@#$%^()`)
	values := []string{``, `null`, `1`, `"a<b>&\"c"`, `{"x":[1,2,{"y":null}]}`, `-0.5e10`}
	strs := []string{"", "put", "lease_expired", "tab\there", "é", "\u2028", "\x7f"}
	for i := 0; i < 5000; i++ {
		key := make([]byte, 1+r.IntN(20))
		for j := range key {
			key[j] = keyChars[r.IntN(len(keyChars))]
		}
		e := Event{
			Type: strs[r.IntN(len(strs))], Key: string(key), Value: json.RawMessage(values[r.IntN(len(values))]),
			Revision: r.Int64(), OpIndex: r.IntN(20000), CreateRevision: r.Int64N(100), ModRevision: -r.Int64N(5),
			Version: r.Int64N(3), Lease: r.Int64N(1 << 53), Cause: strs[r.IntN(len(strs))],
		}
		if r.IntN(4) == 0 {
			e.Value = nil
		}
		if r.IntN(3) == 0 {
			e.ContentType = strs[r.IntN(len(strs))]
			e.Metadata = json.RawMessage([]string{``, `{}`, `{"a":"<&>","b":[1]}`}[r.IntN(3)])
		}
		want := encodingJSON(t, &e)
		if got := e.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("event %+v\nAppendJSON: %s\nencoding/json: %s", e, got, want)
		}
	}
}

func BenchmarkEventAppendJSON(b *testing.B) {
	e := Event{Type: "delete", Key: "svc.api.n00001", Revision: 1234, OpIndex: 17, ModRevision: 1234, Lease: 42, Cause: CauseLeaseRevoked}
	var buf []byte
	for b.Loop() {
		buf = e.AppendJSON(buf[:0])
	}
}
