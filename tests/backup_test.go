package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
	"github.com/concord-io/concord/tests/freeport"
)

// Exit code of the snapshot commands for a backup that fails verification.
const cliBadBackup = 8

// goldenBackup is a backup file written by `concord snapshot save` of the
// first backup file version (TestBackupWriteGolden made it). It must
// restore, to exactly the state TestBackupGoldenRestore expects, in every
// later version: never regenerate it, add a file for a new version.
const goldenBackup = "testdata/backup-v1.golden"

// backupFile is a backup file as the tests read it: the file header, and
// the payload parsed by the documented fsm snapshot format of version 4
// (one JSON line of header, then one per lease and one per key). A payload
// in the binary version 5 is read by package fsm and written again in
// version 4 for that.
type backupFile struct {
	magic  string
	header struct {
		Format        string `json:"format"`
		FormatVersion int    `json:"format_version"`
		Revision      int64  `json:"revision"`
		AppliedIndex  uint64 `json:"applied_index"`
		ClusterID     string `json:"cluster_id"`
		Leader        string `json:"leader"`
		Created       string `json:"created"`
		Size          int64  `json:"size"`
		SHA256        string `json:"sha256"`
	}
	state struct {
		Revision    int64 `json:"revision"`
		NextLeaseID int64 `json:"next_lease_id"`
		Now         int64 `json:"now"`
		Leases      int   `json:"leases"`
		Keys        int   `json:"keys"`
	}
	leases []backupLease
	kvs    []schema.KeyValue
}

// backupLease is a lease line of the payload.
type backupLease struct {
	ID        int64           `json:"id"`
	TTL       int64           `json:"ttl"`
	Deadline  int64           `json:"deadline"`
	Anonymous bool            `json:"anonymous"`
	Metadata  json.RawMessage `json:"metadata"`
}

func readBackupFile(t *testing.T, path string) backupFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var b backupFile
	r := bufio.NewReader(bytes.NewReader(data))
	line, _ := r.ReadString('\n')
	b.magic = strings.TrimSuffix(line, "\n")
	line, _ = r.ReadString('\n')
	mustUnmarshal(t, []byte(line), &b.header)
	payload, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.HasPrefix(payload, []byte(fsm.SnapshotFormat+" v")) {
		st := fsm.New()
		if err := st.Restore(bytes.NewReader(payload)); err != nil {
			t.Fatalf("the payload of %s: %v", path, err)
		}
		var v4 bytes.Buffer
		if _, err := st.Snapshot().WriteVersion(&v4, 4); err != nil {
			t.Fatal(err)
		}
		payload = v4.Bytes()
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := dec.Decode(&b.state); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < b.state.Leases; i++ {
		var l backupLease
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		b.leases = append(b.leases, l)
	}
	for i := 0; i < b.state.Keys; i++ {
		var kv schema.KeyValue
		if err := dec.Decode(&kv); err != nil {
			t.Fatal(err)
		}
		b.kvs = append(b.kvs, kv)
	}
	return b
}

// remainingMS is the time a lease had left in the backup.
func (b backupFile) remainingMS(l backupLease) int64 { return max(l.Deadline-b.state.Now, 0) }

// restore runs `concord snapshot restore` and returns its JSON report.
func restore(t *testing.T, file, dir, nodeID, raftAddr string) map[string]any {
	t.Helper()
	r := newCLI(t, "").expect(cliOK, "snapshot", "restore", file, "--data-dir", dir, "--node-id", nodeID, "--raft-addr", raftAddr, "--json")
	var out map[string]any
	mustUnmarshal(t, []byte(r.stdout), &out)
	return out
}

// startRestored starts a cluster of size nodes on a restored data
// directory: the first node serves dir as nodeID at raftAddr (as it was
// restored), and the others join it with empty directories.
func startRestored(t *testing.T, dir, nodeID, raftAddr string, size int) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir()}
	var routes []string
	clusterPorts := make([]int, size)
	for i := 0; i < size; i++ {
		clusterPorts[i] = freeport.Port(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", clusterPorts[i]))
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t)))
		addr := raftAddr
		if i > 0 {
			addr = fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
		}
		c.raftAddrs = append(c.raftAddrs, addr)
	}
	for i := 0; i < size; i++ {
		id, data := nodeID, dir
		if i > 0 {
			id, data = fmt.Sprintf("j%d", i+1), filepath.Join(c.dir, fmt.Sprintf("data-j%d", i+1))
		}
		args := []string{"serve", "--node-id", id, "--data-dir", data, "--raft-addr", c.raftAddrs[i],
			"--nats-listen", strings.TrimPrefix(c.urls[i], "nats://")}
		if size > 1 {
			args = append(args, "--nats-cluster", fmt.Sprintf("127.0.0.1:%d", clusterPorts[i]), "--nats-routes", strings.Join(routes, ","))
		}
		if i > 0 {
			args = append(args, "--join")
		}
		n := &node{t: t, dataDir: data, natsURL: c.urls[i], args: args, logPath: filepath.Join(c.dir, id+".log")}
		n.start()
		c.nodes = append(c.nodes, n)
		if i == 0 {
			n.waitReady()
		}
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.kill()
			if t.Failed() {
				if b, err := os.ReadFile(n.logPath); err == nil {
					t.Logf("%s log:\n%s", n.logPath, tail(string(b), 40))
				}
			}
		}
	})
	c.waitMembers(size, 30*time.Second)
	return c
}

// checkRestored compares a restored node's state with the backup's: every
// key exactly, every lease with its ttl, metadata and keys, and its
// remaining time in [backup's remaining − elapsed − 1 s, backup's
// remaining], where elapsed is the time since the node was started.
func checkRestored(t *testing.T, c *client, b backupFile, started time.Time) {
	t.Helper()
	kvs, leases := c.fullState()
	elapsed := time.Since(started).Milliseconds()
	if kvs.Revision != b.header.Revision || kvs.Revision != b.state.Revision {
		t.Errorf("revision %d, the backup's %d (payload %d)", kvs.Revision, b.header.Revision, b.state.Revision)
	}
	if len(kvs.KVs) != len(b.kvs) {
		t.Errorf("%d keys, the backup has %d", len(kvs.KVs), len(b.kvs))
	}
	byLease := map[int64][]string{}
	for i, want := range b.kvs {
		if want.Lease != 0 {
			byLease[want.Lease] = append(byLease[want.Lease], want.Key)
		}
		if i >= len(kvs.KVs) {
			continue
		}
		got := kvs.KVs[i]
		if got.Key != want.Key || !bytes.Equal(got.Value, want.Value) || got.CreateRevision != want.CreateRevision ||
			got.ModRevision != want.ModRevision || got.Version != want.Version || got.Lease != want.Lease {
			t.Errorf("key %d: %s %s create %d mod %d version %d lease %d; the backup has %s %s create %d mod %d version %d lease %d",
				i, got.Key, got.Value, got.CreateRevision, got.ModRevision, got.Version, got.Lease,
				want.Key, want.Value, want.CreateRevision, want.ModRevision, want.Version, want.Lease)
		}
	}
	if len(leases) != len(b.leases) {
		t.Fatalf("%d leases, the backup has %d", len(leases), len(b.leases))
	}
	for i, want := range b.leases {
		got := leases[i]
		meta := want.Metadata
		if len(meta) == 0 {
			meta = json.RawMessage(`{}`)
		}
		if got.ID != want.ID || got.TTL != want.TTL || got.Anonymous != want.Anonymous || !bytes.Equal(got.Metadata, meta) || got.KeyCount != int64(len(byLease[want.ID])) {
			t.Errorf("lease %d: %+v; the backup has %+v with %d keys", i, got, want, len(byLease[want.ID]))
		}
		rem := b.remainingMS(want)
		if got.RemainingMS > rem || got.RemainingMS < rem-elapsed-1000 {
			t.Errorf("lease %d: %d ms left, the backup had %d ms and %d ms passed", want.ID, got.RemainingMS, rem, elapsed)
		}
		if !want.Anonymous {
			info := c.info(want.ID, true)
			if strings.Join(info.Keys, ",") != strings.Join(byLease[want.ID], ",") {
				t.Errorf("lease %d: keys %q, the backup has %q", want.ID, info.Keys, byLease[want.ID])
			}
		}
	}
}

// TestBackupWriteGolden writes goldenBackup; it runs only with
// CONCORD_WRITE_GOLDEN=1 and never overwrites the file.
func TestBackupWriteGolden(t *testing.T) {
	t.Parallel()
	if os.Getenv("CONCORD_WRITE_GOLDEN") != "1" {
		t.Skip("set CONCORD_WRITE_GOLDEN=1 to write " + goldenBackup)
	}
	if _, err := os.Stat(goldenBackup); err == nil {
		t.Fatalf("%s exists: a golden file is never regenerated", goldenBackup)
	}
	if err := os.MkdirAll(filepath.Dir(goldenBackup), 0o755); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, nodeOpts{flags: []string{"--node-id", "n1"}})
	c := connect(t, n.natsURL)
	for _, op := range goldenOps {
		if op.ep == "" {
			// Wait for the short lease to expire: its key goes at one revision.
			checkFor(t, 10*time.Second, 50*time.Millisecond, func() error {
				if r := c.raw(subjects.LeaseInfo, `{"id":2}`); r.err == nil {
					return fmt.Errorf("lease 2 still there")
				}
				return nil
			})
			continue
		}
		c.ok(op.ep, op.body, nil)
	}
	newCLI(t, n.natsURL).ok("snapshot", "save", goldenBackup)
}

// goldenOps made goldenBackup, in this order; an empty endpoint waits for
// lease 2 to expire.
var goldenOps = []struct {
	ep   subjects.Endpoint
	body string
}{
	{subjects.LeaseGrant, `{"ttl":3600,"metadata":{"owner":"golden","tags":["a","b"],"html":"<&>"}}`}, // lease 1
	{subjects.KVPut, `{"key":"svc.api.n1","value":{"addr":"10.0.0.5"},"lease":1}`},                    // rev 1
	{subjects.KVPut, `{"key":"svc.api.n2","value":{"addr":"10.0.0.6","tags":["x"]},"lease":1}`},       // rev 2
	{subjects.KVPut, `{"key":"cfg.a","value":"one"}`},                                                 // rev 3
	{subjects.KVPut, `{"key":"cfg.a","value":"two"}`},                                                 // rev 4
	{subjects.KVPut, `{"key":"cfg.a","value":"three","idempotency_key":"golden:put-1"}`},              // rev 5
	{subjects.LeaseGrant, `{"ttl":2}`},                                                                // lease 2, expires
	{subjects.KVPut, `{"key":"tmp.gone","value":true,"lease":2}`},                                     // rev 6
	{subjects.KVPut, `{"key":"tmp.anon","value":{"note":"<&>"},"ttl":3600}`},                          // rev 7, anonymous lease 3
	{subjects.KVTxn, goldenTxn},                                                                       // rev 8
	{subjects.KVPut, `{"key":"del.me","value":1}`},                                                    // rev 9
	{subjects.KVDelete, `{"key":"del.me"}`},                                                           // rev 10
	{subjects.LeaseGrant, `{"ttl":7200,"id":10}`},                                                     // lease 10: the counter moves to 11
	{"", ""}, // lease 2 expires: rev 11
	{subjects.KVPut, `{"key":"cfg.b","value":null}`}, // rev 12
}

// goldenTxn is the transaction of goldenOps: a lock taken on lease 1.
const goldenTxn = `{"compare":[{"key":"locks.build","target":"create_revision","op":"==","value":0}],` +
	`"success":[{"put":{"key":"locks.build","value":"n1","lease":1}},{"get":{"key":"cfg.a"}}],` +
	`"failure":[{"get":{"key":"locks.build"}}],"idempotency_key":"golden:txn-1"}`

// A backup file of the first version restores, through the real binary, to
// exactly the state it was taken of.
func TestBackupGoldenRestore(t *testing.T) {
	t.Parallel()
	b := readBackupFile(t, goldenBackup)
	if b.magic != "concord-backup v1" || b.header.Format != "concord.fsm" || b.header.FormatVersion != 3 || b.header.Revision != 12 {
		t.Fatalf("golden file %q %+v", b.magic, b.header)
	}
	st := newCLI(t, "").expect(cliOK, "snapshot", "status", goldenBackup).stdout
	for _, want := range []string{"concord-backup v1", "concord.fsm version 3", b.header.SHA256 + " (verified)", "revision   12", "keys       6", "leases     3"} {
		if !strings.Contains(st, want) {
			t.Errorf("status lacks %q:\n%s", want, st)
		}
	}

	dir := filepath.Join(t.TempDir(), "restored")
	raftAddr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	out := restore(t, goldenBackup, dir, "g1", raftAddr)
	if out["cluster_id"] == b.header.ClusterID || out["revision"] != float64(12) {
		t.Fatalf("restore: %v", out)
	}
	started := time.Now()
	cl := startRestored(t, dir, "g1", raftAddr, 1)
	c := connect(t, cl.urls[0])
	checkRestored(t, c, b, started)

	// The exact contents, written out.
	type kv struct {
		key, value                  string
		create, mod, version, lease int64
	}
	want := []kv{
		{"cfg.a", `"three"`, 3, 5, 3, 0},
		{"cfg.b", `null`, 12, 12, 1, 0},
		{"locks.build", `"n1"`, 8, 8, 1, 1},
		{"svc.api.n1", `{"addr":"10.0.0.5"}`, 1, 1, 1, 1},
		{"svc.api.n2", `{"addr":"10.0.0.6","tags":["x"]}`, 2, 2, 1, 1},
		{"tmp.anon", `{"note":"<&>"}`, 7, 7, 1, 3},
	}
	kvs, leases := c.fullState()
	if len(kvs.KVs) != len(want) || kvs.Revision != 12 {
		t.Fatalf("state at %d: %+v", kvs.Revision, kvs.KVs)
	}
	for i, w := range want {
		g := kvs.KVs[i]
		if g.Key != w.key || string(g.Value) != w.value || g.CreateRevision != w.create || g.ModRevision != w.mod || g.Version != w.version || g.Lease != w.lease {
			t.Errorf("key %d: %+v, want %+v", i, g, w)
		}
	}
	type lease struct {
		id, ttl, keys int64
		anonymous     bool
		metadata      string
	}
	wantLeases := []lease{
		{1, 3600, 3, false, `{"owner":"golden","tags":["a","b"],"html":"<&>"}`},
		{3, 3600, 1, true, `{}`},
		{10, 7200, 0, false, `{}`},
	}
	if len(leases) != len(wantLeases) {
		t.Fatalf("leases %+v", leases)
	}
	for i, w := range wantLeases {
		g := leases[i]
		if g.ID != w.id || g.TTL != w.ttl || g.KeyCount != w.keys || g.Anonymous != w.anonymous || string(g.Metadata) != w.metadata {
			t.Errorf("lease %d: %+v, want %+v", i, g, w)
		}
		if g.RemainingMS < (w.ttl-60)*1000 {
			t.Errorf("lease %d: %d ms left of %d s", w.id, g.RemainingMS, w.ttl)
		}
	}
	if keys := c.info(1, true).Keys; strings.Join(keys, ",") != "locks.build,svc.api.n1,svc.api.n2" {
		t.Errorf("lease 1 keys %q", keys)
	}
	c.fails(subjects.LeaseInfo, `{"id":2}`, schema.ErrLeaseNotFound)

	// The golden backup's payload is a version 3 snapshot, whose change log
	// lacks what reads at a past revision need: the history of the restored
	// cluster starts at the backup's revision, 12, and a read from before
	// it is told so.
	e := c.fails(subjects.KVChanges, `{"prefix":"","after_revision":0}`, schema.ErrCompacted)
	if e.Code != 410 || !strings.Contains(e.Description, "12") {
		t.Errorf("change log from 0: %+v, want 410 naming 12", e)
	}
	c.fails(subjects.KVGet, `{"key":"cfg.a","revision":11}`, schema.ErrCompacted)
	if events, last := c.readChanges(map[string]any{"prefix": "", "after_revision": 12}, 100); len(events) != 0 || last.CompactRevision != 12 {
		t.Errorf("change log from 12: %d events, floor %d", len(events), last.CompactRevision)
	}

	// The idempotency cache: the same requests get their first replies and
	// change nothing; a different request under a used key is refused.
	var put schema.KVPutReply
	c.ok(subjects.KVPut, `{"key":"cfg.a","value":"three","idempotency_key":"golden:put-1"}`, &put)
	if put.Revision != 5 {
		t.Errorf("retried put: revision %d, want the cached 5", put.Revision)
	}
	var txn schema.KVTxnReply
	c.ok(subjects.KVTxn, goldenTxn, &txn)
	if !txn.Succeeded || txn.Revision != 8 {
		t.Errorf("retried txn: %+v, want the cached success at 8", txn)
	}
	c.fails(subjects.KVPut, `{"key":"cfg.a","value":"four","idempotency_key":"golden:put-1"}`, schema.ErrIdempotencyConflict)
	if rev := c.revision(); rev != 12 {
		t.Errorf("revision %d after retries, want 12", rev)
	}
	// The lease id counter goes on.
	if id := c.grant(30); id != 11 || id != b.state.NextLeaseID {
		t.Errorf("new lease id %d, want 11 (the backup's next_lease_id %d)", id, b.state.NextLeaseID)
	}
}

// A backup of a 3-node cluster taken while writers put, delete, grant,
// keep alive and revoke is one consistent point: exactly the state the
// change log gives at its revision, with every transaction whole, every
// lease acknowledged before it and not revoked, and nothing granted after
// it. Restored into a new cluster (one node, then two more joining), it is
// that state, with the remaining time of every lease, the change log, the
// idempotency cache and the lease id counter.
func TestBackupClusterUnderWrites(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	nc := c.conn()
	names, _ := subjects.New(subjects.DefaultPrefix)
	cl := &client{t: t, nc: nc, names: names}
	seed := cl.grant(300)
	for i := 0; i < 20; i++ {
		cl.put(fmt.Sprintf("seed.%02d", i), map[string]any{"i": i}, seed)
	}
	var idem schema.KVPutReply
	cl.ok(subjects.KVPut, `{"key":"seed.idem","value":"once","idempotency_key":"backup-test:1"}`, &idem)

	// The writers.
	type leaseLife struct {
		grantSent, grantAck, revokeSent time.Time
	}
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
		lives    = map[int64]*leaseLife{}
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	req := func(ep subjects.Endpoint, body any, out any) bool {
		data, _ := json.Marshal(body)
		m, err := nc.Request(names.Request(ep), data, 10*time.Second)
		if err != nil {
			fail("%s: %v", ep, err)
			return false
		}
		if m.Header.Get(schema.HeaderErrorCode) != "" {
			fail("%s %s: %s", ep, data, m.Data)
			return false
		}
		if out != nil {
			_ = json.Unmarshal(m.Data, out)
		}
		return true
	}
	writer := func(f func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				f(i)
			}
		}()
	}
	writer(func(i int) { // puts, some on the seed lease, some with their own ttl
		body := map[string]any{"key": fmt.Sprintf("w.%d", i%200), "value": map[string]any{"i": i}}
		// By key, not by round: a key that holds an anonymous lease may not
		// be put on the seed lease (lease_conflict) until it is deleted.
		switch (i % 200) % 3 {
		case 1:
			body["lease"] = seed
		case 2:
			body["ttl"] = 300
		}
		req(subjects.KVPut, body, nil)
	})
	writer(func(i int) { // pairs written atomically, then deleted atomically
		a, b := fmt.Sprintf("pair.%d.a", i%50), fmt.Sprintf("pair.%d.b", i%50)
		ops := []map[string]any{{"put": map[string]any{"key": a, "value": i}}, {"put": map[string]any{"key": b, "value": i}}}
		if i%4 == 3 {
			ops = []map[string]any{{"delete": map[string]any{"key": a}}, {"delete": map[string]any{"key": b}}}
		}
		req(subjects.KVTxn, map[string]any{"success": ops}, nil)
	})
	writer(func(i int) { // deletes
		req(subjects.KVDelete, map[string]any{"key": fmt.Sprintf("w.%d", (i*7)%200)}, nil)
		time.Sleep(2 * time.Millisecond)
	})
	writer(func(i int) { // leases: grant, attach, keep alive, revoke every third
		life := &leaseLife{grantSent: time.Now()}
		var g schema.LeaseGrantReply
		if !req(subjects.LeaseGrant, map[string]any{"ttl": 120, "metadata": map[string]any{"n": i}}, &g) {
			return
		}
		life.grantAck = time.Now()
		mu.Lock()
		lives[g.ID] = life
		mu.Unlock()
		req(subjects.KVPut, map[string]any{"key": fmt.Sprintf("l.%d", g.ID), "value": i, "lease": g.ID}, nil)
		req(subjects.LeaseKeepAlive, map[string]any{"id": seed}, nil)
		if i%3 == 2 {
			mu.Lock()
			life.revokeSent = time.Now()
			mu.Unlock()
			req(subjects.LeaseRevoke, map[string]any{"id": g.ID}, nil)
		}
	})

	time.Sleep(700 * time.Millisecond)
	file := filepath.Join(t.TempDir(), "cluster.backup")
	saveStart := time.Now()
	r := newCLI(t, strings.Join(c.urls, ",")).expect(cliOK, "snapshot", "save", file, "--json", "--timeout", "20s")
	saveEnd := time.Now()
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d writer requests failed, first: %s", len(failures), failures[0])
	}
	var saved struct {
		File     string `json:"file"`
		Revision int64  `json:"revision"`
		SHA256   string `json:"sha256"`
	}
	mustUnmarshal(t, []byte(r.stdout), &saved)
	b := readBackupFile(t, file)
	if saved.File != file || saved.Revision != b.header.Revision || saved.SHA256 != b.header.SHA256 || b.state.Revision != b.header.Revision {
		t.Fatalf("save printed %s; the file says %+v", r.stdout, b.header)
	}
	rev := b.header.Revision
	if final := cl.revision(); final <= rev {
		t.Fatalf("the writers stopped at revision %d, the backup has %d: nothing was written during and after it", final, rev)
	}
	t.Logf("backup at revision %d of %d, %d keys, %d leases, %d bytes", rev, cl.revision(), len(b.kvs), len(b.leases), b.header.Size)

	// The keys are the change log replayed up to the backup's revision.
	events, _ := cl.readChanges(map[string]any{"prefix": "", "after_revision": 0}, 1000)
	replay := map[string]schema.KeyValue{}
	var upTo []schema.Event
	for _, e := range events {
		if e.Revision > rev {
			break
		}
		upTo = append(upTo, e)
		if e.Type == schema.EventPut {
			replay[e.Key] = schema.KeyValue{Key: e.Key, Value: e.Value, CreateRevision: e.CreateRevision, ModRevision: e.ModRevision, Version: e.Version, Lease: e.Lease}
		} else {
			delete(replay, e.Key)
		}
	}
	var replayed []schema.KeyValue
	for _, kv := range replay {
		replayed = append(replayed, kv)
	}
	sort.Slice(replayed, func(i, j int) bool { return replayed[i].Key < replayed[j].Key })
	if len(replayed) != len(b.kvs) {
		t.Fatalf("the backup has %d keys, the change log up to %d gives %d", len(b.kvs), rev, len(replayed))
	}
	for i, want := range replayed {
		got := b.kvs[i]
		if got.Key != want.Key || !bytes.Equal(got.Value, want.Value) || got.CreateRevision != want.CreateRevision ||
			got.ModRevision != want.ModRevision || got.Version != want.Version || got.Lease != want.Lease || got.ModRevision > rev {
			t.Fatalf("backup key %+v, the change log gives %+v", got, want)
		}
	}
	inBackup := map[string]bool{}
	for _, kv := range b.kvs {
		inBackup[kv.Key] = true
	}
	for i := 0; i < 50; i++ {
		a, bb := fmt.Sprintf("pair.%d.a", i), fmt.Sprintf("pair.%d.b", i)
		if inBackup[a] != inBackup[bb] {
			t.Fatalf("half a transaction in the backup: %s %v, %s %v", a, inBackup[a], bb, inBackup[bb])
		}
	}
	// Leases: every one acknowledged before the backup was asked for and
	// not revoked until it was done is in it; none asked for after it is.
	leaseIDs := map[int64]bool{}
	for _, l := range b.leases {
		leaseIDs[l.ID] = true
	}
	checked := 0
	for id, life := range lives {
		switch {
		case life.grantAck.Before(saveStart) && (life.revokeSent.IsZero() || life.revokeSent.After(saveEnd)):
			checked++
			if !leaseIDs[id] {
				t.Errorf("lease %d, granted before the backup and never revoked during it, is missing", id)
			}
		case life.grantSent.After(saveEnd) && leaseIDs[id]:
			t.Errorf("lease %d, asked for after the backup, is in it", id)
		}
	}
	if checked == 0 || !leaseIDs[seed] {
		t.Fatalf("no lease to check (%d), or the seed lease %d is missing", checked, seed)
	}

	// Restore into a new cluster: one node first, then two join.
	dir := filepath.Join(t.TempDir(), "restored")
	raftAddr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	out := restore(t, file, dir, "r1", raftAddr)
	started := time.Now()
	rc := startRestored(t, dir, "r1", raftAddr, 3)
	rnc := rc.conn()
	rcl := &client{t: t, nc: rnc, names: names}
	checkRestored(t, rcl, b, started)
	var st schema.ClusterStatusReply
	rcl.ok(subjects.ClusterStatus, `{}`, &st)
	if st.ClusterID != out["cluster_id"] || st.ClusterID == b.header.ClusterID || st.Leader != "r1" {
		t.Fatalf("restored cluster %+v, restore said %v, backup of %s", st, out, b.header.ClusterID)
	}
	// The change log up to the backup is the same.
	restoredEvents, _ := rcl.readChanges(map[string]any{"prefix": "", "after_revision": 0}, 1000)
	if len(restoredEvents) != len(upTo) {
		t.Fatalf("restored change log has %d events, the original %d up to %d", len(restoredEvents), len(upTo), rev)
	}
	for i := range upTo {
		a, _ := json.Marshal(upTo[i])
		bb, _ := json.Marshal(restoredEvents[i])
		if !bytes.Equal(a, bb) {
			t.Fatalf("change %d: %s, the original %s", i, bb, a)
		}
	}
	// The idempotency cache answers a retry with the first reply.
	var again schema.KVPutReply
	rcl.ok(subjects.KVPut, `{"key":"seed.idem","value":"once","idempotency_key":"backup-test:1"}`, &again)
	if again.Revision != idem.Revision || rcl.revision() != rev {
		t.Fatalf("retried put: revision %d (want %d), state at %d (want %d)", again.Revision, idem.Revision, rcl.revision(), rev)
	}
	// The lease id counter goes on past every lease in the backup.
	maxID := int64(0)
	for _, l := range b.leases {
		maxID = max(maxID, l.ID)
	}
	if id := rcl.grant(30); id <= maxID || id != b.state.NextLeaseID {
		t.Fatalf("new lease %d; the backup's highest is %d, its next_lease_id %d", id, maxID, b.state.NextLeaseID)
	}
	rcl.put("after.restore", "x", 0)
	rc.waitConverged(3, 30*time.Second)
}

// The refusals: a corrupt, truncated or unknown-version file, a data
// directory that is not empty, a chunk of an unknown backup, and a save
// with no cluster to ask.
func TestBackupSnapshotErrors(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	id := c.grant(600)
	c.put("a", 1, id)
	c.put("b", map[string]any{"x": "y"}, 0)
	cli := newCLI(t, n.natsURL)
	dir := t.TempDir()
	file := filepath.Join(dir, "good.backup")
	cli.ok("snapshot", "save", file)
	if _, err := os.Stat(file + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("save left %s.tmp: %v", file, err)
	}
	var st struct {
		FileVersion int    `json:"file_version"`
		Revision    int64  `json:"revision"`
		Keys        int    `json:"keys"`
		Leases      int    `json:"leases"`
		Verified    bool   `json:"verified"`
		SHA256      string `json:"sha256"`
	}
	mustUnmarshal(t, []byte(cli.ok("snapshot", "status", file, "--json")), &st)
	if st.FileVersion != 1 || st.Revision != 2 || st.Keys != 2 || st.Leases != 1 || !st.Verified {
		t.Fatalf("status %+v", st)
	}

	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	variant := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)-10] ^= 0x01
	for _, v := range []struct {
		name, file, stderr string
	}{
		{"a flipped byte", variant("flipped", flipped), "checksum mismatch"},
		{"truncated", variant("truncated", good[:len(good)-1]), "truncated"},
		{"file version 2", variant("v2", bytes.Replace(good, []byte("concord-backup v1\n"), []byte("concord-backup v2\n"), 1)), "unsupported backup version"},
		{"payload version 99", variant("fsm99", regexp.MustCompile(`"format_version":\d+`).ReplaceAll(good, []byte(`"format_version":99`))), "unsupported backup version"},
		{"not a backup", variant("text", []byte("hello\n")), "not a valid backup file"},
	} {
		r := cli.expect(cliBadBackup, "snapshot", "status", v.file)
		if !strings.Contains(r.stderr, v.stderr) {
			t.Errorf("status of %s: %v, want %q", v.name, r, v.stderr)
		}
		// Restore refuses it and writes nothing: a new directory is not
		// made, an empty one stays empty.
		fresh := filepath.Join(t.TempDir(), "new")
		r = cli.expect(cliBadBackup, "snapshot", "restore", v.file, "--data-dir", fresh)
		if !strings.Contains(r.stderr, v.stderr) {
			t.Errorf("restore of %s: %v, want %q", v.name, r, v.stderr)
		}
		if _, err := os.Stat(fresh); !os.IsNotExist(err) {
			t.Errorf("restore of %s made %s: %v", v.name, fresh, err)
		}
		empty := t.TempDir()
		cli.expect(cliBadBackup, "snapshot", "restore", v.file, "--data-dir", empty)
		if entries, _ := os.ReadDir(empty); len(entries) != 0 {
			t.Errorf("restore of %s wrote %v", v.name, entries)
		}
	}

	// A directory that holds anything is refused and left alone.
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "keep"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli.expect(cliError, "snapshot", "restore", file, "--data-dir", full)
	if !strings.Contains(r.stderr, "data directory is not empty") {
		t.Errorf("non-empty directory: %v", r)
	}
	if entries, _ := os.ReadDir(full); len(entries) != 1 {
		t.Errorf("a refused restore changed %s: %v", full, entries)
	}
	cli.expect(cliUsage, "snapshot", "restore", file)
	cli.expect(cliUsage, "snapshot", "save")
	cli.expect(cliUsage, "snapshot", "bogus")

	// A chunk of a backup the leader does not hold.
	c.fails(subjects.ClusterBackupChunk, `{"id":"0123456789abcdef","offset":0}`, schema.ErrBackupNotFound)
	c.fails(subjects.ClusterBackupChunk, `{"id":"../raft.db","offset":0}`, schema.ErrInvalidRequest)

	// Save with no NATS, and with no cluster on the bus: a clear error,
	// exit 5, and no file.
	none := filepath.Join(dir, "none.backup")
	r = newCLI(t, "").expect(cliUnavailable, "snapshot", "save", none, "--server", fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t)), "--timeout", "2s")
	if !strings.Contains(r.stderr, "cannot reach NATS") {
		t.Errorf("save with no NATS: %v", r)
	}
	r = cli.expect(cliUnavailable, "snapshot", "save", none, "--subject-prefix", "nobody", "--timeout", "2s")
	if !strings.Contains(r.stderr, "no responders") {
		t.Errorf("save with no cluster: %v", r)
	}
	if _, err := os.Stat(none); !os.IsNotExist(err) {
		t.Errorf("a failed save made %s", none)
	}
	if _, err := os.Stat(none + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("a failed save left %s.tmp", none)
	}
	// Into a directory that does not exist: refused before the leader is
	// asked, and nothing is left.
	r = cli.expect(cliError, "snapshot", "save", filepath.Join(dir, "missing", "x.backup"))
	if !strings.Contains(r.stderr, "x.backup.tmp") {
		t.Errorf("save into a missing directory: %v", r)
	}
}

// A backup file is a header of two lines and the payload; `head -2` shows
// the header, and the payload is the fsm snapshot (in this golden file,
// version 3: JSON lines).
func TestBackupFileLayout(t *testing.T) {
	t.Parallel()
	f, err := os.Open(goldenBackup)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	first, _ := br.ReadString('\n')
	second, _ := br.ReadString('\n')
	rest, _ := io.ReadAll(br)
	if first != "concord-backup v1\n" || !json.Valid([]byte(second)) || !bytes.HasPrefix(rest, []byte(`{"format":"concord.fsm","version":3,`)) {
		t.Fatalf("layout: %q %q %.80q", first, second, rest)
	}
}
