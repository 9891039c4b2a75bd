package tests

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
	"github.com/concord-io/concord/tests/freeport"
)

// A backup carries the retained history: keys written several times (with
// content types and metadata, deletes, a revoked lease's keys, a range
// delete), then compacted; `concord snapshot save`, `concord snapshot
// restore` into a fresh data directory, and the restored node answers
// every read at a past revision, every key's history and the change log
// with byte-identical bodies, and reads below the floor with the same 410.
func TestBackupCarriesHistory(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	lease := c.grant(600)
	keys := []string{"bh.a", "bh.b", "bh.c.x", "bh.c.y", "bhx.a"}
	for round := range 4 {
		for i, k := range keys {
			req := map[string]any{"key": k, "value": map[string]int{"round": round, "i": i}}
			switch {
			case i == 1:
				req["content_type"] = "application/json"
				req["metadata"] = map[string]any{"round": round}
			case i == 2 && round == 3:
				req["lease"] = lease
			}
			c.ok(subjects.KVPut, req, nil)
		}
		if round == 1 {
			c.ok(subjects.KVDelete, map[string]any{"key": "bh.a"}, nil)
		}
	}
	c.ok(subjects.LeaseRevoke, map[string]any{"id": lease}, nil)                               // bh.c.x: lease_revoked
	c.ok(subjects.KVDelete, map[string]any{"range_start": "bh.c.", "range_end": "bh.c/"}, nil) // bh.c.y
	c.put("bh.a", "last", 0)
	cur := c.revision()
	floor := int64(7)
	var cr schema.KVCompactReply
	c.ok(subjects.KVCompact, map[string]any{"revision": floor}, &cr)
	if cr.CompactRevision != floor || cr.Revision != cur {
		t.Fatalf("compact to %d: %+v", floor, cr)
	}

	// The reads to compare: the keyspace, a prefix, a range and one key at
	// every revision from below the floor to the present; every key's
	// history, both ways; the change log from the floor.
	type read struct {
		ep   subjects.Endpoint
		body map[string]any
	}
	var reads []read
	for rev := floor - 2; rev <= cur; rev++ {
		reads = append(reads,
			read{subjects.KVGet, map[string]any{"prefix": "", "revision": rev}},
			read{subjects.KVGet, map[string]any{"prefix": "bh", "revision": rev, "limit": 2, "after": "bh.a"}},
			read{subjects.KVGet, map[string]any{"range_start": "bh.c.", "range_end": "bh.c/", "revision": rev}},
			read{subjects.KVGet, map[string]any{"key": "bh.b", "revision": rev}},
		)
	}
	for _, k := range keys {
		reads = append(reads,
			read{subjects.KVHistory, map[string]any{"key": k}},
			read{subjects.KVHistory, map[string]any{"key": k, "newest_first": true, "limit": 2}},
			read{subjects.KVHistory, map[string]any{"key": k, "from_revision": floor}}, // 410
		)
	}
	reads = append(reads,
		read{subjects.KVChanges, map[string]any{"prefix": "", "after_revision": floor}},
		read{subjects.KVChanges, map[string]any{"range_start": "bh.c.", "range_end": "bh.c/", "after_revision": floor}},
		read{subjects.KVChanges, map[string]any{"prefix": "", "after_revision": floor - 1}}, // 410
		read{subjects.KVGet, map[string]any{"prefix": ""}},
	)
	answer := func(c *client) []string {
		var out []string
		for _, r := range reads {
			rep := c.raw(r.ep, r.body)
			if rep.err != nil {
				out = append(out, fmt.Sprintf("error %d %s %s", rep.err.Code, rep.err.Name, rep.err.Description))
				continue
			}
			out = append(out, string(rep.data))
		}
		return out
	}
	before := answer(c)
	// The reads are what they should be: 410 naming the floor below it,
	// and content types and metadata in the past.
	compacted := 0
	for i, b := range before {
		switch {
		case strings.HasPrefix(b, "error 410 compacted") && strings.Contains(b, strconv.FormatInt(floor, 10)):
			compacted++
		case strings.HasPrefix(b, "error"):
			t.Fatalf("%s %v: %s", reads[i].ep, reads[i].body, b)
		}
	}
	if want := 2*4 + len(keys) + 1; compacted != want {
		t.Fatalf("%d reads got 410, want %d", compacted, want)
	}
	for i, k := range keys {
		if h := before[(int(cur-floor)+3)*4+3*i]; !strings.Contains(h, `"records":[{`) {
			t.Fatalf("the history of %s before the backup is empty: %s", k, h)
		}
	}
	var pastB schema.KVGetReply
	mustUnmarshal(t, []byte(before[4*2+3]), &pastB) // bh.b at the floor
	if len(pastB.KVs) != 1 || pastB.KVs[0].ContentType != "application/json" || string(pastB.KVs[0].Metadata) != `{"round":1}` {
		t.Fatalf("bh.b at the floor %d: %s", floor, before[4*2+3])
	}

	// Save, restore into a new data directory, start.
	file := filepath.Join(t.TempDir(), "history.concord")
	newCLI(t, n.natsURL).ok("snapshot", "save", file)
	b := readBackupFile(t, file)
	if b.header.Revision != cur || b.header.FormatVersion < 4 {
		t.Fatalf("the backup's header: %+v", b.header)
	}
	n.stop()
	dir := filepath.Join(t.TempDir(), "restored")
	raftAddr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	if out := restore(t, file, dir, "r1", raftAddr); out["revision"] != float64(cur) {
		t.Fatalf("restore: %v", out)
	}
	rc := connect(t, startRestored(t, dir, "r1", raftAddr, 1).urls[0])

	after := answer(rc)
	for i := range reads {
		if after[i] != before[i] {
			t.Errorf("%s %v:\nbefore the backup: %s\nrestored:          %s", reads[i].ep, reads[i].body, before[i], after[i])
		}
	}
	// And the restored node goes on from there: a new write takes the next
	// revision, and the history continues.
	if rev := rc.put("bh.b", "after", 0); rev != cur+1 {
		t.Fatalf("the first write after the restore at %d, want %d", rev, cur+1)
	}
	h := rc.history(map[string]any{"key": "bh.b"})
	var hb schema.KVHistoryReply
	mustUnmarshal(t, []byte(before[(int(cur-floor)+3)*4+3]), &hb) // bh.b's (keys[1]) history before
	if len(h.Records) != len(hb.Records)+1 || h.CompactRevision != floor {
		got, _ := json.Marshal(h)
		t.Fatalf("bh.b's history after a new write: %s", got)
	}
}
