package tests

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// Key ranges and a put's content type and metadata, black-box: P.kv.get,
// P.kv.delete and P.kv.changes with range_start/range_end against the real
// binary, the token-aware spelling, bad input; content_type and metadata
// through put, get (now and at a revision), history, watch events, the
// change log and transactions; and the CLI's flags for both. Every reply
// is checked against its JSON Schema by client.raw.

// keyNames lists the keys of records, in order.
func keyNames(kvs []schema.KeyValue) []string {
	out := []string{}
	for _, kv := range kvs {
		out = append(out, kv.Key)
	}
	return out
}

// changes reads P.kv.changes, which must succeed.
func (c *client) changes(req map[string]any) schema.KVChangesReply {
	c.t.Helper()
	var r schema.KVChangesReply
	c.ok(subjects.KVChanges, req, &r)
	return r
}

// eventKeys lists the events as "type key@revision".
func eventKeys(es []schema.Event) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s %s@%d", e.Type, e.Key, e.Revision))
	}
	return out
}

// A range is byte-wise and half-open: [svc., svc/) is every key under
// svc. and nothing else, as the prefix "svc." is, while the prefix "svc"
// also matches svcx.a (and the key svc itself). get, delete and changes
// take it, get also at a past revision and page by page; without
// range_end it runs to the end of the keyspace.
func TestRangeGetDeleteChanges(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	for i, k := range []string{"sv.x", "svc", "svc.a", "svc.b.c", "svc.d", "svcx.a", "svd"} {
		c.put(k, i, 0)
	}
	r0 := c.revision()
	under := []string{"svc.a", "svc.b.c", "svc.d"}

	for _, tc := range []struct {
		req  map[string]any
		want []string
	}{
		{map[string]any{"range_start": "svc.", "range_end": "svc/"}, under}, // the token-aware range
		{map[string]any{"prefix": "svc."}, under},                           // the token-aware prefix
		{map[string]any{"prefix": "svc"}, []string{"svc", "svc.a", "svc.b.c", "svc.d", "svcx.a"}},
		{map[string]any{"range_start": "svc", "range_end": "svd"}, []string{"svc", "svc.a", "svc.b.c", "svc.d", "svcx.a"}},
		{map[string]any{"range_start": "svc.b.c", "range_end": "svcx.a"}, []string{"svc.b.c", "svc.d"}}, // start in, end out
		{map[string]any{"range_start": "svcx"}, []string{"svcx.a", "svd"}},                              // to the end
		{map[string]any{"range_start": ""}, []string{"sv.x", "svc", "svc.a", "svc.b.c", "svc.d", "svcx.a", "svd"}},
		{map[string]any{"range_start": "svc.e", "range_end": "svc/"}, []string{}},
	} {
		g := c.get(tc.req)
		if !slices.Equal(keyNames(g.KVs), tc.want) || g.Count != int64(len(tc.want)) || g.More || g.Revision != r0 {
			t.Fatalf("get %v: %q count %d more %t at %d, want %q at %d", tc.req, keyNames(g.KVs), g.Count, g.More, g.Revision, tc.want, r0)
		}
	}
	// Pages of a range, keys only and counting.
	p := c.get(map[string]any{"range_start": "svc.", "range_end": "svc/", "limit": 2, "keys_only": true})
	if !slices.Equal(keyNames(p.KVs), under[:2]) || !p.More || p.Count != 3 || p.KVs[0].Value != nil {
		t.Fatalf("a range's first page of 2, keys only: %+v", p)
	}
	p = c.get(map[string]any{"range_start": "svc.", "range_end": "svc/", "after": "svc.b.c"})
	if !slices.Equal(keyNames(p.KVs), under[2:]) || p.More || p.Count != 1 {
		t.Fatalf("a range after svc.b.c: %+v", p)
	}
	if g := c.get(map[string]any{"range_start": "svc.", "range_end": "svc/", "count_only": true}); g.Count != 3 || len(g.KVs) != 0 {
		t.Fatalf("a range, count only: %+v", g)
	}

	// Changes after r0 inside and outside the range.
	c.put("svc.a", "again", 0)
	c.put("svcx.a", "again", 0)
	c.put("svc.c", "new", 0)
	c.ok(subjects.KVDelete, map[string]any{"key": "svc.d"}, nil)
	c.put("svd", "again", 0)
	r1 := c.revision()
	// At r0, and paged at r0, the range is as it was.
	at := c.get(map[string]any{"range_start": "svc.", "range_end": "svc/", "revision": r0})
	if !slices.Equal(keyNames(at.KVs), under) || at.Revision != r0 || string(at.KVs[0].Value) != "2" || at.KVs[0].RemainingMS != nil {
		t.Fatalf("the range at %d: %+v", r0, at)
	}
	if pg := c.get(map[string]any{"range_start": "svc.", "range_end": "svc/", "revision": r0, "after": "svc.a", "limit": 1}); !slices.Equal(keyNames(pg.KVs), []string{"svc.b.c"}) || !pg.More || pg.Count != 2 {
		t.Fatalf("the range at %d after svc.a: %+v", r0, pg)
	}
	if now := c.get(map[string]any{"range_start": "svc.", "range_end": "svc/"}); !slices.Equal(keyNames(now.KVs), []string{"svc.a", "svc.b.c", "svc.c"}) {
		t.Fatalf("the range now: %+v", now)
	}

	// The change log of a range is the prefix svc.'s, event for event; the
	// prefix svc has svcx.a's change too.
	rangeCh := c.raw(subjects.KVChanges, map[string]any{"range_start": "svc.", "range_end": "svc/", "after_revision": r0})
	prefixCh := c.raw(subjects.KVChanges, map[string]any{"prefix": "svc.", "after_revision": r0})
	if rangeCh.err != nil || string(rangeCh.data) != string(prefixCh.data) {
		t.Fatalf("changes of [svc., svc/) %s %v differ from those of the prefix svc. %s", rangeCh.data, rangeCh.err, prefixCh.data)
	}
	var rc schema.KVChangesReply
	mustUnmarshal(t, rangeCh.data, &rc)
	wantCh := []string{fmt.Sprintf("put svc.a@%d", r0+1), fmt.Sprintf("put svc.c@%d", r0+3), fmt.Sprintf("delete svc.d@%d", r0+4)}
	if !slices.Equal(eventKeys(rc.Events), wantCh) || rc.More {
		t.Fatalf("changes of [svc., svc/) after %d: %q, want %q", r0, eventKeys(rc.Events), wantCh)
	}
	if ch := c.changes(map[string]any{"prefix": "svc", "after_revision": r0}); len(ch.Events) != 4 || ch.Events[1].Key != "svcx.a" {
		t.Fatalf("changes of the prefix svc: %q", eventKeys(ch.Events))
	}
	if ch := c.changes(map[string]any{"range_start": "svcx", "after_revision": r0}); !slices.Equal(eventKeys(ch.Events), []string{fmt.Sprintf("put svcx.a@%d", r0+2), fmt.Sprintf("put svd@%d", r0+5)}) {
		t.Fatalf("changes from svcx to the end: %q", eventKeys(ch.Events))
	}
	// One event a page, continued from each reply's position: the same
	// events.
	var paged []schema.Event
	req := map[string]any{"range_start": "svc.", "range_end": "svc/", "after_revision": r0, "limit": 1}
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatal("paging the range's changes does not end")
		}
		ch := c.changes(req)
		if len(ch.Events) > 1 {
			t.Fatalf("a page of %d events with limit 1", len(ch.Events))
		}
		paged = append(paged, ch.Events...)
		if !ch.More {
			break
		}
		req["after_revision"], req["after_op_index"] = ch.NextRevision, ch.NextOpIndex
	}
	if !slices.Equal(eventKeys(paged), wantCh) {
		t.Fatalf("changes of the range, one a page: %q, want %q", eventKeys(paged), wantCh)
	}

	// Bad input: a clear 400 on each endpoint, and nothing changes.
	fullBefore, _ := c.fullState()
	changesBefore := c.raw(subjects.KVChanges, map[string]any{"prefix": "", "after_revision": 0})
	bad := []struct {
		body, says string
	}{
		{`"range_start":"svc/","range_end":"svc."`, "range_end"},
		{`"range_start":"svc.","range_end":"svc."`, "range_end"},
		{`"range_start":"b","range_end":""`, "range_end"},
		{`"range_end":"svc/"`, "range_start"},
		{`"key":"svc.a","range_start":"svc."`, "range_start"},
		{`"prefix":"svc.","range_start":"svc."`, "range_start"},
		{`"range_start":"svc a"`, "range_start"},
		{`"range_start":"svc.","range_end":"svc\u0001"`, "range_end"},
		{`"range_start":"` + strings.Repeat("k", 1025) + `"`, "range_start"},
		{`"range_start":5`, "range_start"},
		{`"range_start":null,"range_end":"b"`, "range_start"},
	}
	for _, b := range bad {
		for _, ep := range []subjects.Endpoint{subjects.KVGet, subjects.KVDelete, subjects.KVChanges} {
			body := "{" + b.body + "}"
			if ep == subjects.KVChanges {
				body = `{"after_revision":0,` + b.body + "}"
			}
			e := c.fails(ep, body, schema.ErrInvalidRequest)
			if e.Code != 400 || !strings.Contains(e.Description, b.says) {
				t.Errorf("%s %s: %+v, want 400 naming %s", ep, body, e, b.says)
			}
		}
	}
	// Transactions take a key or a prefix, not a range.
	for _, op := range []string{`{"get":{"range_start":"svc."}}`, `{"delete":{"range_start":"svc.","range_end":"svc/"}}`} {
		c.fails(subjects.KVTxn, `{"success":[`+op+`]}`, schema.ErrInvalidRequest)
	}
	fullAfter, _ := c.fullState()
	if fullAfter.Revision != r1 || !slices.Equal(kvLines(fullAfter.KVs), kvLines(fullBefore.KVs)) {
		t.Fatalf("refused range requests changed the state: revision %d, was %d", fullAfter.Revision, r1)
	}
	if after := c.raw(subjects.KVChanges, map[string]any{"prefix": "", "after_revision": 0}); string(after.data) != string(changesBefore.data) {
		t.Fatal("refused range requests changed the change log")
	}

	// A range delete: every key under svc. at one revision, each with its
	// watch event and previous record; svc, svcx.a and svd stay.
	w := c.watch("concord.watch.>")
	var d schema.KVDeleteReply
	c.ok(subjects.KVDelete, map[string]any{"range_start": "svc.", "range_end": "svc/", "prev_kv": true}, &d)
	if d.Deleted != 3 || d.Revision != r1+1 || !slices.Equal(keyNames(d.PrevKVs), []string{"svc.a", "svc.b.c", "svc.c"}) {
		t.Fatalf("delete [svc., svc/): %+v", d)
	}
	evs := w.waitFor(3, 30*time.Second)
	for i, e := range evs {
		if e.Type != schema.EventDelete || e.Revision != d.Revision || e.OpIndex != i || e.Key != d.PrevKVs[i].Key || e.Cause != schema.CauseDelete {
			t.Fatalf("delete event %d: %+v", i, e.Event)
		}
	}
	if g := c.get(map[string]any{"prefix": ""}); !slices.Equal(keyNames(g.KVs), []string{"sv.x", "svc", "svcx.a", "svd"}) {
		t.Fatalf("after deleting [svc., svc/): %q", keyNames(g.KVs))
	}
	// An empty range deletes nothing and takes no revision.
	c.ok(subjects.KVDelete, map[string]any{"range_start": "svc.", "range_end": "svc/"}, &d)
	if d.Deleted != 0 || d.Revision != r1+1 {
		t.Fatalf("delete of an empty range: %+v", d)
	}
	// To the end of the keyspace.
	c.ok(subjects.KVDelete, map[string]any{"range_start": "svcx"}, &d)
	if d.Deleted != 2 || d.Revision != r1+2 {
		t.Fatalf("delete [svcx, the end): %+v", d)
	}
	if g := c.get(map[string]any{"prefix": ""}); !slices.Equal(keyNames(g.KVs), []string{"sv.x", "svc"}) {
		t.Fatalf("after deleting [svcx, the end): %q", keyNames(g.KVs))
	}
	if evs := w.waitFor(5, 30*time.Second); len(evs) != 5 || evs[3].Key != "svcx.a" || evs[4].Key != "svd" || evs[4].Revision != r1+2 {
		t.Fatalf("delete events: %+v", evs)
	}
}

// A put's content_type and metadata come back unchanged from get (now and
// at its revision), history, the watch event on P.watch.<key>, kv.changes
// and a transaction's get; a transaction's put carries them too; a put
// without them clears them; bad ones are refused and change nothing.
func TestContentTypeAndMetadataRoundTrip(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	const key = "ct.k"
	w := c.watch("concord.watch." + key)
	const ct = "text/plain; charset=utf-8"
	const md = `{"owner":"ops","tags":["a","b"],"n":{"x":1.5}}`
	type extra struct{ ct, md string }
	check := func(what, gotCT string, gotMD json.RawMessage, want extra) {
		t.Helper()
		if gotCT != want.ct || string(gotMD) != want.md {
			t.Fatalf("%s: content_type %q metadata %s, want %q and %s", what, gotCT, gotMD, want.ct, want.md)
		}
	}
	full, none := extra{ct, md}, extra{}

	var p schema.KVPutReply
	// Metadata as the client spelled it, with spaces: stored compact.
	c.ok(subjects.KVPut, `{"key":"ct.k","value":"v1","content_type":"text/plain; charset=utf-8","metadata":{"owner": "ops", "tags": ["a", "b"], "n": {"x": 1.5}}}`, &p)
	r1 := p.Revision
	g := c.get(map[string]any{"key": key})
	check("get", g.KVs[0].ContentType, g.KVs[0].Metadata, full)
	g = c.get(map[string]any{"prefix": "ct."})
	check("get of the prefix", g.KVs[0].ContentType, g.KVs[0].Metadata, full)
	g = c.get(map[string]any{"range_start": "ct.", "range_end": "ct/"})
	check("get of the range", g.KVs[0].ContentType, g.KVs[0].Metadata, full)

	// A put without them clears them: the fields are absent.
	r2 := c.put(key, "v2", 0)
	plain := c.raw(subjects.KVGet, map[string]any{"key": key})
	if strings.Contains(string(plain.data), "content_type") || strings.Contains(string(plain.data), "metadata") {
		t.Fatalf("get after a put without them: %s", plain.data)
	}
	g = c.get(map[string]any{"key": key, "revision": r1})
	check("get at the first put's revision", g.KVs[0].ContentType, g.KVs[0].Metadata, full)
	g = c.get(map[string]any{"prefix": "ct.", "revision": r1})
	check("get of the prefix at the first put's revision", g.KVs[0].ContentType, g.KVs[0].Metadata, full)

	// A transaction: one put with them, and a get that reads them back.
	var tr schema.KVTxnReply
	c.ok(subjects.KVTxn, map[string]any{"success": []any{
		map[string]any{"put": map[string]any{"key": key, "value": "v3", "content_type": "application/json", "metadata": map[string]any{"by": "txn"}}},
		map[string]any{"get": map[string]any{"key": key}},
	}}, &tr)
	txnExtra := extra{"application/json", `{"by":"txn"}`}
	if !tr.Succeeded || len(tr.Responses) != 2 || tr.Responses[1].Get == nil || len(tr.Responses[1].Get.KVs) != 1 {
		t.Fatalf("txn: %+v", tr)
	}
	check("the txn's get", tr.Responses[1].Get.KVs[0].ContentType, tr.Responses[1].Get.KVs[0].Metadata, txnExtra)
	g = c.get(map[string]any{"key": key})
	check("get after the txn", g.KVs[0].ContentType, g.KVs[0].Metadata, txnExtra)
	// A delete event carries neither.
	var d schema.KVDeleteReply
	c.ok(subjects.KVDelete, map[string]any{"key": key, "prev_kv": true}, &d)
	check("the delete's previous record", d.PrevKVs[0].ContentType, d.PrevKVs[0].Metadata, txnExtra)
	// One of the two alone.
	c.ok(subjects.KVPut, map[string]any{"key": key, "value": "v4", "content_type": "x"}, &p)
	r4 := p.Revision

	want := []extra{full, none, txnExtra, none, {"x", ""}}
	wantRevs := []int64{r1, r2, tr.Revision, d.Revision, r4}
	events := w.waitFor(5, 30*time.Second)
	h := c.history(map[string]any{"key": key})
	ch := c.changes(map[string]any{"key": key, "after_revision": 0})
	if len(events) != 5 || len(h.Records) != 5 || len(ch.Events) != 5 {
		t.Fatalf("%d watch events, %d history records, %d changes; want 5 each", len(events), len(h.Records), len(ch.Events))
	}
	for i := range want {
		for _, src := range []struct {
			name string
			e    schema.Event
		}{{"watch event", events[i].Event}, {"history record", h.Records[i]}, {"change", ch.Events[i]}} {
			if src.e.Revision != wantRevs[i] {
				t.Fatalf("%s %d at revision %d, want %d", src.name, i, src.e.Revision, wantRevs[i])
			}
			check(fmt.Sprintf("%s %d", src.name, i), src.e.ContentType, src.e.Metadata, want[i])
		}
		if b1, _ := json.Marshal(events[i].Event); string(b1) != string(mustMarshal(t, h.Records[i])) {
			t.Fatalf("history record %d differs from its watch event: %s", i, b1)
		}
	}

	// The limits: 256 bytes of content type and 4 KiB of metadata pass.
	longCT := strings.Repeat("t", 256)
	bigMD := `{"m":"` + strings.Repeat("m", 4096-8) + `"}`
	c.ok(subjects.KVPut, `{"key":"ct.k","value":5,"content_type":"`+longCT+`","metadata":`+bigMD+`}`, &p)
	atLimit := c.raw(subjects.KVGet, map[string]any{"key": key})
	g = c.get(map[string]any{"key": key})
	check("get at the limits", g.KVs[0].ContentType, g.KVs[0].Metadata, extra{longCT, bigMD})

	// Bad ones: 400 (413 for metadata over 4 KiB), and nothing changes.
	historyBefore := c.raw(subjects.KVHistory, map[string]any{"key": key})
	for _, tc := range []struct {
		extra, name, says string
	}{
		{`"content_type":"` + longCT + `t"`, schema.ErrInvalidRequest, "content_type"},
		{`"content_type":"text/plain\n"`, schema.ErrInvalidRequest, "content_type"},
		{`"content_type":"text/\u00e9"`, schema.ErrInvalidRequest, "content_type"},
		{`"content_type":"a\u007fb"`, schema.ErrInvalidRequest, "content_type"},
		{`"content_type":5`, schema.ErrInvalidRequest, "content_type"},
		{`"metadata":[1]`, schema.ErrInvalidRequest, "metadata"},
		{`"metadata":"owner"`, schema.ErrInvalidRequest, "metadata"},
		{`"metadata":7`, schema.ErrInvalidRequest, "metadata"},
		{`"metadata":true`, schema.ErrInvalidRequest, "metadata"},
		{`"metadata":{"m":"` + strings.Repeat("m", 4096-7) + `"}`, schema.ErrTooLarge, "metadata"},
		{`"metadata":{"a":1`, schema.ErrInvalidRequest, ""},
	} {
		e := c.fails(subjects.KVPut, `{"key":"ct.k","value":6,`+tc.extra+`}`, tc.name)
		if !strings.Contains(e.Description, tc.says) {
			t.Errorf("put with %s: %q does not name %s", tc.extra, e.Description, tc.says)
		}
		e = c.fails(subjects.KVTxn, `{"success":[{"put":{"key":"ct.k","value":6,`+tc.extra+`}}]}`, tc.name)
		if !strings.Contains(e.Description, tc.says) {
			t.Errorf("txn put with %s: %q does not name %s", tc.extra, e.Description, tc.says)
		}
	}
	if r := c.raw(subjects.KVGet, map[string]any{"key": key}); string(r.data) != string(atLimit.data) {
		t.Fatalf("refused puts changed the key: %s, was %s", r.data, atLimit.data)
	}
	if r := c.raw(subjects.KVHistory, map[string]any{"key": key}); string(r.data) != string(historyBefore.data) {
		t.Fatalf("refused puts changed the history: %s", r.data)
	}
	// No event between the put at the limits and the next put: events
	// leave in revision order, so one from a refused put would come first.
	last := c.put(key, "v7", 0)
	evs := w.waitFor(7, 30*time.Second)
	if len(evs) != 7 || evs[5].Revision != p.Revision || evs[6].Revision != last {
		t.Fatalf("watch events after the refused puts: %q", eventKeys(seenEvents(evs)))
	}
}

// seenEvents drops the arrival times.
func seenEvents(evs []seenEvent) []schema.Event {
	out := []schema.Event{}
	for _, e := range evs {
		out = append(out, e.Event)
	}
	return out
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The CLI: kv get and kv del with --from/--to (and --rev), kv put with
// --content-type and --metadata, what kv get, kv history and --json
// print, and the exit codes.
func TestRangeAndContentTypeCLI(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	cl := newCLI(t, n.natsURL)
	for _, k := range []string{"svc.a", "svc.b", "svcx.a", "svd"} {
		cl.ok("kv", "put", k, `"`+k+`"`) // revisions 1-4
	}
	if out := cl.ok("kv", "get", "--from", "svc.", "--to", "svc/"); out != "svc.a \"svc.a\"\nsvc.b \"svc.b\"\n" {
		t.Fatalf("kv get --from svc. --to svc/: %q", out)
	}
	if out := cl.ok("kv", "get", "svc", "--prefix", "--keys-only"); out != "svc.a\nsvc.b\nsvcx.a\n" {
		t.Fatalf("kv get svc --prefix: %q", out)
	}
	if out := cl.ok("kv", "get", "--from", "svcx", "--keys-only"); out != "svcx.a\nsvd\n" {
		t.Fatalf("kv get --from svcx: %q", out)
	}
	if out := cl.ok("kv", "get", "--from", "svc.", "--to", "svc/", "--rev", "1"); out != "svc.a \"svc.a\"\n" {
		t.Fatalf("kv get --from --to --rev 1: %q", out)
	}
	r := cl.expect(cliOK, "kv", "get", "--from", "svc.", "--to", "svc/", "--limit", "1")
	if r.stdout != "svc.a \"svc.a\"\n" || !strings.Contains(r.stderr, "continue with --after svc.a") {
		t.Fatalf("kv get --from --to --limit 1: %v", r)
	}
	if out := cl.ok("kv", "get", "--from", "svc.", "--to", "svc/", "--after", "svc.a"); out != "svc.b \"svc.b\"\n" {
		t.Fatalf("kv get --from --to --after: %q", out)
	}
	if out := cl.ok("kv", "get", "--from", "svc.", "--to", "svc/", "--count"); out != "2\n" {
		t.Fatalf("kv get --from --to --count: %q", out)
	}
	// An empty range is exit 0, as an empty prefix is.
	if out := cl.ok("kv", "get", "--from", "svc.c", "--to", "svc/"); out != "" {
		t.Fatalf("kv get of an empty range: %q", out)
	}
	var g schema.KVGetReply
	cl.jsonOut(cliOK, "kv.get.reply", &g, "kv", "get", "--from", "svc.", "--to", "svc/")
	if !slices.Equal(keyNames(g.KVs), []string{"svc.a", "svc.b"}) || g.Revision != 4 {
		t.Fatalf("kv get --from --to --json: %+v", g)
	}
	// Refused by the server (exit 1, its words), or by the CLI (exit 2).
	if r := cl.expect(cliError, "kv", "get", "--from", "svc/", "--to", "svc."); !strings.Contains(r.stderr, "range_end") {
		t.Fatalf("kv get of an inverted range: %v", r)
	}
	cl.jsonOut(cliError, "error", nil, "kv", "get", "--from", "b", "--to", "a")
	cl.expect(cliError, "kv", "del", "--from", "svc/", "--to", "svc.")
	cl.expect(cliError, "kv", "get", "--from", "a b")
	cl.expect(cliUsage, "kv", "get", "--to", "svc/")
	cl.expect(cliUsage, "kv", "get", "svc.a", "--from", "svc.")
	cl.expect(cliUsage, "kv", "get", "svc.", "--prefix", "--from", "svc.")
	cl.expect(cliUsage, "kv", "get")
	cl.expect(cliUsage, "kv", "del", "--to", "svc/")
	cl.expect(cliUsage, "kv", "del")
	cl.expect(cliError, "kv", "get", "--from", "svc.", "--rev", "99") // a revision not yet written
	if out := cl.ok("kv", "get", "--from", "", "--keys-only"); out != "svc.a\nsvc.b\nsvcx.a\nsvd\n" {
		t.Fatalf("refused commands changed the keys: %q", out)
	}

	// Content type and metadata.
	if out := cl.ok("kv", "put", "cfg.db", `{"host":"db1"}`, "--content-type", "application/json", "--metadata", `{"owner": "ops"}`); out != "revision 5\n" {
		t.Fatalf("kv put --content-type --metadata: %q", out)
	}
	want := "cfg.db {\"host\":\"db1\"}\n  content_type: application/json\n  metadata: {\"owner\":\"ops\"}\n"
	if out := cl.ok("kv", "get", "cfg.db"); out != want {
		t.Fatalf("kv get of a key with a content type and metadata: %q, want %q", out, want)
	}
	cl.jsonOut(cliOK, "kv.get.reply", &g, "kv", "get", "cfg.db")
	if g.KVs[0].ContentType != "application/json" || string(g.KVs[0].Metadata) != `{"owner":"ops"}` {
		t.Fatalf("kv get --json: %+v", g.KVs[0])
	}
	cl.ok("kv", "put", "cfg.db", `{"host":"db2"}`, "--content-type", "text/plain; charset=utf-8") // clears the metadata
	if out := cl.ok("kv", "get", "cfg.db"); out != "cfg.db {\"host\":\"db2\"}\n  content_type: text/plain; charset=utf-8\n" {
		t.Fatalf("kv get after a put with a content type alone: %q", out)
	}
	if out := cl.ok("kv", "get", "cfg.db", "--rev", "5"); out != want {
		t.Fatalf("kv get --rev 5: %q", out)
	}
	cl.ok("kv", "put", "cfg.db", `{"host":"db3"}`) // clears both
	if out := cl.ok("kv", "get", "cfg.db"); out != "cfg.db {\"host\":\"db3\"}\n" {
		t.Fatalf("kv get after a plain put: %q", out)
	}
	wantHistory := "revision=5 op_index=0 type=put key=cfg.db cause=put content_type=application/json metadata={\"owner\":\"ops\"} value={\"host\":\"db1\"}\n" +
		"revision=6 op_index=0 type=put key=cfg.db cause=put content_type=\"text/plain; charset=utf-8\" value={\"host\":\"db2\"}\n" +
		"revision=7 op_index=0 type=put key=cfg.db cause=put value={\"host\":\"db3\"}\n"
	if out := cl.ok("kv", "history", "cfg.db"); out != wantHistory {
		t.Fatalf("kv history: %q, want %q", out, wantHistory)
	}
	var p schema.KVPutReply
	cl.jsonOut(cliOK, "kv.put.reply", &p, "kv", "put", "cfg.db", "4", "--metadata", `{}`, "--prev")
	if p.PrevKV == nil || p.PrevKV.Metadata != nil || p.Revision != 8 {
		t.Fatalf("kv put --metadata {} --prev --json: %+v", p)
	}
	if r := cl.expect(cliError, "kv", "put", "cfg.db", "5", "--metadata", "[1]"); !strings.Contains(r.stderr, "metadata must be a JSON object") {
		t.Fatalf("kv put --metadata [1]: %v", r)
	}
	cl.expect(cliError, "kv", "put", "cfg.db", "5", "--metadata", `{"m":"`+strings.Repeat("m", 4096)+`"}`)
	cl.expect(cliError, "kv", "put", "cfg.db", "5", "--content-type", strings.Repeat("t", 257))
	cl.expect(cliError, "kv", "put", "cfg.db", "5", "--content-type", "a\tb")
	cl.expect(cliUsage, "kv", "put", "cfg.db", "5", "--metadata", "{")
	cl.expect(cliUsage, "kv", "put", "cfg.db", "5", "--metadata", "")
	if out := cl.ok("kv", "get", "cfg.db"); out != "cfg.db 4\n  metadata: {}\n" {
		t.Fatalf("refused puts changed cfg.db: %q", out)
	}

	// kv del --from --to: the keys under svc. only.
	if out := cl.ok("kv", "del", "--from", "svc.", "--to", "svc/", "--prev"); out != "deleted 2 at revision 9\nsvc.a \"svc.a\"\nsvc.b \"svc.b\"\n" {
		t.Fatalf("kv del --from svc. --to svc/ --prev: %q", out)
	}
	var d schema.KVDeleteReply
	cl.jsonOut(cliOK, "kv.delete.reply", &d, "kv", "del", "--from", "svd")
	if d.Deleted != 1 || d.Revision != 10 {
		t.Fatalf("kv del --from svd --json: %+v", d)
	}
	if out := cl.ok("kv", "get", "--from", "", "--keys-only"); out != "cfg.db\nsvcx.a\n" {
		t.Fatalf("after the range deletes: %q", out)
	}
	// The usage text shows the forms.
	help := cl.ok("help")
	for _, s := range []string{"concord kv get --from A [--to B]", "concord kv del --from A [--to B]", "[--content-type T] [--metadata JSON]"} {
		if !strings.Contains(help, s) {
			t.Errorf("concord help lacks %q", s)
		}
	}
}
