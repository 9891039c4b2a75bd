package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

// put writes value under key and returns the revision of the write.
func put(t *testing.T, c *client.Client, key, value string, opts ...client.PutOption) int64 {
	t.Helper()
	r, err := c.PutKey(context.Background(), key, json.RawMessage(value), opts...)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return r.Revision
}

// del deletes key, which must exist, and returns the revision of the delete.
func del(t *testing.T, c *client.Client, key string) int64 {
	t.Helper()
	r, err := c.DeleteKey(context.Background(), key)
	if err != nil || r.Deleted != 1 {
		t.Fatalf("delete %s: %v %+v", key, err, r)
	}
	return r.Revision
}

// GetKey and GetPrefix with AtRevision read the keys as they stood then,
// without remaining time; AfterKey continues a prefix page at the same
// revision; a revision in the future and a key read with AfterKey are
// refused.
func TestReadAtRevision(t *testing.T) {
	c := connect(t)
	ctx := context.Background()
	g, err := c.Grant(ctx, schema.LeaseGrantRequest{TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	r1 := put(t, c, "t.at.a", `"a1"`, client.WithLease(g.ID))
	r2 := put(t, c, "t.at.b", `"b1"`)
	r3 := put(t, c, "t.at.a", `"a2"`)
	r4 := del(t, c, "t.at.b")
	put(t, c, "t.at.c", `"c1"`)

	for _, tc := range []struct {
		rev     int64
		value   string
		version int64
		lease   int64
	}{{r1, `"a1"`, 1, g.ID}, {r2, `"a1"`, 1, g.ID}, {r3, `"a2"`, 2, 0}, {r4, `"a2"`, 2, 0}} {
		kv, err := c.GetKey(ctx, "t.at.a", client.AtRevision(tc.rev))
		if err != nil || string(kv.Value) != tc.value || kv.Version != tc.version || kv.Lease != tc.lease ||
			kv.CreateRevision != r1 || kv.RemainingMS != nil {
			t.Fatalf("t.at.a at %d: %v %+v, want %s version %d lease %d, no remaining_ms", tc.rev, err, kv, tc.value, tc.version, tc.lease)
		}
	}
	// The present, with its remaining time, when no revision is given.
	if kv, err := c.GetKey(ctx, "t.at.a", client.AtRevision(0)); err != nil || string(kv.Value) != `"a2"` {
		t.Fatalf("t.at.a at revision 0: %v %+v", err, kv)
	}
	// A key that did not exist then, or no longer existed.
	if _, err := c.GetKey(ctx, "t.at.b", client.AtRevision(r1)); !errors.Is(err, client.ErrKeyNotFound) {
		t.Fatalf("t.at.b before its put: %v", err)
	}
	if _, err := c.GetKey(ctx, "t.at.b", client.AtRevision(r4)); !errors.Is(err, client.ErrKeyNotFound) {
		t.Fatalf("t.at.b at its delete: %v", err)
	}
	if kv, err := c.GetKey(ctx, "t.at.b", client.AtRevision(r3)); err != nil || string(kv.Value) != `"b1"` {
		t.Fatalf("t.at.b before its delete: %v %+v", err, kv)
	}

	// A prefix at r3: a and b, as they were; the page after a, at the
	// same revision, is b alone, although b is deleted since and c added.
	p, err := c.GetPrefix(ctx, "t.at.", client.AtRevision(r3))
	if err != nil || p.Revision != r3 || p.Count != 2 || len(p.KVs) != 2 || p.More ||
		p.KVs[0].Key != "t.at.a" || string(p.KVs[0].Value) != `"a2"` || p.KVs[1].Key != "t.at.b" || string(p.KVs[1].Value) != `"b1"` {
		t.Fatalf("t.at. at %d: %v %+v", r3, err, p)
	}
	p, err = c.GetPrefix(ctx, "t.at.", client.AtRevision(r3), client.AfterKey("t.at.a"))
	if err != nil || p.Revision != r3 || len(p.KVs) != 1 || p.KVs[0].Key != "t.at.b" {
		t.Fatalf("t.at. at %d after t.at.a: %v %+v", r3, err, p)
	}
	now, err := c.GetPrefix(ctx, "t.at.", client.AfterKey("t.at.a"))
	if err != nil || len(now.KVs) != 1 || now.KVs[0].Key != "t.at.c" {
		t.Fatalf("t.at. now after t.at.a: %v %+v", err, now)
	}

	// Refused: a revision not yet written (400, saying the current one),
	// and AfterKey on a single key.
	_, err = c.GetKey(ctx, "t.at.a", client.AtRevision(now.Revision+1000))
	var ce *client.Error
	if !errors.Is(err, client.ErrInvalidRequest) || !errors.As(err, &ce) || !strings.Contains(ce.Description, "future") {
		t.Fatalf("a read in the future: %v", err)
	}
	if _, err := c.GetPrefix(ctx, "t.at.", client.AtRevision(-1)); !errors.Is(err, client.ErrInvalidRequest) {
		t.Fatalf("a negative revision: %v", err)
	}
	if _, err := c.GetKey(ctx, "t.at.a", client.AfterKey("t.at.")); !errors.Is(err, client.ErrInvalidRequest) {
		t.Fatalf("GetKey with AfterKey: %v", err)
	}
}

// History lists a key's puts and deletes, each delete with its cause, in
// a window, either way round, page by page; HistoryAll follows the pages.
func TestHistory(t *testing.T) {
	c := connect(t)
	ctx := context.Background()
	g, err := c.Grant(ctx, schema.LeaseGrantRequest{TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	const key = "t.hist.k"
	revs := []int64{
		put(t, c, key, `"v1"`, client.WithLease(g.ID)),
		put(t, c, key, `"v2"`),
		del(t, c, key),
		put(t, c, key, `"v3"`, client.WithLease(g.ID)),
	}
	put(t, c, "t.hist.other", `1`) // not in the key's history
	rv, err := c.Revoke(ctx, schema.LeaseRevokeRequest{ID: g.ID})
	if err != nil {
		t.Fatal(err)
	}
	revs = append(revs, rv.Revision)
	want := []string{`put put v1 "v1"`, `put put v2 "v2"`, `delete delete v0`, `put put v1 "v3"`, `delete lease_revoked v0`}
	text := func(es []schema.Event) []string {
		var out []string
		for _, e := range es {
			s := fmt.Sprintf("%s %s v%d", e.Type, e.Cause, e.Version)
			if e.Type == schema.EventPut {
				s += " " + string(e.Value)
			}
			out = append(out, s)
		}
		return out
	}
	reversed := slices.Clone(want)
	slices.Reverse(reversed)

	h, err := c.History(ctx, key)
	if err != nil || h.Key != key || h.More || h.NextRevision != 0 || h.Revision != revs[4] || !slices.Equal(text(h.Records), want) {
		t.Fatalf("History: %v %+v\n got %q\nwant %q", err, h, text(h.Records), want)
	}
	for i, e := range h.Records {
		if e.Revision != revs[i] || e.Key != key {
			t.Fatalf("record %d: %+v, want revision %d", i, e, revs[i])
		}
	}
	if h.Records[4].Lease != g.ID {
		t.Fatalf("the revoke's tombstone names lease %d, want %d", h.Records[4].Lease, g.ID)
	}
	h, err = c.History(ctx, key, client.NewestFirst())
	if err != nil || !slices.Equal(text(h.Records), reversed) {
		t.Fatalf("History NewestFirst: %v %q", err, text(h.Records))
	}
	// A window, both ends included.
	h, err = c.History(ctx, key, client.FromRevision(revs[1]), client.ToRevision(revs[3]))
	if err != nil || !slices.Equal(text(h.Records), want[1:4]) {
		t.Fatalf("History from %d to %d: %v %q", revs[1], revs[3], err, text(h.Records))
	}
	// A page, and the next.
	h, err = c.History(ctx, key, client.HistoryLimit(2))
	if err != nil || !h.More || h.NextRevision != revs[1] || !slices.Equal(text(h.Records), want[:2]) {
		t.Fatalf("History limit 2: %v %+v", err, h)
	}
	h, err = c.History(ctx, key, client.HistoryLimit(2), client.AfterRevision(h.NextRevision))
	if err != nil || !h.More || !slices.Equal(text(h.Records), want[2:4]) {
		t.Fatalf("History limit 2, second page: %v %+v", err, h)
	}

	// HistoryAll follows the pages, either way round, and stops when asked.
	for _, tc := range []struct {
		opts []client.HistoryOption
		want []string
	}{
		{[]client.HistoryOption{client.HistoryLimit(2)}, want},
		{[]client.HistoryOption{client.HistoryLimit(1), client.NewestFirst()}, reversed},
		{[]client.HistoryOption{client.HistoryLimit(2), client.FromRevision(revs[1]), client.ToRevision(revs[3])}, want[1:4]},
		{[]client.HistoryOption{client.HistoryLimit(2), client.NewestFirst(), client.FromRevision(revs[1]), client.ToRevision(revs[3])}, []string{want[3], want[2], want[1]}},
	} {
		var got []schema.Event
		for e, err := range c.HistoryAll(ctx, key, tc.opts...) {
			if err != nil {
				t.Fatalf("HistoryAll: %v", err)
			}
			got = append(got, e)
		}
		if !slices.Equal(text(got), tc.want) {
			t.Fatalf("HistoryAll: got %q, want %q", text(got), tc.want)
		}
	}
	n := 0
	for range c.HistoryAll(ctx, key, client.HistoryLimit(1)) {
		if n++; n == 2 {
			break
		}
	}
	if n != 2 {
		t.Fatalf("HistoryAll went on after break: %d", n)
	}
	// A key without history has none.
	if h, err := c.History(ctx, "t.hist.never"); err != nil || len(h.Records) != 0 || h.More {
		t.Fatalf("History of a key never written: %v %+v", err, h)
	}

	// Refused, by the server, and by HistoryAll with its one error.
	for name, opts := range map[string][]client.HistoryOption{
		"a window ending in the future": {client.ToRevision(revs[4] + 1000)},
		"a limit over 1000":             {client.HistoryLimit(1001)},
		"from after to":                 {client.FromRevision(revs[3]), client.ToRevision(revs[1])},
		"a negative from":               {client.FromRevision(-1)},
	} {
		if _, err := c.History(ctx, key, opts...); !errors.Is(err, client.ErrInvalidRequest) {
			t.Errorf("History with %s: %v, want ErrInvalidRequest", name, err)
		}
		var errs []error
		for e, err := range c.HistoryAll(ctx, key, opts...) {
			if err == nil {
				t.Fatalf("HistoryAll with %s yielded %+v", name, e)
			}
			errs = append(errs, err)
		}
		if len(errs) != 1 || !errors.Is(errs[0], client.ErrInvalidRequest) {
			t.Errorf("HistoryAll with %s: %v, want one ErrInvalidRequest", name, errs)
		}
	}
	if _, err := c.History(ctx, "bad key"); !errors.Is(err, client.ErrInvalidRequest) {
		t.Fatalf("History of a bad key: %v", err)
	}
}

// Compact raises the floor: reads below it are ErrCompacted with the floor
// in the description, compacting again or lower changes nothing, a future
// revision is refused and changes nothing, and HistoryAll reports a
// compaction that removed records while it read. It runs on a node of its
// own, since the floor is the whole keyspace's.
func TestCompact(t *testing.T) {
	svc, err := startService(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	c, err := client.Connect(client.URL(svc.NATSURL()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := context.Background()
	const key = "t.compact.k"
	var revs []int64
	for i := range 5 {
		revs = append(revs, put(t, c, key, fmt.Sprint(i+1)))
	}
	floorOf := func() int64 {
		t.Helper()
		h, err := c.History(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return h.CompactRevision
	}

	// A revision not yet written: refused, and nothing changes.
	_, err = c.Compact(ctx, revs[4]+1)
	var ce *client.Error
	if !errors.Is(err, client.ErrInvalidRequest) || !errors.As(err, &ce) || !strings.Contains(ce.Description, "future") {
		t.Fatalf("Compact in the future: %v", err)
	}
	if f := floorOf(); f != 0 {
		t.Fatalf("a refused compaction moved the floor to %d", f)
	}
	for _, rev := range []int64{0, -1} {
		if _, err := c.Compact(ctx, rev); !errors.Is(err, client.ErrInvalidRequest) {
			t.Fatalf("Compact(%d): %v", rev, err)
		}
	}

	r, err := c.Compact(ctx, revs[1])
	if err != nil || r.CompactRevision != revs[1] || r.Revision != revs[4] {
		t.Fatalf("Compact(%d): %v %+v", revs[1], err, r)
	}
	for _, rev := range []int64{revs[1], revs[0]} { // again, and lower: no change
		if r, err := c.Compact(ctx, rev); err != nil || r.CompactRevision != revs[1] {
			t.Fatalf("Compact(%d) after Compact(%d): %v %+v", rev, revs[1], err, r)
		}
	}
	_, err = c.GetKey(ctx, key, client.AtRevision(revs[0]))
	if !errors.Is(err, client.ErrCompacted) || !errors.As(err, &ce) || ce.Code != 410 || !strings.Contains(ce.Description, fmt.Sprint(revs[1])) {
		t.Fatalf("a read below the floor: %v", err)
	}
	if kv, err := c.GetKey(ctx, key, client.AtRevision(revs[1])); err != nil || string(kv.Value) != "2" {
		t.Fatalf("a read at the floor: %v %+v", err, kv)
	}
	if _, err := c.History(ctx, key, client.FromRevision(revs[1])); !errors.Is(err, client.ErrCompacted) {
		t.Fatalf("a history window from the floor: %v", err)
	}
	h, err := c.History(ctx, key)
	if err != nil || len(h.Records) != 3 || h.Records[0].Revision != revs[2] || h.CompactRevision != revs[1] {
		t.Fatalf("the history after compaction: %v %+v", err, h)
	}

	// Compactions while HistoryAll reads: it stops with ErrCompacted
	// rather than skip what went, oldest first and newest first.
	for _, newest := range []bool{false, true} {
		opts := []client.HistoryOption{client.HistoryLimit(1)}
		if newest {
			opts = append(opts, client.NewestFirst())
		}
		var got []schema.Event
		var errs []error
		for e, err := range c.HistoryAll(ctx, key, opts...) {
			if err != nil {
				errs = append(errs, err)
				continue
			}
			got = append(got, e)
			if len(got) == 1 {
				// Past the first record of an oldest-first listing; for
				// a newest-first one, the oldest records are gone.
				rev := put(t, c, key, `"more"`)
				floor := got[0].Revision + 1
				if newest {
					floor = rev - 1
				}
				if _, err := c.Compact(ctx, floor); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Either the client sees the floor pass what it has not read
		// ("while the history"), or the server refuses the continued
		// listing itself ("gone in part"): both stop instead of skipping.
		if len(got) != 1 || len(errs) != 1 || !errors.Is(errs[0], client.ErrCompacted) ||
			!strings.Contains(errs[0].Error(), "while the history") && !strings.Contains(errs[0].Error(), "is gone in part") {
			t.Fatalf("HistoryAll (newest first %t) across a compaction: %d records, errors %v", newest, len(got), errs)
		}
	}
}
