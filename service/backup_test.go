package service

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/backupfile"
	"github.com/concord-io/concord/service/internal/testnats"
	"github.com/concord-io/concord/service/serving"
)

func TestBackupEndpoints(t *testing.T) {
	s, nc := startTest(t, nil)
	var g schema.LeaseGrantReply
	if e := testnats.Request(t, nc, "concord.lease.grant", map[string]any{"ttl": 600, "metadata": map[string]any{"owner": "t"}}, &g); e != nil {
		t.Fatal(e)
	}
	for i := 0; i < 50; i++ {
		req := map[string]any{"key": fmt.Sprintf("k.%02d", i), "value": strings.Repeat("v", i)}
		if i%2 == 0 {
			req["lease"] = g.ID
		}
		if e := testnats.Request(t, nc, "concord.kv.put", req, nil); e != nil {
			t.Fatal(e)
		}
	}

	msg, err := nc.Request("concord.cluster.backup", []byte(`{}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate("cluster.backup.reply", msg.Data); err != nil {
		t.Fatalf("reply %s: %v", msg.Data, err)
	}
	var b schema.ClusterBackupReply
	if err := json.Unmarshal(msg.Data, &b); err != nil {
		t.Fatal(err)
	}
	if b.Revision != 50 || b.Leader != s.cfg.NodeID || b.FormatVersion != fsm.SnapshotVersion || b.MaxChunk != serving.BackupMaxChunk || b.AppliedIndex == 0 {
		t.Fatalf("backup %+v", b)
	}

	// Pull it in small chunks, each answered exactly once.
	inbox := nats.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	var payload []byte
	for off := int64(0); off < b.Size; {
		req, _ := json.Marshal(schema.ClusterBackupChunkRequest{ID: b.ID, Offset: off, Length: 1000})
		if err := nc.PublishRequest("concord.cluster.backup.chunk", inbox, req); err != nil {
			t.Fatal(err)
		}
		m, err := replies.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(schema.HeaderErrorCode) != "" {
			t.Fatalf("chunk at %d: %s", off, m.Data)
		}
		ch, err := schema.ParseBackupChunk(m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if ch.ID != b.ID || ch.Offset != off || ch.Size != b.Size || len(ch.Data) == 0 || len(ch.Data) > 1000 {
			t.Fatalf("chunk %+v (%d bytes)", ch, len(ch.Data))
		}
		payload = append(payload, ch.Data...)
		off += int64(len(ch.Data))
	}
	if m, err := replies.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a second reply: %v %s", m.Header, m.Data)
	}
	sum := sha256.Sum256(payload)
	if int64(len(payload)) != b.Size || hex.EncodeToString(sum[:]) != b.SHA256 {
		t.Fatal("the chunks do not match the size and checksum")
	}
	st := payloadState(t, payload)
	if st.Revision() != b.Revision || st.KeyCount() != 50 {
		t.Fatalf("payload at revision %d with %d keys", st.Revision(), st.KeyCount())
	}

	// At the end: an empty body; past it, 400; an unknown id, 404; a
	// malformed id, 400.
	m, err := nc.Request("concord.cluster.backup.chunk", []byte(fmt.Sprintf(`{"id":%q,"offset":%d}`, b.ID, b.Size)), 5*time.Second)
	if err != nil || m.Header.Get(schema.HeaderErrorCode) != "" || len(m.Data) != 0 || m.Header.Get(schema.HeaderBackupSize) != fmt.Sprint(b.Size) {
		t.Fatalf("read at the end: %v, %v %q", err, m.Header, m.Data)
	}
	for body, name := range map[string]string{
		fmt.Sprintf(`{"id":%q,"offset":%d}`, b.ID, b.Size+1):  schema.ErrInvalidRequest,
		`{"id":"0123456789abcdef","offset":0}`:                schema.ErrBackupNotFound,
		`{"id":"../../raft.db","offset":0}`:                   schema.ErrInvalidRequest,
		fmt.Sprintf(`{"id":%q,"offset":-1}`, b.ID):            schema.ErrInvalidRequest,
		fmt.Sprintf(`{"id":%q,"offset":0,"length":-1}`, b.ID): schema.ErrInvalidRequest,
	} {
		e := testnats.Request(t, nc, "concord.cluster.backup.chunk", json.RawMessage(body), nil)
		if e == nil || e.Name != name {
			t.Errorf("%s: %v, want %s", body, e, name)
		}
	}
	if e := testnats.Request(t, nc, "concord.cluster.backup", map[string]any{"x": 1}, nil); e == nil || e.Name != schema.ErrInvalidRequest {
		t.Errorf("backup with an unknown field: %v", e)
	}

	// Up to serving.BackupMaxInProgress at once, the one read to the end included
	// until its grace period ends; each is a file in the data directory's
	// backups/.
	for i := 1; i < serving.BackupMaxInProgress; i++ {
		if e := testnats.Request(t, nc, "concord.cluster.backup", struct{}{}, nil); e != nil {
			t.Fatal(e)
		}
	}
	if e := testnats.Request(t, nc, "concord.cluster.backup", struct{}{}, nil); e == nil || e.Name != schema.ErrLimitExceeded {
		t.Fatalf("one backup too many: %v", e)
	}
	bdir := filepath.Join(s.cfg.DataDir, "backups")
	if entries, _ := os.ReadDir(bdir); len(entries) != serving.BackupMaxInProgress {
		t.Fatalf("backup files %v", entries)
	}
	// Closing the node removes them.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		entries, _ := os.ReadDir(bdir)
		if len(entries) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backup files left after close: %v", entries)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRestoreBackupStartsNewCluster restores the fsm golden payload and
// starts a node on it: the node leads a new cluster, and its state is the
// payload's, leases with the time they had left.
func TestRestoreBackupStartsNewCluster(t *testing.T) {
	payload := goldenPayload(t, fsm.SnapshotVersion)
	path := writeFile(t, backupFileBytes(t, payload, fsm.SnapshotVersion, nil))
	dir := filepath.Join(t.TempDir(), "data")
	addr := freeAddr(t)
	res, err := backupfile.Restore(path, backupfile.RestoreOptions{DataDir: dir, NodeID: "r1", RaftAddr: addr})
	if err != nil {
		t.Fatal(err)
	}
	want := payloadState(t, payload)
	if res.Header.Revision != want.Revision() || res.ClusterID == "9f86d081884c7d65" || len(res.ClusterID) != 16 {
		t.Fatalf("result %+v", res)
	}
	start := time.Now()
	s, nc := startTest(t, func(c *Config) { c.DataDir, c.NodeID, c.RaftAddr = dir, "r1", addr })
	var info schema.NodeInfo
	if e := testnats.Request(t, nc, s.names.NodeInfo("r1"), schema.NodeInfoRequest{}, &info); e != nil {
		t.Fatal(e)
	}
	if info.ClusterID != res.ClusterID || info.State != "leader" || info.Term < 2 {
		t.Fatalf("node %+v", info)
	}

	var got schema.KVGetReply
	if e := testnats.Request(t, nc, "concord.kv.get", map[string]any{"prefix": ""}, &got); e != nil {
		t.Fatal(e)
	}
	exp := want.Get(fsm.GetQuery{IsPrefix: true, Limit: 1000}, want.Now())
	elapsed := time.Since(start).Milliseconds()
	if got.Revision != exp.Revision || len(got.KVs) != len(exp.KVs) {
		t.Fatalf("got %+v\nwant %+v", got, exp)
	}
	for i, kv := range got.KVs {
		w := exp.KVs[i]
		if kv.Key != w.Key || !bytes.Equal(kv.Value, w.Value) || kv.CreateRevision != w.CreateRevision || kv.ModRevision != w.ModRevision ||
			kv.Version != w.Version || kv.Lease != w.Lease {
			t.Errorf("key %d: %+v, want %+v", i, kv, w)
		}
		if w.RemainingMS != nil && (kv.RemainingMS == nil || *kv.RemainingMS > *w.RemainingMS || *kv.RemainingMS < *w.RemainingMS-elapsed-1000) {
			t.Errorf("key %s: remaining %v, want at most %d and at least %d", kv.Key, kv.RemainingMS, *w.RemainingMS, *w.RemainingMS-elapsed-1000)
		}
	}
	var leases schema.LeaseListReply
	if e := testnats.Request(t, nc, "concord.lease.list", map[string]any{"include_anonymous": true}, &leases); e != nil {
		t.Fatal(e)
	}
	expLeases := want.LeaseList(true, 0, 1000, want.Now())
	if len(leases.Leases) != len(expLeases.Leases) {
		t.Fatalf("leases %+v, want %+v", leases, expLeases)
	}
	for i, l := range leases.Leases {
		w := expLeases.Leases[i]
		if l.ID != w.ID || l.TTL != w.TTL || l.KeyCount != w.KeyCount || l.Anonymous != w.Anonymous || !bytes.Equal(l.Metadata, w.Metadata) ||
			l.RemainingMS > w.RemainingMS || l.RemainingMS < w.RemainingMS-elapsed-1000 {
			t.Errorf("lease %d: %+v, want %+v (elapsed %d ms)", i, l, w, elapsed)
		}
	}
	// The lease id counter goes on from the backup's.
	var g schema.LeaseGrantReply
	if e := testnats.Request(t, nc, "concord.lease.grant", map[string]any{"ttl": 10}, &g); e != nil {
		t.Fatal(e)
	}
	if g.ID != 11 { // next_lease_id of snapshot-v3.golden
		t.Fatalf("new lease id %d, want 11", g.ID)
	}
}

// goldenPayload returns an fsm snapshot golden file: a payload as a leader
// writes it.
func goldenPayload(t *testing.T, version int) []byte {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("../fsm/testdata/snapshot-v%d.golden", version))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// payloadState decodes a payload.
func payloadState(t *testing.T, payload []byte) *fsm.State {
	t.Helper()
	st := fsm.New()
	if err := st.Restore(bytes.NewReader(payload)); err != nil {
		t.Fatal(err)
	}
	return st
}

// backupFileBytes frames payload as a backup file, with edit applied to
// its header first.
func backupFileBytes(t *testing.T, payload []byte, formatVersion int, edit func(*backupfile.Header)) []byte {
	t.Helper()
	sum := sha256.Sum256(payload)
	h := backupfile.Header{
		Format: fsm.SnapshotFormat, FormatVersion: formatVersion,
		Revision: payloadState(t, payload).Revision(), AppliedIndex: 42,
		ClusterID: "9f86d081884c7d65", Leader: "n1", Created: "2026-12-02T10:15:30Z",
		Size: int64(len(payload)), SHA256: hex.EncodeToString(sum[:]),
	}
	if edit != nil {
		edit(&h)
	}
	var buf bytes.Buffer
	if err := backupfile.WriteHeader(&buf, h); err != nil {
		t.Fatal(err)
	}
	buf.Write(payload)
	return buf.Bytes()
}

func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "backup")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// freeAddr returns a free loopback TCP address.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
