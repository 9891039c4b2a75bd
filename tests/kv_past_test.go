package tests

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// The past of the keyspace, black-box: reads at a past revision
// (P.kv.get with revision), a key's history (P.kv.history), compaction
// (P.kv.compact), the CLI's commands for them, and the same past read from
// a new leader after the old one is killed. Every reply is checked against
// its JSON Schema by client.raw.

// history reads P.kv.history, which must succeed.
func (c *client) history(req map[string]any) schema.KVHistoryReply {
	c.t.Helper()
	var h schema.KVHistoryReply
	c.ok(subjects.KVHistory, req, &h)
	return h
}

// floor reads the compaction floor, as kv.history reports it.
func (c *client) floor() int64 {
	c.t.Helper()
	return c.history(map[string]any{"key": "floor.probe"}).CompactRevision
}

// kvLine is a record as these tests compare it.
func kvLine(kv schema.KeyValue) string {
	s := fmt.Sprintf("%s=%s create=%d mod=%d version=%d lease=%d", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	if kv.RemainingMS != nil {
		s += fmt.Sprintf(" remaining_ms=%d", *kv.RemainingMS)
	}
	return s
}

func kvLines(kvs []schema.KeyValue) []string {
	out := []string{}
	for _, kv := range kvs {
		out = append(out, kvLine(kv))
	}
	return out
}

// A read of one key and of a prefix at a past revision gives the state of
// then, without remaining time, and a prefix listing continued with after
// at that revision is the same snapshot page after page while keys are
// written, deleted, created inside the prefix and expired between pages.
func TestPastReadsAreSnapshots(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)

	// The state at rev, as written: hs.k00..09 on a lease that is made to
	// expire later, 10..19 written twice, 20..29 once; hs.single three
	// times.
	want := map[string]schema.KeyValue{}
	short := c.grant(60)
	put := func(key string, value any, lease int64) {
		rev := c.put(key, value, lease)
		kv, ok := want[key]
		if !ok {
			kv = schema.KeyValue{Key: key, CreateRevision: rev}
		}
		v, _ := json.Marshal(value)
		kv.Value, kv.ModRevision, kv.Version, kv.Lease = v, rev, kv.Version+1, lease
		want[key] = kv
	}
	for i := range 30 {
		lease := int64(0)
		if i < 10 {
			lease = short
		}
		put(fmt.Sprintf("hs.k%02d", i), i, lease)
	}
	for i := 10; i < 20; i++ {
		put(fmt.Sprintf("hs.k%02d", i), map[string]int{"second": i}, 0)
	}
	for i := range 3 {
		put("hs.single", fmt.Sprintf("s%d", i), 0)
	}
	rev := want["hs.single"].ModRevision
	var wantPrefix []schema.KeyValue
	for i := range 30 {
		wantPrefix = append(wantPrefix, want[fmt.Sprintf("hs.k%02d", i)])
	}

	single := c.raw(subjects.KVGet, map[string]any{"key": "hs.single", "revision": rev})
	if single.err != nil {
		t.Fatal(single.err)
	}
	var g schema.KVGetReply
	mustUnmarshal(t, single.data, &g)
	if g.Revision != rev || g.Count != 1 || !slices.Equal(kvLines(g.KVs), []string{kvLine(want["hs.single"])}) {
		t.Fatalf("hs.single at %d: %s, want %s", rev, single.data, kvLine(want["hs.single"]))
	}
	whole := c.get(map[string]any{"prefix": "hs.k", "revision": rev})
	if whole.Revision != rev || whole.Count != 30 || whole.More || !slices.Equal(kvLines(whole.KVs), kvLines(wantPrefix)) {
		t.Fatalf("hs.k at %d:\n got %q\nwant %q", rev, kvLines(whole.KVs), kvLines(wantPrefix))
	}

	// Page by page, with the keyspace changing between pages.
	between := []func(){
		func() { // overwrite, delete, and create a key inside the page range still to come
			c.put("hs.k25", "changed", 0)
			c.ok(subjects.KVDelete, map[string]any{"key": "hs.k12"}, nil)
			c.put("hs.k07x", "new", 0)
			c.put("hs.single", "s3", 0)
		},
		func() { // the lease expires: hs.k00..09 go
			c.ok(subjects.LeaseKeepAlive, map[string]any{"id": short, "ttl": 1}, nil)
			checkFor(t, 30*time.Second, 50*time.Millisecond, func() error {
				if g := c.get(map[string]any{"prefix": "hs.k0", "count_only": true}); g.Count != 1 { // hs.k07x alone
					return fmt.Errorf("%d keys under hs.k0", g.Count)
				}
				return nil
			})
		},
		func() { // a prefix delete at one revision, and new keys after the page
			c.ok(subjects.KVDelete, map[string]any{"prefix": "hs.k2"}, nil)
			c.put("hs.k99", "late", 0)
		},
		func() { c.put("hs.k29", "last", 0) },
	}
	var paged []schema.KeyValue
	after := ""
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatal("the listing does not end")
		}
		req := map[string]any{"prefix": "hs.k", "revision": rev, "limit": 7}
		if after != "" {
			req["after"] = after
		}
		p := c.get(req)
		if p.Revision != rev || p.Count != int64(30-len(paged)) {
			t.Fatalf("page %d: revision %d count %d, want %d and %d", page, p.Revision, p.Count, rev, 30-len(paged))
		}
		paged = append(paged, p.KVs...)
		if !p.More {
			break
		}
		after = p.KVs[len(p.KVs)-1].Key
		if page < len(between) {
			between[page]()
		}
	}
	if !slices.Equal(kvLines(paged), kvLines(wantPrefix)) {
		t.Fatalf("paged at %d while writing:\n got %q\nwant %q", rev, kvLines(paged), kvLines(wantPrefix))
	}
	if now := c.get(map[string]any{"prefix": "hs.k", "count_only": true}); now.Revision <= rev || now.Count == 30 {
		t.Fatalf("the keyspace did not change meanwhile: %+v", now)
	}
	// The key read again at rev, after all that: the same bytes.
	again := c.raw(subjects.KVGet, map[string]any{"key": "hs.single", "revision": rev})
	if again.err != nil || string(again.data) != string(single.data) {
		t.Fatalf("hs.single at %d read again: %s %v, first %s", rev, again.data, again.err, single.data)
	}
	// At a revision before the key existed, and before the prefix did.
	if g := c.get(map[string]any{"key": "hs.single", "revision": want["hs.single"].CreateRevision - 1}); g.Count != 0 || len(g.KVs) != 0 {
		t.Fatalf("hs.single before its first put: %+v", g)
	}
	if g := c.get(map[string]any{"prefix": "hs.k1", "revision": want["hs.k00"].CreateRevision}); g.Count != 0 {
		t.Fatalf("hs.k1 before it was written: %+v", g)
	}
	// keys_only and count_only at a revision.
	if g := c.get(map[string]any{"prefix": "hs.k1", "revision": rev, "keys_only": true, "limit": 2}); g.Count != 10 || len(g.KVs) != 2 || g.KVs[0].Value != nil || g.KVs[0].Key != "hs.k10" {
		t.Fatalf("keys_only at %d: %+v", rev, g)
	}

	// Bad input: a clear 400, and nothing changes.
	before := c.revision()
	for i, body := range []string{
		fmt.Sprintf(`{"key":"hs.single","revision":%d}`, before+1),
		fmt.Sprintf(`{"prefix":"hs.","revision":%d}`, before+1000),
		`{"key":"hs.single","revision":-1}`,
		`{"key":"hs.single","revision":"3"}`,
		`{"key":"hs.single","revision":1.5}`,
		`{"key":"hs.single","revision":9007199254740992}`,
	} {
		e := c.fails(subjects.KVGet, body, schema.ErrInvalidRequest)
		if !strings.Contains(e.Description, "revision") {
			t.Errorf("%s: description %q does not name the field", body, e.Description)
		}
		if i < 2 && !strings.Contains(e.Description, "future") {
			t.Errorf("%s: description %q does not say future", body, e.Description)
		}
	}
	if got := c.revision(); got != before {
		t.Fatalf("refused reads moved the revision from %d to %d", before, got)
	}
}

// A key's history: every put with the value it wrote, and every delete as
// a tombstone with its cause (delete, lease_expired, lease_revoked, and a
// delete inside a transaction), exactly as the watch events carried them;
// either way round, in a window, page by page without splitting a
// revision; bad requests refused.
func TestPastKeyHistory(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	const key = "kh.k"
	w := c.watch("concord.watch." + key)

	held := c.grant(60)
	c.put(key, "v1", held)
	c.put(key, "v2", 0)
	c.put("kh.other", 1, 0)
	c.ok(subjects.KVDelete, map[string]any{"key": key}, nil) // cause delete
	short := c.grant(60)
	c.put(key, "v3", short)
	c.ok(subjects.LeaseKeepAlive, map[string]any{"id": short, "ttl": 1}, nil)
	w.waitFor(5, 30*time.Second) // ... until the lease expires: lease_expired
	revoked := c.grant(60)
	c.put(key, "v4", revoked)
	c.ok(subjects.LeaseRevoke, map[string]any{"id": revoked}, nil) // lease_revoked
	var txn schema.KVTxnReply
	c.ok(subjects.KVTxn, map[string]any{"success": []any{
		map[string]any{"put": map[string]any{"key": key, "value": "v5"}},
		map[string]any{"delete": map[string]any{"key": key}},
	}}, &txn) // two changes at one revision
	c.put(key, "v6", 0)
	watched := w.waitFor(10, 30*time.Second)

	var wantJSON []string
	for _, e := range watched {
		b, _ := json.Marshal(e.Event)
		wantJSON = append(wantJSON, string(b))
	}
	recordsJSON := func(es []schema.Event) []string {
		out := []string{}
		for _, e := range es {
			b, _ := json.Marshal(e)
			out = append(out, string(b))
		}
		return out
	}
	h := c.history(map[string]any{"key": key})
	if !slices.Equal(recordsJSON(h.Records), wantJSON) || h.More || h.Key != key || h.CompactRevision != 0 || h.Revision != c.revision() {
		t.Fatalf("history of %s:\n got %q\nwant the watched events %q", key, recordsJSON(h.Records), wantJSON)
	}
	var causes []string
	for _, e := range h.Records {
		causes = append(causes, e.Type+":"+e.Cause)
		if e.Type == schema.EventDelete && e.Version != 0 {
			t.Fatalf("a tombstone with version %d: %+v", e.Version, e)
		}
	}
	wantCauses := []string{"put:put", "put:put", "delete:delete", "put:put", "delete:lease_expired", "put:put", "delete:lease_revoked", "put:put", "delete:txn", "put:put"}
	if !slices.Equal(causes, wantCauses) {
		t.Fatalf("causes %q, want %q", causes, wantCauses)
	}
	if h.Records[4].Lease != short || h.Records[6].Lease != revoked || h.Records[2].Lease != 0 {
		t.Fatalf("tombstones name leases %d, %d, %d; want 0, %d, %d", h.Records[2].Lease, h.Records[4].Lease, h.Records[6].Lease, short, revoked)
	}
	if h.Records[7].Revision != txn.Revision || h.Records[8].Revision != txn.Revision || h.Records[8].OpIndex != 1 {
		t.Fatalf("the transaction's changes: %+v %+v", h.Records[7], h.Records[8])
	}

	// Newest first.
	nf := c.history(map[string]any{"key": key, "newest_first": true})
	rev := slices.Clone(wantJSON)
	slices.Reverse(rev)
	if !slices.Equal(recordsJSON(nf.Records), rev) {
		t.Fatalf("newest first: %q", recordsJSON(nf.Records))
	}
	// A window, both ends included.
	from, to := h.Records[3].Revision, h.Records[6].Revision
	win := c.history(map[string]any{"key": key, "from_revision": from, "to_revision": to})
	if !slices.Equal(recordsJSON(win.Records), wantJSON[3:7]) {
		t.Fatalf("window [%d, %d]: %q", from, to, recordsJSON(win.Records))
	}
	// Pages of one record, both ways: the transaction's two changes come
	// together, and the pages add up to the whole.
	for _, newest := range []bool{false, true} {
		var all []schema.Event
		req := map[string]any{"key": key, "limit": 1, "newest_first": newest}
		for page := 0; ; page++ {
			if page > 20 {
				t.Fatal("history paging does not end")
			}
			p := c.history(req)
			if len(p.Records) == 2 && p.Records[0].Revision != txn.Revision {
				t.Fatalf("a page of two records not of one revision: %+v", p.Records)
			}
			all = append(all, p.Records...)
			if !p.More {
				if p.NextRevision != 0 {
					t.Fatalf("last page with next_revision %d", p.NextRevision)
				}
				break
			}
			req["after_revision"] = p.NextRevision
		}
		want := wantJSON
		if newest {
			want = rev
		}
		if !slices.Equal(recordsJSON(all), want) {
			t.Fatalf("pages (newest first %t): %q", newest, recordsJSON(all))
		}
	}
	// A key never written has an empty history, not an error.
	if e := c.history(map[string]any{"key": "kh.never"}); e.Records == nil || len(e.Records) != 0 || e.More {
		t.Fatalf("history of a key never written: %+v", e)
	}

	// Bad input: a clear 400, and nothing changes.
	before := c.revision()
	for _, body := range []string{
		`{}`,
		`{"key":"bad key"}`,
		`{"prefix":"kh."}`,
		`{"key":"kh.k","limit":1001}`,
		`{"key":"kh.k","limit":-1}`,
		`{"key":"kh.k","from_revision":"1"}`,
		`{"key":"kh.k","from_revision":-1}`,
		`{"key":"kh.k","from_revision":5,"to_revision":3}`,
		fmt.Sprintf(`{"key":"kh.k","to_revision":%d}`, before+1),
		`{"key":"kh.k","newest_first":"yes"}`,
	} {
		c.fails(subjects.KVHistory, body, schema.ErrInvalidRequest)
	}
	if got := c.revision(); got != before {
		t.Fatalf("refused history reads moved the revision from %d to %d", before, got)
	}
}

// Compaction: a future revision is refused and changes nothing; then reads
// below the floor get 410 with the floor in the description, reads at the
// floor and above still work, compacting again or lower changes nothing,
// and the present state is untouched.
func TestPastCompaction(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	var revs []int64
	for i := range 6 {
		revs = append(revs, c.put("cp.k", i, 0))
		c.put(fmt.Sprintf("cp.p.%d", i), i, 0)
	}
	cur := c.revision()
	presentBefore, _ := c.fullState()
	changesBefore := c.raw(subjects.KVChanges, map[string]any{"prefix": "", "after_revision": 0})
	atBefore := c.raw(subjects.KVGet, map[string]any{"prefix": "cp.", "revision": revs[1]})

	// Refused, and nothing changes: the floor, the reads, the revision.
	for _, body := range []string{
		fmt.Sprintf(`{"revision":%d}`, cur+1),
		`{"revision":0}`, `{"revision":-3}`, `{"revision":"2"}`, `{}`, `{"revision":2,"extra":1}`,
	} {
		e := c.fails(subjects.KVCompact, body, schema.ErrInvalidRequest)
		if strings.Contains(body, fmt.Sprint(cur+1)) && (!strings.Contains(e.Description, "future") || !strings.Contains(e.Description, fmt.Sprint(cur))) {
			t.Fatalf("compact %s: %q, want future and the current revision", body, e.Description)
		}
	}
	if f := c.floor(); f != 0 || c.revision() != cur {
		t.Fatalf("refused compactions: floor %d, revision %d (was %d)", f, c.revision(), cur)
	}
	if r := c.raw(subjects.KVGet, map[string]any{"prefix": "cp.", "revision": revs[1]}); string(r.data) != string(atBefore.data) {
		t.Fatalf("a read at %d after refused compactions: %s, was %s", revs[1], r.data, atBefore.data)
	}
	if r := c.raw(subjects.KVChanges, map[string]any{"prefix": "", "after_revision": 0}); string(r.data) != string(changesBefore.data) {
		t.Fatal("the change log changed after refused compactions")
	}

	floor := revs[3]
	var cr schema.KVCompactReply
	c.ok(subjects.KVCompact, map[string]any{"revision": floor}, &cr)
	if cr.CompactRevision != floor || cr.Revision != cur {
		t.Fatalf("compact to %d: %+v", floor, cr)
	}
	// Idempotent: the same, or a lower revision, changes nothing.
	for _, r := range []int64{floor, revs[0], 1} {
		var again schema.KVCompactReply
		c.ok(subjects.KVCompact, map[string]any{"revision": r}, &again)
		if again != cr {
			t.Fatalf("compact to %d after compacting to %d: %+v, want %+v", r, floor, again, cr)
		}
	}
	if c.revision() != cur {
		t.Fatal("compaction moved the revision")
	}

	// Below the floor: 410 naming the floor, for reads, history and the
	// change log.
	for _, tc := range []struct {
		ep   subjects.Endpoint
		body map[string]any
	}{
		{subjects.KVGet, map[string]any{"key": "cp.k", "revision": revs[1]}},
		{subjects.KVGet, map[string]any{"prefix": "cp.", "revision": floor - 1}},
		{subjects.KVHistory, map[string]any{"key": "cp.k", "from_revision": floor}},
		{subjects.KVHistory, map[string]any{"key": "cp.k", "from_revision": 1, "to_revision": floor + 1}},
		{subjects.KVChanges, map[string]any{"prefix": "", "after_revision": 0}},
	} {
		e := c.fails(tc.ep, tc.body, schema.ErrCompacted)
		if e.Code != 410 || !strings.Contains(e.Description, strconv.FormatInt(floor, 10)) {
			t.Fatalf("%s %v: %+v, want 410 naming the floor %d", tc.ep, tc.body, e, floor)
		}
	}
	// At the floor and above: as before.
	kv := c.get(map[string]any{"key": "cp.k", "revision": floor}).KVs
	if len(kv) != 1 || string(kv[0].Value) != "3" || kv[0].ModRevision != revs[3] {
		t.Fatalf("cp.k at the floor %d: %+v", floor, kv)
	}
	h := c.history(map[string]any{"key": "cp.k"})
	if h.CompactRevision != floor || len(h.Records) != 2 || h.Records[0].Revision != revs[4] {
		t.Fatalf("the history after compaction: %+v", h)
	}
	var ch schema.KVChangesReply
	c.ok(subjects.KVChanges, map[string]any{"prefix": "", "after_revision": floor}, &ch)
	if ch.CompactRevision != floor || len(ch.Events) == 0 || ch.Events[0].Revision != floor+1 {
		t.Fatalf("the change log from the floor: %+v", ch)
	}
	// The present is untouched.
	if presentAfter, _ := c.fullState(); !slices.Equal(kvLines(presentAfter.KVs), kvLines(presentBefore.KVs)) {
		t.Fatalf("compaction changed the present:\n%q\n%q", kvLines(presentBefore.KVs), kvLines(presentAfter.KVs))
	}
	// Compacting to the present is allowed, and then only the present can
	// be read.
	c.ok(subjects.KVCompact, map[string]any{"revision": cur}, &cr)
	if cr.CompactRevision != cur {
		t.Fatalf("compact to the present %d: %+v", cur, cr)
	}
	if g := c.get(map[string]any{"prefix": "cp.", "revision": cur}); g.Count != 7 {
		t.Fatalf("a read at the floor, the present: %+v", g)
	}
	c.fails(subjects.KVGet, map[string]any{"prefix": "cp.", "revision": cur - 1}, schema.ErrCompacted)
}

// The CLI: kv get --rev, kv history and kv compact print what they should
// and exit with the documented codes.
func TestPastCLI(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	cl := newCLI(t, n.natsURL)
	cl.ok("kv", "put", "cli.a", "1")                // 1
	cl.ok("kv", "put", "cli.b", `{"x":2}`)          // 2
	cl.ok("kv", "put", "cli.a", "3")                // 3
	cl.ok("kv", "del", "cli.b")                     // 4
	cl.ok("kv", "put", "cli.c", "5", "--ttl", "60") // 5

	if out := cl.ok("kv", "get", "cli.a", "--rev", "1"); out != "cli.a 1\n" {
		t.Fatalf("kv get --rev 1: %q", out)
	}
	if out := cl.ok("kv", "get", "cli.", "--prefix", "--rev", "2"); out != "cli.a 1\ncli.b {\"x\":2}\n" {
		t.Fatalf("kv get --prefix --rev 2: %q", out)
	}
	r := cl.expect(cliOK, "kv", "get", "cli.", "--prefix", "--rev", "3", "--limit", "1")
	if r.stdout != "cli.a 3\n" || !strings.Contains(r.stderr, "continue with --after cli.a --rev 3") {
		t.Fatalf("kv get --prefix --rev 3 --limit 1: %v", r)
	}
	if out := cl.ok("kv", "get", "cli.", "--prefix", "--rev", "3", "--after", "cli.a"); out != "cli.b {\"x\":2}\n" {
		t.Fatalf("kv get --prefix --rev 3 --after cli.a: %q", out)
	}
	var g schema.KVGetReply
	cl.jsonOut(cliOK, "kv.get.reply", &g, "kv", "get", "cli.c", "--rev", "5")
	if g.Revision != 5 || len(g.KVs) != 1 || g.KVs[0].Lease == 0 || g.KVs[0].RemainingMS != nil {
		t.Fatalf("kv get --rev --json of a key with a lease: %+v", g)
	}
	if r := cl.expect(cliNotFound, "kv", "get", "cli.b", "--rev", "4"); !strings.Contains(r.stderr, "at revision 4") {
		t.Fatalf("kv get of a key deleted at that revision: %v", r)
	}
	if r := cl.expect(cliError, "kv", "get", "cli.a", "--rev", "99"); !strings.Contains(r.stderr, "future") {
		t.Fatalf("kv get --rev in the future: %v", r)
	}
	cl.expect(cliUsage, "kv", "get", "cli.a", "--rev", "-1")
	cl.expect(cliUsage, "kv", "get", "cli.a", "--rev", "x")

	// History.
	want := "revision=1 op_index=0 type=put key=cli.a cause=put value=1\nrevision=3 op_index=0 type=put key=cli.a cause=put value=3\n"
	if out := cl.ok("kv", "history", "cli.a"); out != want {
		t.Fatalf("kv history: %q", out)
	}
	if out := cl.ok("kv", "history", "cli.b", "--newest-first"); out != "revision=4 op_index=0 type=delete key=cli.b cause=delete\nrevision=2 op_index=0 type=put key=cli.b cause=put value={\"x\":2}\n" {
		t.Fatalf("kv history --newest-first: %q", out)
	}
	r = cl.expect(cliOK, "kv", "history", "cli.a", "--limit", "1")
	if r.stdout != "revision=1 op_index=0 type=put key=cli.a cause=put value=1\n" || !strings.Contains(r.stderr, "continue with --after 1") {
		t.Fatalf("kv history --limit 1: %v", r)
	}
	if out := cl.ok("kv", "history", "cli.a", "--after", "1"); out != "revision=3 op_index=0 type=put key=cli.a cause=put value=3\n" {
		t.Fatalf("kv history --after 1: %q", out)
	}
	if out := cl.ok("kv", "history", "cli.a", "--from", "2", "--to", "3"); out != "revision=3 op_index=0 type=put key=cli.a cause=put value=3\n" {
		t.Fatalf("kv history --from 2 --to 3: %q", out)
	}
	if out := cl.ok("kv", "history", "cli.never"); out != "" {
		t.Fatalf("kv history of a key never written: %q", out)
	}
	var h schema.KVHistoryReply
	cl.jsonOut(cliOK, "kv.history.reply", &h, "kv", "history", "cli.b")
	if len(h.Records) != 2 || h.Records[1].Cause != schema.CauseDelete || h.Revision != 5 {
		t.Fatalf("kv history --json: %+v", h)
	}
	cl.expect(cliError, "kv", "history", "cli.a", "--to", "99")
	cl.expect(cliError, "kv", "history", "cli.a", "--limit", "5000")
	cl.expect(cliError, "kv", "history", "bad key")
	cl.expect(cliUsage, "kv", "history", "cli.a", "--from", "x")
	cl.expect(cliUsage, "kv", "history")

	// Compaction.
	if r := cl.expect(cliError, "kv", "compact", "99"); !strings.Contains(r.stderr, "future") {
		t.Fatalf("kv compact in the future: %v", r)
	}
	cl.jsonOut(cliError, "error", nil, "kv", "compact", "99")
	for _, bad := range []string{"0", "x", "-1"} {
		cl.expect(cliUsage, "kv", "compact", bad)
	}
	cl.expect(cliUsage, "kv", "compact")
	if out := cl.ok("kv", "get", "cli.a", "--rev", "1"); out != "cli.a 1\n" {
		t.Fatalf("refused compactions changed a read at revision 1: %q", out)
	}
	if out := cl.ok("kv", "compact", "3"); out != "compacted: the history starts after revision 3 (current revision 5)\n" {
		t.Fatalf("kv compact 3: %q", out)
	}
	var cr schema.KVCompactReply
	cl.jsonOut(cliOK, "kv.compact.reply", &cr, "kv", "compact", "2") // lower: no change
	if cr.CompactRevision != 3 || cr.Revision != 5 {
		t.Fatalf("kv compact 2 --json after compacting to 3: %+v", cr)
	}
	if r := cl.expect(cliCompacted, "kv", "get", "cli.a", "--rev", "2"); !strings.Contains(r.stderr, "oldest readable revision is 3") {
		t.Fatalf("kv get --rev below the floor: %v", r)
	}
	var er schema.ErrorReply
	cl.jsonOut(cliCompacted, "error", &er, "kv", "get", "cli.", "--prefix", "--rev", "1")
	if er.Error == nil || er.Error.Code != 410 || er.Error.Name != schema.ErrCompacted {
		t.Fatalf("kv get --prefix --rev 1 --json below the floor: %+v", er)
	}
	cl.expect(cliCompacted, "kv", "history", "cli.a", "--from", "3")
	if out := cl.ok("kv", "get", "cli.a", "--rev", "3"); out != "cli.a 3\n" {
		t.Fatalf("kv get --rev at the floor: %q", out)
	}
	if out := cl.ok("kv", "history", "cli.b"); out != "revision=4 op_index=0 type=delete key=cli.b cause=delete\n" {
		t.Fatalf("kv history after compaction: %q", out)
	}
	// The usage text lists the commands.
	help := cl.ok("help")
	for _, s := range []string{"concord kv get KEY [--prefix] [--rev N]", "concord kv history KEY", "concord kv compact REV", "kv get --rev or kv history --from"} {
		if !strings.Contains(help, s) {
			t.Errorf("concord help lacks %q", s)
		}
	}
}

// One 3-node cluster: after writes and a compaction, a key and a prefix
// read at a past revision, a key's history and a read below the floor are
// answered by the leader; the leader is killed (kill -9); the new leader
// answers the same requests with byte-identical bodies.
func TestPastReadsAfterFailover(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 3)
	nc := cl.conn()
	do := func(subject string, body any) []byte {
		t.Helper()
		data, e, err := request(nc, subject, body, "", 60*time.Second)
		if err != nil {
			t.Fatalf("%s %v: %v", subject, body, err)
		}
		if e != nil {
			out, _ := json.Marshal(schema.ErrorReply{Error: e})
			return out
		}
		return data
	}
	put := func(key string, value any, lease any) int64 {
		t.Helper()
		var p schema.KVPutReply
		mustUnmarshal(t, do("concord.kv.put", map[string]any{"key": key, "value": value, "lease": lease}), &p)
		return p.Revision
	}
	var g schema.LeaseGrantReply
	mustUnmarshal(t, do("concord.lease.grant", map[string]any{"ttl": 60}), &g)
	for i := range 20 {
		put(fmt.Sprintf("fo.p.%02d", i), i, g.ID)
	}
	var kRevs []int64
	for i := range 8 {
		kRevs = append(kRevs, put("fo.k", map[string]int{"v": i}, 0))
		put(fmt.Sprintf("fo.p.%02d", i*2), "again", 0) // detached from the lease
	}
	do("concord.kv.delete", map[string]any{"key": "fo.k"})
	do("concord.kv.delete", map[string]any{"prefix": "fo.p.1"})
	put("fo.k", "back", 0)
	do("concord.lease.revoke", map[string]any{"id": g.ID}) // a tombstone per odd key; no lease left to expire
	var present schema.KVGetReply
	mustUnmarshal(t, do("concord.kv.get", map[string]any{"prefix": "", "count_only": true}), &present)
	cur := present.Revision
	floor, past := kRevs[2], kRevs[5]
	var cr schema.KVCompactReply
	mustUnmarshal(t, do("concord.kv.compact", map[string]any{"revision": floor}), &cr)
	if cr.CompactRevision != floor || cr.Revision != cur {
		t.Fatalf("compact to %d: %+v", floor, cr)
	}

	reads := []struct {
		subject string
		body    map[string]any
	}{
		{"concord.kv.get", map[string]any{"key": "fo.k", "revision": past}},
		{"concord.kv.get", map[string]any{"key": "fo.p.04", "revision": past}},
		{"concord.kv.get", map[string]any{"prefix": "fo.", "revision": past}},
		{"concord.kv.get", map[string]any{"prefix": "fo.p.", "revision": past, "limit": 5}},
		{"concord.kv.get", map[string]any{"prefix": "fo.p.", "revision": past, "limit": 5, "after": "fo.p.04"}},
		{"concord.kv.get", map[string]any{"prefix": "fo.", "revision": floor}},
		{"concord.kv.get", map[string]any{"prefix": "fo.", "revision": floor - 1}}, // 410
		{"concord.kv.history", map[string]any{"key": "fo.k"}},
		{"concord.kv.history", map[string]any{"key": "fo.k", "newest_first": true, "limit": 3}},
		{"concord.kv.history", map[string]any{"key": "fo.p.01"}},                      // lease_revoked
		{"concord.kv.history", map[string]any{"key": "fo.p.14"}},                      // a put and the prefix delete
		{"concord.kv.history", map[string]any{"key": "fo.k", "from_revision": floor}}, // 410
	}
	read := func() []string {
		var out []string
		for _, r := range reads {
			out = append(out, string(do(r.subject, r.body)))
		}
		return out
	}
	before := read()
	compacted := 0
	for i, b := range before {
		switch {
		case strings.Contains(b, `"error"`) && strings.Contains(b, `"code":410`) && strings.Contains(b, strconv.FormatInt(floor, 10)):
			compacted++
		case strings.Contains(b, `"error"`):
			t.Fatalf("%s %v: %s", reads[i].subject, reads[i].body, b)
		case strings.Contains(b, `"kvs":[]`) || strings.Contains(b, `"records":[]`):
			t.Fatalf("%s %v read nothing: %s", reads[i].subject, reads[i].body, b)
		}
	}
	if compacted != 2 {
		t.Fatalf("%d reads below the floor answered 410, want 2: %q", compacted, before)
	}

	old := cl.leaderIndex(nc)
	cl.nodes[old].kill()
	checkFor(t, 60*time.Second, 200*time.Millisecond, func() error {
		st, err := cl.status(nc, false)
		if err != nil {
			return err
		}
		if st.Leader == "" || st.Leader == fmt.Sprintf("n%d", old+1) {
			return fmt.Errorf("leader %q", st.Leader)
		}
		return nil
	})
	after := read()
	for i := range reads {
		if after[i] != before[i] {
			t.Errorf("%s %v:\nold leader: %s\nnew leader: %s", reads[i].subject, reads[i].body, before[i], after[i])
		}
	}
	if now := cl.leaderIndex(nc); now == old {
		t.Fatalf("n%d still leads", old+1)
	}
}
