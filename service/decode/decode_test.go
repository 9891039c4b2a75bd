package decode

import (
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
)

// The decoder enforces the limits of the configuration it was built from,
// and nothing else: each limit lets its boundary through and refuses one
// beyond it. No Service, NATS or Raft is needed.
func TestDecoderTakesItsLimitsFromTheConfig(t *testing.T) {
	d := New(Limits{MinTTL: 5, MaxKeyBytes: 8, MaxValueBytes: 16, MaxMetadataBytes: 16,
		MaxTxnCompares: 2, MaxTxnOps: 2, MaxTxnBytes: 300}, 64<<10)

	grant := func(b []byte) *schema.Error { _, e := d.Grant(b); return e }
	keepAlive := func(b []byte) *schema.Error { _, e := d.KeepAlive(b); return e }
	put := func(b []byte) *schema.Error { _, _, e := d.Put(b); return e }
	get := func(b []byte) *schema.Error { _, e := d.Get(b); return e }
	txn := func(b []byte) *schema.Error { _, _, e := d.Txn(b); return e }
	changes := func(b []byte) *schema.Error { _, e := d.Changes(b); return e }
	history := func(b []byte) *schema.Error { _, e := d.History(b); return e }
	compact := func(b []byte) *schema.Error { _, e := d.Compact(b); return e }
	cases := []struct {
		body string
		fn   func([]byte) *schema.Error
		want string // "" accepts
	}{
		{`{"ttl":5}`, grant, ""},
		{`{"key":"a","from_revision":5,"to_revision":3}`, history, `from_revision 5 is after to_revision 3`},
		{`{"key":"a","from_revision":5}`, history, ""},
		{`{"key":"a","from_revision":5,"to_revision":5}`, history, ""},
		{`{"key":"a","after_revision":-1}`, history, `after_revision must be from 0 to 9007199254740991, not -1`},
		{`{"key":"a","limit":1001}`, history, `limit must be from 1 to 1000, not 1001`},
		{`{"revision":0}`, compact, `revision must be 1 or more, not 0`},
		{`{"revision":9007199254740992}`, compact, `revision must be from 0 to 9007199254740991, not 9007199254740992`},
		{`{"key":"a","revision":-2}`, get, `revision must be from 0 to 9007199254740991, not -2`},
		{`{"range_start":"b","range_end":"a"}`, get, `range_end "a" must sort after range_start "b" (byte-wise); leave range_end out to read to the end of the keyspace`},
		{`{"range_start":"b","range_end":"b"}`, get, `range_end "b" must sort after range_start "b" (byte-wise); leave range_end out to read to the end of the keyspace`},
		{`{"range_end":"b"}`, get, `range_end needs range_start: a range is [range_start, range_end)`},
		{`{"key":"a","value":1,"content_type":"a\u0001"}`, put, `content_type must be printable ASCII (such as application/json), without control characters`},
		{`{"key":"a","value":1,"metadata":[1]}`, put, `metadata must be a JSON object, not an array`},
		{`{"key":"a","value":1,"metadata":null}`, put, ""},
		{`{"success":[{"put":{"key":"a","value":1,"metadata":true}}]}`, txn, `success[0].put.metadata must be a JSON object, not true`},
		{`{"key":"a","range_start":"a"}`, get, `give one of key, prefix and range_start, not several`},
		{`{"range_start":"a\u0007"}`, get, `range_start must be printable ASCII without spaces (0x21-0x7E)`},
		{`{"ttl":4}`, grant, `ttl must be at least 5 seconds, not 4`},
		{`{}`, grant, `ttl is required: the lease's time to live in whole seconds, at least 5 seconds`},
		{`{"id":1,"ttl":4}`, keepAlive, `ttl must be at least 5 seconds, not 4`},
		{`{"ttl":5,"metadata":{"a":"01234567"}}`, grant, ""}, // 16 bytes
		{`{"ttl":5,"metadata":{"a":"012345678"}}`, grant, `metadata is 17 bytes, more than the 16 allowed`},
		{`{"key":"abcdefgh","value":1}`, put, ""},
		{`{"key":"abcdefghi","value":1}`, put, `key is 9 bytes long, more than the 8 allowed`},
		{`{"prefix":"abcdefghi"}`, get, `prefix is 9 bytes long, more than the 8 allowed`},
		{`{"prefix":"abcdefghi","after_revision":0}`, changes, `prefix is 9 bytes long, more than the 8 allowed`},
		{`{"key":"a","value":"0123456789abcd"}`, put, ""}, // 16 bytes
		{`{"key":"a","value":"0123456789abcde"}`, put, `value is 17 bytes, more than the 16 allowed`},
		{`{"key":"a","value":1,"ttl":4}`, put, `ttl must be at least 5 seconds, not 4`},
		{`{"compare":[{"key":"a","target":"version","op":"==","value":1},{"key":"b","target":"version","op":"==","value":1}]}`, txn, ""},
		{`{"compare":[{"key":"a","target":"version","op":"==","value":1},{"key":"b","target":"version","op":"==","value":1},{"key":"c","target":"version","op":"==","value":1}]}`, txn, `compare has 3 compares, more than the 2 allowed`},
		{`{"success":[{"get":{"key":"a"}},{"get":{"key":"b"}}],"failure":[{"get":{"key":"a"}},{"get":{"key":"b"}}]}`, txn, ""},
		{`{"failure":[{"get":{"key":"a"}},{"get":{"key":"b"}},{"get":{"key":"c"}}]}`, txn, `failure has 3 operations, more than the 2 allowed`},
		{`{"success":[{"put":{"key":"abcdefghi","value":1}}]}`, txn, `success[0].put.key is 9 bytes long, more than the 8 allowed`},
		{`{"success":[{"put":{"key":"a","value":"0123456789abcde"}}]}`, txn, `success[0].put.value is 17 bytes, more than the 16 allowed`},
		{`{"success":[{"put":{"key":"a","value":1,"ttl":4}}]}`, txn, `success[0].put.ttl must be at least 5 seconds, not 4`},
		{padTo(`{"success":[{"put":{"key":"a","value":1}}]}`, 300), txn, ""},
		{padTo(`{"success":[{"put":{"key":"a","value":1}}]}`, 301), txn, `the transaction is 301 bytes, more than the 300 allowed`},
	}
	for _, c := range cases {
		e := c.fn([]byte(c.body))
		switch {
		case c.want == "" && e != nil:
			t.Errorf("%s: refused: %v", shorten(c.body), e)
		case c.want != "" && e == nil:
			t.Errorf("%s: accepted, want %q", shorten(c.body), c.want)
		case c.want != "" && e.Description != c.want:
			t.Errorf("%s:\n got  %s\n want %s", shorten(c.body), e.Description, c.want)
		}
	}

	// A transaction's reads share what a reply may carry: the max payload
	// less the headroom, split between its gets.
	tx, _, e := d.Txn([]byte(`{"success":[{"get":{"key":"a"}}],"failure":[{"get":{"key":"b"}}]}`))
	if e != nil {
		t.Fatal(e)
	}
	if want := (64<<10 - ReplyHeadroom) / 2; tx.Success[0].Get.MaxBytes != want || tx.Failure[0].Get.MaxBytes != want {
		t.Errorf("each get may read %d and %d bytes, want %d", tx.Success[0].Get.MaxBytes, tx.Failure[0].Get.MaxBytes, want)
	}
}

// padTo pads a JSON body with trailing white space to n bytes.
func padTo(body string, n int) string { return body + strings.Repeat(" ", n-len(body)) }

// The fixed limits hold whatever the configuration says.
func TestDecoderFixedLimits(t *testing.T) {
	d := testDecoder()
	ids := func(n int) string { return `{"ids":[` + strings.TrimSuffix(strings.Repeat("1,", n), ",") + `]}` }
	if _, e := d.KeepAliveMany([]byte(ids(schema.MaxKeepAliveMany))); e != nil {
		t.Errorf("%d ids: %v", schema.MaxKeepAliveMany, e)
	}
	if _, e := d.KeepAliveMany([]byte(ids(schema.MaxKeepAliveMany + 1))); e == nil {
		t.Errorf("%d ids accepted", schema.MaxKeepAliveMany+1)
	}
	l, e := d.LeaseList([]byte(`{}`))
	if e != nil || l.Limit != schema.DefaultListLimit {
		t.Errorf("list without a limit: %+v, %v; want limit %d", l, e, schema.DefaultListLimit)
	}
	g, e := d.Get([]byte(`{"prefix":""}`))
	if e != nil || g.Query.Limit != schema.DefaultListLimit {
		t.Errorf("get without a limit: %+v, %v; want limit %d", g.Query, e, schema.DefaultListLimit)
	}
	h, e := d.History([]byte(`{"key":"a"}`))
	if e != nil || h.Query.Limit != schema.DefaultHistoryLimit {
		t.Errorf("history without a limit: %+v, %v; want limit %d", h.Query, e, schema.DefaultHistoryLimit)
	}
	c, e := d.Changes([]byte(`{"prefix":"","after_revision":0}`))
	if e != nil || c.Limit != schema.DefaultChangesLimit {
		t.Errorf("changes without a limit: %+v, %v; want limit %d", c, e, schema.DefaultChangesLimit)
	}
	tx, _, e := d.Txn([]byte(`{"success":[{"get":{"prefix":""}},{"delete":{"prefix":""}}]}`))
	if e != nil || tx.Success[0].Get.Limit != schema.MaxTxnPrefixLimit || tx.Success[1].Delete.Limit != schema.MaxTxnPrefixLimit {
		t.Errorf("a transaction's prefix get and delete without a limit: %v; want limit %d", e, schema.MaxTxnPrefixLimit)
	}
	if _, e := d.Grant([]byte(`{"ttl":3153600000}`)); e != nil {
		t.Errorf("the longest ttl: %v", e)
	}
	if _, e := d.Revoke([]byte(`{"id":9007199254740991}`)); e != nil {
		t.Errorf("the largest lease id: %v", e)
	}
	if _, e := d.LeaseInfo([]byte(`{"id":9007199254740992}`)); e == nil {
		t.Errorf("a lease id beyond the largest accepted")
	}
}
