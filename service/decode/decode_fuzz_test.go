package decode

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// FuzzDecodeRequest feeds arbitrary bytes to every request decoder. None may
// panic; each either refuses the input with a 400 or 413, or returns a
// command that obeys the rules the state machine relies on and survives
// the log encoding unchanged.
func FuzzDecodeRequest(f *testing.F) {
	seeds := []string{
		`{"ttl":10}`, `{"ttl":10,"id":7,"metadata":{"a":1}}`, `{"id":1,"ttl":5}`, `{"id":1,"keys":true}`,
		`{"include_anonymous":true,"limit":3,"after":2}`, `{"key":"a.b","value":{"x":[1,2]},"lease":1}`,
		`{"key":"a","value":null,"ttl":3,"prev_kv":true}`, `{"prefix":"","limit":10,"after":"a"}`,
		`{"key":"a.b","prefix":"a"}`, `{"key":"a b","value":1}`, `{"ttl":1e3}`, `[]`, `null`, ``, `{"ttl":5}x`,
		`{"compare":[{"key":"l","target":"create_revision","op":"==","value":0}],"success":[{"put":{"key":"l","value":"n1","lease":4}}],"failure":[{"get":{"key":"l"}}],"idempotency_key":"k"}`,
		`{"compare":[{"key":"j","target":"field","path":"/a/0","op":">=","value":2.5}],"success":[{"delete":{"prefix":"tmp.","limit":10}}]}`,
		`{"ttl":"10s"}`, `{"ids":[1,"2"]}`, `{"success":[{"put":{"key":"a","value":1,"ttl":1.5}}]}`, `{"TTL":5,"Ttl":"x"}`, `{"prefix":"a","after_revision":-1}`,
	}
	for i, s := range seeds {
		f.Add(uint8(i), []byte(s))
	}
	dec := testDecoder()
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		ep := subjects.Endpoints[int(which)%len(subjects.Endpoints)]
		var cmd any
		var e *schema.Error
		switch ep {
		case subjects.LeaseGrant:
			var g *fsm.Grant
			if g, e = dec.Grant(data); e == nil {
				if g.TTL < 1 || g.ID < 0 || g.ID > schema.MaxLeaseID || (g.Metadata != nil && g.Metadata[0] != '{') {
					t.Fatalf("grant %+v from %q", g, data)
				}
				cmd = g
			}
		case subjects.LeaseKeepAlive:
			cmd, e = dec.KeepAlive(data)
		case subjects.LeaseKeepAliveMany:
			cmd, e = dec.KeepAliveMany(data)
		case subjects.KVChanges:
			_, e = dec.Changes(data)
		case subjects.LeaseRevoke:
			cmd, e = dec.Revoke(data)
		case subjects.LeaseInfo:
			_, e = dec.LeaseInfo(data)
		case subjects.LeaseList:
			_, e = dec.LeaseList(data)
		case subjects.KVPut:
			var p *fsm.Put
			if p, _, e = dec.Put(data); e == nil {
				if subjects.ValidateKey(p.Key, dec.maxKeyBytes) != nil || len(p.Value) == 0 || len(p.Value) > dec.maxValueBytes || (p.Lease != 0 && p.TTL != 0) {
					t.Fatalf("put %+v from %q", p, data)
				}
				cmd = p
			}
		case subjects.KVGet:
			_, e = dec.Get(data)
		case subjects.KVHistory:
			var h HistoryRequest
			if h, e = dec.History(data); e == nil {
				if h.Query.Limit < 1 || h.Query.Limit > schema.MaxHistoryLimit || h.Query.From < 0 || h.Query.To < 0 || h.Query.After < 0 || (h.Query.To != 0 && h.Query.From > h.Query.To) {
					t.Fatalf("history %+v from %q", h.Query, data)
				}
			}
		case subjects.KVCompact:
			var c *fsm.Compact
			if c, e = dec.Compact(data); e == nil {
				if c.Revision < 1 {
					t.Fatalf("compact %+v from %q", c, data)
				}
				cmd = c
			}
		case subjects.KVDelete:
			cmd, _, e = dec.Delete(data)
		case subjects.KVTxn:
			var txn *fsm.Txn
			if txn, _, e = dec.Txn(data); e == nil {
				if len(txn.Compare) > dec.maxTxnCompares || len(txn.Success) > dec.maxTxnOps || len(txn.Failure) > dec.maxTxnOps {
					t.Fatalf("txn over its limits from %q", data)
				}
				cmd = txn
			}
		}
		// What encoding/json refuses in a whole JSON value, the walk that
		// describes it finds.
		if json.Valid(data) {
			for _, v := range []any{&schema.KVTxnRequest{}, &schema.LeaseGrantRequest{}, &schema.KVGetRequest{}, &schema.LeaseKeepAliveManyRequest{}} {
				if strictUnmarshal(data, v) != nil && findRefusedValue(data, reflect.TypeOf(v)) == nil {
					t.Fatalf("%T %q: encoding/json refuses it, the walk finds nothing to describe", v, data)
				}
			}
		}
		if e != nil {
			if e.Code != 400 && e.Code != 413 {
				t.Fatalf("%s %q: error %v, want 400 or 413", ep, data, e)
			}
			if p := userFacingProblem(e.Description); p != "" {
				t.Fatalf("%s %q: description %q %s", ep, data, e.Description, p)
			}
			return
		}
		if cmd == nil {
			return
		}
		enc, err := fsm.Encode(42, cmd)
		if err != nil {
			t.Fatal(err)
		}
		back, err := fsm.Decode(enc)
		if err != nil {
			t.Fatalf("decode of encoded %T: %v", cmd, err)
		}
		again, _ := fsm.Encode(42, back.Body)
		if !bytes.Equal(enc, again) {
			t.Fatalf("%T does not survive the log encoding", cmd)
		}
	})
}
