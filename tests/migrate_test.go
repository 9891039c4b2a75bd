package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// The data directory a release before the WAL wrote (raft.db, bbolt), and
// the state that release reported just before it stopped. Made by
// TestWriteV1DataDir; see testdata/README.md.
const (
	v1DataDir = "testdata/datadir-v1"
	v1State   = "testdata/datadir-v1.json"
)

// v1Expect is the state the old release reported: every key and lease,
// with the time each had left at that moment.
type v1Expect struct {
	Revision int64              `json:"revision"`
	KVs      []schema.KeyValue  `json:"kvs"`
	Leases   []schema.LeaseInfo `json:"leases"`
}

// TestWriteV1DataDir rewrites the v1 test data with an old binary:
// CONCORD_WRITE_V1_DATADIR=/path/to/old/concord go test ./tests -run TestWriteV1DataDir.
// A small snapshot threshold and trailing-log count leave a snapshot and a
// compacted log whose first index is past 1, with entries after the
// snapshot.
func TestWriteV1DataDir(t *testing.T) {
	t.Parallel()
	old := os.Getenv("CONCORD_WRITE_V1_DATADIR")
	if old == "" {
		t.Skip("set CONCORD_WRITE_V1_DATADIR to a binary of the release before the WAL to rewrite the test data")
	}
	n := startNode(t, nodeOpts{bin: old, flags: []string{"--snapshot-threshold", "64", "--snapshot-interval", "100ms", "--trailing-logs", "16"}})
	c := connect(t, n.natsURL)
	var g schema.LeaseGrantReply
	c.ok(subjects.LeaseGrant, map[string]any{"ttl": 3600, "metadata": map[string]any{"owner": "v1"}}, &g)
	svc := g.ID
	c.put("svc.a", "a", svc)
	c.put("svc.b", map[string]any{"n": 2}, svc)
	gone := c.grant(3600)
	c.put("gone.x", "x", gone)
	c.ok(subjects.LeaseRevoke, map[string]any{"id": gone}, nil)
	c.ok(subjects.KVPut, map[string]any{"key": "ttl.k", "value": "anon", "ttl": 3600}, nil)
	short := c.grant(900)
	c.put("short.k", 1, short)
	for i := 0; i < 150; i++ {
		c.put(fmt.Sprintf("bulk.%03d", i), i, 0)
	}
	c.ok(subjects.KVDelete, map[string]any{"prefix": "bulk.01"}, nil)
	checkFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		if snaps := finishedSnapshots(n.dataDir); len(snaps) == 0 {
			return fmt.Errorf("no snapshot yet")
		}
		return nil
	})
	// Only in the log, after the snapshot.
	for i := 0; i < 5; i++ {
		c.put(fmt.Sprintf("after.%d", i), i, svc)
	}
	c.ok(subjects.LeaseKeepAlive, map[string]any{"id": svc}, nil)
	c.ok(subjects.KVTxn, map[string]any{
		"compare": []any{map[string]any{"key": "lock.x", "target": "create_revision", "op": "==", "value": 0}},
		"success": []any{map[string]any{"put": map[string]any{"key": "lock.x", "value": "held", "lease": short}}},
	}, nil)
	var want v1Expect
	kvs, leases := c.fullState()
	want.Revision, want.KVs, want.Leases = kvs.Revision, kvs.KVs, leases
	n.stop()

	if err := os.RemoveAll(v1DataDir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"node-id", "cluster-id", "raft.db", "snapshots"} {
		if err := copyTree(filepath.Join(n.dataDir, name), filepath.Join(v1DataDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.MarshalIndent(want, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(v1State, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The new release starts on a data directory the release before the WAL
// wrote: it migrates the log once, and every key, lease and the revision
// survive; each lease keeps the time it had left (never less, at most a
// tick more), as after any restart.
func TestMigratesV1DataDir(t *testing.T) {
	t.Parallel()
	var want v1Expect
	b, err := os.ReadFile(v1State)
	if err != nil {
		t.Fatal(err)
	}
	mustUnmarshal(t, b, &want)
	// The file is indented; replies are compact.
	for i := range want.KVs {
		want.KVs[i].Value = mustJSON(t, string(want.KVs[i].Value))
	}
	for i := range want.Leases {
		want.Leases[i].Metadata = mustJSON(t, string(want.Leases[i].Metadata))
	}
	data := filepath.Join(t.TempDir(), "data")
	if err := copyTree(v1DataDir, data); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	n := startNode(t, nodeOpts{dataDir: data})
	c := connect(t, n.natsURL)
	kvs, leases := c.fullState()
	sinceStart := time.Since(started)

	checkMigratedState(t, want, kvs, leases, sinceStart)
	for _, p := range []string{"wal/wal-meta.db", "raft.db.migrated"} {
		if _, err := os.Stat(filepath.Join(data, p)); err != nil {
			t.Errorf("after migration: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(data, "raft.db")); !os.IsNotExist(err) {
		t.Errorf("raft.db still there after migration: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "wal.migrating")); !os.IsNotExist(err) {
		t.Errorf("wal.migrating left behind: %v", err)
	}
	orig, _ := os.ReadFile(filepath.Join(v1DataDir, "raft.db"))
	kept, _ := os.ReadFile(filepath.Join(data, "raft.db.migrated"))
	if len(orig) == 0 || !bytes.Equal(orig, kept) {
		t.Errorf("raft.db.migrated (%d bytes) is not the old raft.db (%d bytes)", len(kept), len(orig))
	}

	// The migrated node goes on: new writes, a lease id past the old ones,
	// and a kill -9 and restart that neither loses them nor migrates again.
	var maxID int64
	for _, l := range want.Leases {
		maxID = max(maxID, l.ID)
	}
	if id := c.grant(60); id <= maxID {
		t.Errorf("new lease id %d reuses an old one (largest %d)", id, maxID)
	}
	rev := c.put("new.after.migration", 1, 0)
	n.kill()
	n.restart()
	c = connect(t, n.natsURL)
	if g := c.get(map[string]any{"key": "new.after.migration"}); len(g.KVs) != 1 || g.KVs[0].ModRevision != rev {
		t.Fatalf("write after migration lost over a restart: %+v", g)
	}
	if got := c.get(map[string]any{"key": "svc.a"}); len(got.KVs) != 1 {
		t.Fatal("migrated key lost over a second restart")
	}
	if again, _ := os.ReadFile(filepath.Join(data, "raft.db.migrated")); !bytes.Equal(orig, again) {
		t.Error("raft.db.migrated changed on the second start")
	}
}

// checkMigratedState compares the state after migration with what the old
// release reported. The old release measured remaining time at its
// running lease clock; its log recorded that clock up to one tick (1 s)
// earlier, and the new node resumes from the log: a lease may gain up to
// that tick, and loses at most the time since the new node started.
func checkMigratedState(t *testing.T, want v1Expect, kvs schema.KVGetReply, leases []schema.LeaseInfo, sinceStart time.Duration) {
	t.Helper()
	if kvs.Revision != want.Revision {
		t.Errorf("revision %d after migration, want %d", kvs.Revision, want.Revision)
	}
	within := func(what string, before, after int64) {
		t.Helper()
		if after < before-sinceStart.Milliseconds() {
			t.Errorf("%s: %d ms left after migration, %d before and only %s since start: expires early", what, after, before, sinceStart)
		}
		if after > before+(time.Second+lateMargin).Milliseconds() {
			t.Errorf("%s: %d ms left after migration, %d before: gained more than a tick", what, after, before)
		}
	}
	if len(kvs.KVs) != len(want.KVs) {
		t.Fatalf("%d keys after migration, want %d", len(kvs.KVs), len(want.KVs))
	}
	for i, w := range want.KVs {
		g := kvs.KVs[i]
		if (g.RemainingMS == nil) != (w.RemainingMS == nil) {
			t.Errorf("key %s: remaining %v, want %v", w.Key, g.RemainingMS, w.RemainingMS)
		} else if w.RemainingMS != nil {
			within("key "+w.Key, *w.RemainingMS, *g.RemainingMS)
		}
		g.RemainingMS, w.RemainingMS = nil, nil
		if !reflect.DeepEqual(g, w) {
			t.Errorf("key after migration %+v, want %+v", g, w)
		}
	}
	if len(leases) != len(want.Leases) {
		t.Fatalf("%d leases after migration, want %d", len(leases), len(want.Leases))
	}
	for i, w := range want.Leases {
		g := leases[i]
		within(fmt.Sprintf("lease %d", w.ID), w.RemainingMS, g.RemainingMS)
		g.RemainingMS, g.RemainingTTL, w.RemainingMS, w.RemainingTTL = 0, 0, 0, 0
		if !reflect.DeepEqual(g, w) {
			t.Errorf("lease after migration %+v, want %+v", g, w)
		}
	}
}

// copyTree copies a file or a directory tree.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
			return err
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
