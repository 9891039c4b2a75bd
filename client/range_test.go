package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

// keysOf lists the keys of a read, in order.
func keysOf(kvs []schema.KeyValue) []string {
	out := []string{}
	for _, kv := range kvs {
		out = append(out, kv.Key)
	}
	return out
}

// now reads the current revision.
func now(t *testing.T, c *client.Client) int64 {
	t.Helper()
	g, err := c.Get(context.Background(), schema.KVGetRequest{Prefix: client.Ptr(""), CountOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	return g.Revision
}

// GetRange and DeleteRange select the byte-wise half-open range [start,
// end), end "" meaning to the end of the keyspace: [svc., svc/) is every
// key under svc. and no other, where the prefix svc also matches svcx.a.
// GetRange takes AtRevision and AfterKey; an empty or inverted range and
// a bound that is no key's bytes are refused and change nothing.
func TestGetRangeAndDeleteRange(t *testing.T) {
	c := connect(t)
	ctx := context.Background()
	for i, k := range []string{"t.rg.svc.a", "t.rg.svc.b", "t.rg.svc.c.x", "t.rg.svcx.a", "t.rg.svd"} {
		put(t, c, k, fmt.Sprint(i))
	}
	r0 := now(t, c)

	for _, tc := range []struct {
		start, end string
		want       []string
	}{
		{"t.rg.svc.", "t.rg.svc/", []string{"t.rg.svc.a", "t.rg.svc.b", "t.rg.svc.c.x"}}, // the token-aware spelling
		{"t.rg.svc", "t.rg.svd", []string{"t.rg.svc.a", "t.rg.svc.b", "t.rg.svc.c.x", "t.rg.svcx.a"}},
		{"t.rg.svc.b", "t.rg.svd", []string{"t.rg.svc.b", "t.rg.svc.c.x", "t.rg.svcx.a"}}, // start included, end not
		{"t.rg.svc.b", "t.rg.svc.b.", []string{"t.rg.svc.b"}},
		{"t.rg.svc.bb", "t.rg.svc.c", []string{}},
	} {
		g, err := c.GetRange(ctx, tc.start, tc.end)
		if err != nil || !slices.Equal(keysOf(g.KVs), tc.want) || g.Count != int64(len(tc.want)) || g.More || g.Revision != r0 {
			t.Fatalf("GetRange(%q, %q): %v %+v, want %q at %d", tc.start, tc.end, err, g, tc.want, r0)
		}
	}
	// The prefix svc is byte-wise too: it matches svcx.a.
	if g, err := c.GetPrefix(ctx, "t.rg.svc"); err != nil || !slices.Equal(keysOf(g.KVs), []string{"t.rg.svc.a", "t.rg.svc.b", "t.rg.svc.c.x", "t.rg.svcx.a"}) {
		t.Fatalf("GetPrefix(t.rg.svc): %v %+v", err, g)
	}
	// Without an end: to the end of the keyspace (which holds other tests'
	// keys after these).
	g, err := c.GetRange(ctx, "t.rg.svcx", "")
	if err != nil || len(g.KVs) < 2 || !slices.Equal(keysOf(g.KVs[:2]), []string{"t.rg.svcx.a", "t.rg.svd"}) {
		t.Fatalf("GetRange(t.rg.svcx, end of the keyspace): %v %+v", err, g)
	}
	for _, kv := range g.KVs {
		if kv.Key < "t.rg.svcx" {
			t.Fatalf("GetRange(t.rg.svcx, \"\") returned %s", kv.Key)
		}
	}
	// AfterKey continues a range listing.
	if g, err := c.GetRange(ctx, "t.rg.svc.", "t.rg.svc/", client.AfterKey("t.rg.svc.a")); err != nil ||
		!slices.Equal(keysOf(g.KVs), []string{"t.rg.svc.b", "t.rg.svc.c.x"}) || g.Count != 2 {
		t.Fatalf("GetRange after t.rg.svc.a: %v %+v", err, g)
	}

	// AtRevision: the range as it stood at r0, after a change and a delete.
	put(t, c, "t.rg.svc.a", `"changed"`)
	del(t, c, "t.rg.svc.b")
	put(t, c, "t.rg.svc.aa", `"new"`)
	past, err := c.GetRange(ctx, "t.rg.svc.", "t.rg.svc/", client.AtRevision(r0))
	if err != nil || past.Revision != r0 || !slices.Equal(keysOf(past.KVs), []string{"t.rg.svc.a", "t.rg.svc.b", "t.rg.svc.c.x"}) ||
		string(past.KVs[0].Value) != "0" || past.KVs[0].RemainingMS != nil {
		t.Fatalf("GetRange at %d: %v %+v", r0, err, past)
	}
	if g, err := c.GetRange(ctx, "t.rg.svc.", "t.rg.svc/", client.AtRevision(r0), client.AfterKey("t.rg.svc.a")); err != nil ||
		!slices.Equal(keysOf(g.KVs), []string{"t.rg.svc.b", "t.rg.svc.c.x"}) {
		t.Fatalf("GetRange at %d after t.rg.svc.a: %v %+v", r0, err, g)
	}
	cur, err := c.GetRange(ctx, "t.rg.svc.", "t.rg.svc/")
	if err != nil || !slices.Equal(keysOf(cur.KVs), []string{"t.rg.svc.a", "t.rg.svc.aa", "t.rg.svc.c.x"}) || string(cur.KVs[0].Value) != `"changed"` {
		t.Fatalf("GetRange now: %v %+v", err, cur)
	}

	// Refused, and nothing changes.
	before := now(t, c)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"GetRange with end == start", func() error { _, err := c.GetRange(ctx, "t.rg.svc.", "t.rg.svc."); return err }},
		{"GetRange with end < start", func() error { _, err := c.GetRange(ctx, "t.rg.svd", "t.rg.svc"); return err }},
		{"GetRange with a space", func() error { _, err := c.GetRange(ctx, "t.rg a", ""); return err }},
		{"GetRange in the future", func() error { _, err := c.GetRange(ctx, "t.rg.", "", client.AtRevision(before+100)); return err }},
		{"DeleteRange with end == start", func() error { _, err := c.DeleteRange(ctx, "t.rg.svc.", "t.rg.svc."); return err }},
		{"DeleteRange with end < start", func() error { _, err := c.DeleteRange(ctx, "t.rg.svd", "t.rg.svc."); return err }},
		{"DeleteRange with a control byte", func() error { _, err := c.DeleteRange(ctx, "t.rg.", "t.rg/\x01"); return err }},
	} {
		err := tc.call()
		var ce *client.Error
		if !errors.Is(err, client.ErrInvalidRequest) || !errors.As(err, &ce) || !strings.Contains(ce.Description, "range") && !strings.Contains(ce.Description, "revision") {
			t.Errorf("%s: %v, want ErrInvalidRequest naming the field", tc.name, err)
		}
	}
	if g, err := c.GetRange(ctx, "t.rg.", "t.rg/"); err != nil || g.Revision != before || g.Count != 5 {
		t.Fatalf("refused range calls changed the state: %v %+v (revision was %d)", err, g, before)
	}

	// DeleteRange: the keys under svc. at one revision, not svcx.a or svd.
	d, err := c.DeleteRange(ctx, "t.rg.svc.", "t.rg.svc/")
	if err != nil || d.Deleted != 3 || d.Revision != before+1 {
		t.Fatalf("DeleteRange(t.rg.svc., t.rg.svc/): %v %+v", err, d)
	}
	if g, err := c.GetRange(ctx, "t.rg.", "t.rg/"); err != nil || !slices.Equal(keysOf(g.KVs), []string{"t.rg.svcx.a", "t.rg.svd"}) {
		t.Fatalf("after DeleteRange: %v %+v", err, g)
	}
	if d, err := c.DeleteRange(ctx, "t.rg.svc.", "t.rg.svc/"); err != nil || d.Deleted != 0 || d.Revision != before+1 {
		t.Fatalf("DeleteRange of an empty range: %v %+v", err, d)
	}
	// To the end of the keyspace, from a start past every other key.
	put(t, c, "zz.t.rg.a", "1")
	put(t, c, "zz.t.rg.b", "2")
	tail, err := c.GetRange(ctx, "zz.t.rg.", "", client.AtRevision(0))
	if err != nil || tail.Count < 2 || tail.KVs[0].Key != "zz.t.rg.a" {
		t.Fatalf("GetRange(zz.t.rg., end of the keyspace): %v %+v", err, tail)
	}
	if d, err := c.DeleteRange(ctx, "zz.t.rg.", ""); err != nil || d.Deleted != tail.Count {
		t.Fatalf("DeleteRange(zz.t.rg., end of the keyspace): %v %+v, want %d deleted", err, d, tail.Count)
	}
	if g, err := c.GetRange(ctx, "zz.t.rg.", ""); err != nil || g.Count != 0 {
		t.Fatalf("after DeleteRange(zz.t.rg., end of the keyspace): %v %+v", err, g)
	}
	if _, err := c.DeleteRange(ctx, "t.rg.", "t.rg/"); err != nil {
		t.Fatal(err)
	}
}

// WatchRange delivers the events of the keys in the range, in order, and
// none of the keys around it: svcx.a and svd are outside [svc., svc/).
func TestWatchRange(t *testing.T) {
	c := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	from := now(t, c)
	w, err := c.WatchRange(ctx, "t.wr.svc.", "t.wr.svc/", from)
	if err != nil {
		t.Fatal(err)
	}
	open, err := c.WatchRange(ctx, "t.wr.svd", "", from)
	if err != nil {
		t.Fatal(err)
	}
	put(t, c, "t.wr.svcx.a", "1")
	put(t, c, "t.wr.svc.a", "2")
	put(t, c, "t.wr.svd", "3")
	put(t, c, "t.wr.svc.b.c", "4")
	del(t, c, "t.wr.svc.a")
	last := put(t, c, "t.wr.svc.z", "5")

	next := func(w *client.Watcher) schema.Event {
		t.Helper()
		select {
		case e, ok := <-w.Events():
			if !ok {
				t.Fatalf("the watcher ended: %v", w.Err())
			}
			return e
		case <-ctx.Done():
			t.Fatal("no event within a minute")
		}
		return schema.Event{}
	}
	var got []string
	for len(got) < 4 {
		e := next(w)
		got = append(got, e.Type+" "+e.Key+" "+string(e.Value))
	}
	want := []string{"put t.wr.svc.a 2", "put t.wr.svc.b.c 4", "delete t.wr.svc.a ", "put t.wr.svc.z 5"}
	if !slices.Equal(got, want) {
		t.Fatalf("WatchRange(t.wr.svc., t.wr.svc/): %q, want %q", got, want)
	}
	// Without an end: t.wr.svd, then (other keys of the keyspace after it
	// are not written meanwhile) the next put past it.
	if e := next(open); e.Key != "t.wr.svd" || e.Revision <= from {
		t.Fatalf("WatchRange(t.wr.svd, \"\"): %+v", e)
	}
	end := put(t, c, "zz.t.wr", "6")
	if e := next(open); e.Key != "zz.t.wr" || e.Revision != end || end <= last {
		t.Fatalf("WatchRange(t.wr.svd, \"\") after zz.t.wr: %+v", e)
	}

	// A range the server refuses ends the watcher with ErrInvalidRequest.
	bad, err := c.WatchRange(ctx, "t.wr.b", "t.wr.a", from)
	if err != nil {
		t.Fatal(err)
	}
	for range bad.Events() {
		t.Fatal("an event from an inverted range")
	}
	if !errors.Is(bad.Err(), client.ErrInvalidRequest) {
		t.Fatalf("WatchRange of an inverted range: %v", bad.Err())
	}
}

// rangeTokens gives the whole tokens every key of a range shares, which
// the watcher listens on: checked against every key over a small alphabet
// (with '.', '/' just after it, and a letter) for every range of such
// keys.
func TestRangeTokens(t *testing.T) {
	for _, tc := range []struct{ start, end, want string }{
		{"svc.", "svc/", "svc."},
		{"a.b.c", "a.b.d", "a.b."},
		{"a.b.", "a.c", "a."},
		{"svc.", "svd", ""},
		{"svc.", "", ""},
		{"a.b.", "a.b.x", "a.b."},
	} {
		if got := client.RangeTokens(tc.start, tc.end); got != tc.want {
			t.Errorf("rangeTokens(%q, %q) = %q, want %q", tc.start, tc.end, got, tc.want)
		}
	}
	var all []string
	var grow func(s string)
	grow = func(s string) {
		all = append(all, s)
		if len(s) < 4 {
			for _, b := range []string{".", "/", "a"} {
				grow(s + b)
			}
		}
	}
	grow("")
	slices.Sort(all)
	for i, start := range all {
		for _, end := range append([]string{""}, all[i+1:]...) {
			tok := client.RangeTokens(start, end)
			if tok != "" && !strings.HasSuffix(tok, ".") {
				t.Fatalf("rangeTokens(%q, %q) = %q, not whole tokens", start, end, tok)
			}
			for _, k := range all[i:] {
				if end != "" && k >= end {
					break
				}
				if !strings.HasPrefix(k, tok) {
					t.Fatalf("rangeTokens(%q, %q) = %q, but %q is in the range", start, end, tok, k)
				}
			}
		}
	}
}

// A put's content type and metadata come back unchanged from reads (now
// and at its revision), history, a watch and the change log, also from a
// put in a transaction; a put without them clears them; bad ones are
// refused and change nothing.
func TestContentTypeAndMetadata(t *testing.T) {
	c := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "t.ct.k"
	from := now(t, c)
	w, err := c.Watch(ctx, key, false, from)
	if err != nil {
		t.Fatal(err)
	}
	const ct = "text/plain; charset=utf-8"
	md := json.RawMessage(`{"owner": "ops", "tags": ["a", "b"]}`)
	const mdCompact = `{"owner":"ops","tags":["a","b"]}` // stored compact, like values
	r1 := put(t, c, key, `"hello"`, client.WithContentType(ct), client.WithMetadata(md))
	has := func(what string, gotCT string, gotMD json.RawMessage, wantCT, wantMD string) {
		t.Helper()
		if gotCT != wantCT || string(gotMD) != wantMD {
			t.Fatalf("%s: content type %q metadata %s, want %q and %s", what, gotCT, gotMD, wantCT, wantMD)
		}
	}
	kv, err := c.GetKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	has("GetKey", kv.ContentType, kv.Metadata, ct, mdCompact)
	g, err := c.GetPrefix(ctx, "t.ct.")
	if err != nil || len(g.KVs) != 1 {
		t.Fatalf("GetPrefix: %v %+v", err, g)
	}
	has("GetPrefix", g.KVs[0].ContentType, g.KVs[0].Metadata, ct, mdCompact)

	// A put without them clears them; the past keeps them.
	r2 := put(t, c, key, `"bye"`)
	kv, err = c.GetKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	has("GetKey after a plain put", kv.ContentType, kv.Metadata, "", "")
	kv, err = c.GetKey(ctx, key, client.AtRevision(r1))
	if err != nil {
		t.Fatal(err)
	}
	has("GetKey at the first put", kv.ContentType, kv.Metadata, ct, mdCompact)
	// One of the two alone.
	r3 := put(t, c, key, `3`, client.WithMetadata(json.RawMessage(`{}`)))
	kv, err = c.GetKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	has("GetKey after a put with metadata {}", kv.ContentType, kv.Metadata, "", "{}")

	// A transaction's put carries them too.
	tr, err := c.Txn(ctx, schema.KVTxnRequest{Success: []schema.TxnOp{{Put: &schema.TxnPut{Key: key, Value: json.RawMessage(`4`),
		ContentType: "application/json", Metadata: json.RawMessage(`{"from":"txn"}`)}}}})
	if err != nil || !tr.Succeeded {
		t.Fatalf("txn put: %v %+v", err, tr)
	}
	kv, err = c.GetKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	has("GetKey after the txn put", kv.ContentType, kv.Metadata, "application/json", `{"from":"txn"}`)

	type extra struct{ ct, md string }
	want := []extra{{ct, mdCompact}, {"", ""}, {"", "{}"}, {"application/json", `{"from":"txn"}`}}
	wantRevs := []int64{r1, r2, r3, tr.Revision}
	h, err := c.History(ctx, key)
	if err != nil || len(h.Records) != 4 {
		t.Fatalf("History: %v %+v", err, h)
	}
	ch, err := c.Changes(ctx, schema.KVChangesRequest{Key: client.Ptr(key), AfterRevision: from})
	if err != nil || len(ch.Events) != 4 {
		t.Fatalf("Changes: %v %+v", err, ch)
	}
	for i := range want {
		e := h.Records[i]
		if e.Revision != wantRevs[i] {
			t.Fatalf("history record %d at %d, want %d", i, e.Revision, wantRevs[i])
		}
		has(fmt.Sprintf("history record %d", i), e.ContentType, e.Metadata, want[i].ct, want[i].md)
		e = ch.Events[i]
		has(fmt.Sprintf("change %d", i), e.ContentType, e.Metadata, want[i].ct, want[i].md)
		select {
		case e := <-w.Events():
			if e.Revision != wantRevs[i] {
				t.Fatalf("watch event %d at %d, want %d", i, e.Revision, wantRevs[i])
			}
			has(fmt.Sprintf("watch event %d", i), e.ContentType, e.Metadata, want[i].ct, want[i].md)
		case <-ctx.Done():
			t.Fatalf("watch event %d did not come: %v", i, w.Err())
		}
	}

	// The limits, at and over: 256 bytes of content type, 4 KiB of
	// metadata.
	long := strings.Repeat("x", schema.MaxContentTypeBytes)
	bigMD := json.RawMessage(`{"m":"` + strings.Repeat("m", schema.MaxPutMetadataBytes-8) + `"}`) // exactly the limit
	if len(bigMD) != schema.MaxPutMetadataBytes {
		t.Fatalf("test metadata is %d bytes", len(bigMD))
	}
	atLimit := put(t, c, key, `5`, client.WithContentType(long), client.WithMetadata(bigMD))
	before, err := c.GetKey(ctx, key)
	if err != nil || before.ModRevision != atLimit || before.ContentType != long || string(before.Metadata) != string(bigMD) {
		t.Fatalf("a put at the limits: %v %+v", err, before)
	}
	for _, tc := range []struct {
		name string
		opts []client.PutOption
		want error // nil: any error (found before sending)
	}{
		{"metadata an array", []client.PutOption{client.WithMetadata(json.RawMessage(`[1]`))}, client.ErrInvalidRequest},
		{"metadata a string", []client.PutOption{client.WithMetadata(json.RawMessage(`"owner"`))}, client.ErrInvalidRequest},
		{"metadata a number", []client.PutOption{client.WithMetadata(json.RawMessage(`7`))}, client.ErrInvalidRequest},
		{"metadata over 4 KiB", []client.PutOption{client.WithMetadata(json.RawMessage(`{"m":"` + strings.Repeat("m", schema.MaxPutMetadataBytes-7) + `"}`))}, client.ErrTooLarge},
		{"metadata not JSON", []client.PutOption{client.WithMetadata(json.RawMessage(`{`))}, nil},
		{"content type over 256 bytes", []client.PutOption{client.WithContentType(long + "x")}, client.ErrInvalidRequest},
		{"content type with a newline", []client.PutOption{client.WithContentType("text/plain\n")}, client.ErrInvalidRequest},
		{"content type not ASCII", []client.PutOption{client.WithContentType("text/é")}, client.ErrInvalidRequest},
	} {
		_, err := c.PutKey(ctx, key, json.RawMessage(`6`), tc.opts...)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("a put with %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	_, err = c.Txn(ctx, schema.KVTxnRequest{Success: []schema.TxnOp{{Put: &schema.TxnPut{Key: key, Value: json.RawMessage(`7`), Metadata: json.RawMessage(`[]`)}}}})
	if !errors.Is(err, client.ErrInvalidRequest) {
		t.Errorf("a txn put with metadata []: %v", err)
	}
	after, err := c.GetKey(ctx, key)
	if err != nil || after.ModRevision != atLimit || after.ContentType != long || string(after.Metadata) != string(bigMD) || now(t, c) != atLimit {
		t.Fatalf("refused puts changed the key: %v %+v", err, after)
	}
}
