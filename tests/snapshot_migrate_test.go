package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/backupfile"
	"github.com/concord-io/concord/tests/freeport"
)

// v4Backup writes a backup file whose payload is a state of keys keys in
// snapshot version 4, the JSON lines the release before version 5 wrote,
// and returns its path.
func v4Backup(t *testing.T, keys int) string {
	t.Helper()
	st := fsm.New()
	value := json.RawMessage(`{"pad":"` + strings.Repeat("x", 80) + `"}`)
	for i := 0; i < keys; i++ {
		c := fsm.Command{Op: fsm.OpPut, Now: 1_000_000 + int64(i/100), Body: &fsm.Put{Key: fmt.Sprintf("mig.base.%07d", i), Value: value}}
		if r := st.ApplyCommand(c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	var payload bytes.Buffer
	if _, err := st.Snapshot().WriteVersion(&payload, 4); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(payload.Bytes())
	var file bytes.Buffer
	err := backupfile.WriteHeader(&file, backupfile.Header{
		Format: fsm.SnapshotFormat, FormatVersion: 4, Revision: st.Revision(), AppliedIndex: uint64(keys),
		ClusterID: "00000000000000a4", Leader: "v4", Created: time.Now().UTC().Format(time.RFC3339Nano),
		Size: int64(payload.Len()), SHA256: hex.EncodeToString(sum[:]),
	})
	if err != nil {
		t.Fatal(err)
	}
	file.Write(payload.Bytes())
	path := filepath.Join(t.TempDir(), "v4.backup")
	if err := os.WriteFile(path, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// snapshotDirs lists the Raft snapshot directories of a data directory:
// the finished ones, and those still being written (".tmp").
func snapshotDirs(t *testing.T, dataDir string) (finished, writing []string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if strings.HasSuffix(e.Name(), ".tmp") {
			writing = append(writing, e.Name())
		} else {
			finished = append(finished, e.Name())
		}
	}
	return finished, writing
}

// snapshotPayloadStart returns the first bytes of the fsm snapshot in a
// finished Raft snapshot (after the 8-byte applied-index frame).
func snapshotPayloadStart(t *testing.T, dataDir, name string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(dataDir, "snapshots", name, "state.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 8+40)
	n, _ := f.Read(b)
	if n < 8 {
		t.Fatalf("snapshot %s: %d bytes", name, n)
	}
	return string(b[8:n])
}

// migrationWriters puts keys from 4 connections until stop is closed or
// the node stops answering, and records the puts that were acknowledged.
type migrationWriters struct {
	mu    sync.Mutex
	acked []string
	stop  chan struct{}
	wg    sync.WaitGroup
}

func startMigrationWriters(t *testing.T, url, prefix string) *migrationWriters {
	t.Helper()
	w := &migrationWriters{stop: make(chan struct{})}
	for c := 0; c < 4; c++ {
		nc, err := nats.Connect(url, nats.MaxReconnects(0))
		if err != nil {
			t.Fatal(err)
		}
		w.wg.Add(1)
		go func(c int, nc *nats.Conn) {
			defer w.wg.Done()
			defer nc.Close()
			for i := 0; ; i++ {
				select {
				case <-w.stop:
					return
				default:
				}
				key := fmt.Sprintf("%s%d.%06d", prefix, c, i)
				msg, err := nc.Request("concord.kv.put", []byte(fmt.Sprintf(`{"key":%q,"value":%d}`, key, i)), 5*time.Second)
				if err != nil || msg.Header.Get(schema.HeaderErrorCode) != "" {
					return // the node is gone: not acknowledged
				}
				w.mu.Lock()
				w.acked = append(w.acked, key)
				w.mu.Unlock()
			}
		}(c, nc)
	}
	return w
}

// finish stops the writers and returns the keys acknowledged.
func (w *migrationWriters) finish() []string {
	close(w.stop)
	w.wg.Wait()
	return w.acked
}

// checkMigrated fails unless every acknowledged key is there, and the keys
// of the version 4 backup too.
func checkMigrated(t *testing.T, c *client, acked []string, baseKeys int) {
	t.Helper()
	if n := c.get(map[string]any{"prefix": "mig.base.", "count_only": true}).Count; n != int64(baseKeys) {
		t.Fatalf("%d keys of the version 4 snapshot, want %d", n, baseKeys)
	}
	have := map[string]bool{}
	after := ""
	for {
		req := map[string]any{"prefix": "mig.new.", "limit": 5000, "keys_only": true}
		if after != "" {
			req["after"] = after
		}
		r := c.get(req)
		for _, kv := range r.KVs {
			have[kv.Key] = true
			after = kv.Key
		}
		if !r.More {
			break
		}
	}
	for _, k := range acked {
		if !have[k] {
			t.Fatalf("acknowledged put %s is gone (%d acknowledged, %d there)", k, len(acked), len(have))
		}
	}
}

// The migration to snapshot version 5, black-box: a data directory holding
// a version 4 snapshot (the JSON lines the release before wrote; here
// seeded from a backup whose payload is version 4) starts on this binary.
// Writes make it take its first snapshot, in version 5, and the node is
// killed (-9) while that snapshot is being written. It starts again, from
// the version 4 snapshot and the log after it, with every acknowledged
// put, and without the half-written snapshot. More writes, and a version 5
// snapshot completes and replaces the version 4 one (one is kept); killed
// again, the node restores it with every acknowledged put.
func TestSnapshotMigrationV4ToV5SurvivesKill(t *testing.T) {
	t.Parallel()
	const baseKeys = 120_000
	file := v4Backup(t, baseKeys)
	dir := filepath.Join(t.TempDir(), "data")
	raftAddr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	restore(t, file, dir, "n1", raftAddr)
	finished, writing := snapshotDirs(t, dir)
	if len(finished) != 1 || len(writing) != 0 {
		t.Fatalf("the seeded data directory holds snapshots %v %v", finished, writing)
	}
	v4Snapshot := finished[0]
	if start := snapshotPayloadStart(t, dir, v4Snapshot); !strings.HasPrefix(start, `{"format":"concord.fsm","version":4,`) {
		t.Fatalf("the seeded snapshot is not version 4: %q", start)
	}

	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t))
	n := &node{t: t, dataDir: dir, natsURL: natsURL, logPath: filepath.Join(t.TempDir(), "concord.log"),
		args: []string{"serve", "--node-id", "n1", "--data-dir", dir, "--raft-addr", raftAddr,
			"--nats-listen", strings.TrimPrefix(natsURL, "nats://"),
			"--snapshot-threshold", "400", "--snapshot-interval", "100ms", "--trailing-logs", "100"}}
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			if b, err := os.ReadFile(n.logPath); err == nil {
				t.Logf("concord log:\n%s", tail(string(b), 60))
			}
		}
	})
	n.start()
	n.waitReady()
	c := connect(t, natsURL)
	checkMigrated(t, c, nil, baseKeys)

	// Write until the first version 5 snapshot is being written, and kill
	// the node then.
	w := startMigrationWriters(t, natsURL, "mig.new.")
	deadline := time.Now().Add(90 * time.Second)
	for {
		// Once part of the snapshot is on disk.
		if _, writing := snapshotDirs(t, dir); len(writing) > 0 {
			if fi, err := os.Stat(filepath.Join(dir, "snapshots", writing[0], "state.bin")); err == nil && fi.Size() > 0 {
				n.kill()
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no snapshot was written in 90 s")
		}
		time.Sleep(time.Millisecond)
	}
	acked := w.finish()
	finished, writing = snapshotDirs(t, dir)
	if len(writing) != 1 || len(finished) != 1 || finished[0] != v4Snapshot {
		t.Fatalf("after the kill: snapshots %v, being written %v; want the version 4 one and one cut short", finished, writing)
	}
	partial, err := os.ReadFile(filepath.Join(dir, "snapshots", writing[0], "state.bin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed during the first version 5 snapshot (%d bytes of it on disk), %d puts acknowledged", len(partial), len(acked))
	if len(partial) > 8 && !bytes.HasPrefix(partial[8:], []byte("concord.fsm v5\n")) {
		t.Fatalf("the snapshot being written is not version 5: %.40q", partial[8:])
	}

	// It starts from the version 4 snapshot and the log.
	n.restart()
	c = connect(t, natsURL)
	checkMigrated(t, c, acked, baseKeys)
	// (The node may be writing its next snapshot already.)
	if _, now := snapshotDirs(t, dir); len(now) > 0 && now[0] == writing[0] {
		t.Fatalf("the half-written snapshot %s is still there", writing[0])
	}
	if log, _ := os.ReadFile(n.logPath); !bytes.Contains(log, []byte("removed a snapshot that a crash left half-written")) {
		t.Error("the node did not say it removed the half-written snapshot")
	}

	// A version 5 snapshot completes and replaces the version 4 one.
	w = startMigrationWriters(t, natsURL, "mig.new.again.")
	checkFor(t, 90*time.Second, 20*time.Millisecond, func() error {
		finished, writing := snapshotDirs(t, dir)
		if len(finished) != 1 || finished[0] == v4Snapshot || len(writing) != 0 {
			return fmt.Errorf("snapshots %v, being written %v", finished, writing)
		}
		return nil
	})
	acked = append(acked, w.finish()...)
	finished, _ = snapshotDirs(t, dir)
	if start := snapshotPayloadStart(t, dir, finished[0]); !strings.HasPrefix(start, "concord.fsm v5\n") {
		t.Fatalf("the new snapshot is not version 5: %q", start)
	}
	n.kill()
	n.restart()
	c = connect(t, natsURL)
	checkMigrated(t, c, acked, baseKeys)
}
