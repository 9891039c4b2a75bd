package tests

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/tests/freeport"
)

// A second process on a data directory in use stops at once with a clear
// error, and leaves the running node alone.
func TestDataDirInUseIsRefused(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	out, code := runServeFails(t, "--data-dir", n.dataDir, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)),
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)))
	if code != 1 || !strings.Contains(out, "in use by another process") {
		t.Fatalf("second process on %s: exit %d, output:\n%s", n.dataDir, code, out)
	}
	c := connect(t, n.natsURL)
	c.put("still.serving", 1, 0)
}

// walBatches walks a raft-wal segment file (a 32-byte header, then frames
// of an 8-byte header — type, 3 reserved bytes, length or CRC — and a
// payload padded to 8 bytes) and returns where each append batch starts
// and ends: a batch is entry frames closed by a commit frame (type 3).
func walBatches(t *testing.T, b []byte) [][2]int {
	t.Helper()
	var batches [][2]int
	start, off := 32, 32
	for off+8 <= len(b) {
		n := int(binary.LittleEndian.Uint32(b[off+4 : off+8]))
		switch b[off] {
		case 0:
			return batches
		case 3:
			off += 8
			batches = append(batches, [2]int{start, off})
			start = off
		case 1, 2:
			off += 8 + (n+7)/8*8
		default:
			t.Fatalf("frame type %d at %d", b[off], off)
		}
	}
	return batches
}

// kill -9 under concurrent writes, then the last append batch in the log
// file torn mid-record, as a power loss during its write would leave it.
// Raft-wal writes a batch and its commit frame, fsyncs once, and only then
// does Raft commit the batch's entries and the node reply; a crash can
// therefore tear only a batch whose fsync had not returned, none of whose
// writes was acknowledged. Here the kill came first, so the torn batch may
// hold writes that were acknowledged; the test asserts exactly what the
// store promises: the node starts, the state is the log up to the batch
// before the torn one (revisions without a gap), and every acknowledged
// write is there unless it was in the torn batch.
func TestKillTornTailKeepsEveryEarlierWrite(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	base := c.revision()

	var (
		mu    sync.Mutex
		acked []string // keys whose put was answered with success
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	const writers = 8
	for w := 0; w < writers; w++ {
		nc, err := nats.Connect(n.natsURL, nats.MaxReconnects(0))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		wg.Add(1)
		go func(w int, nc *nats.Conn) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("torn.w%d.%06d", w, i)
				msg, err := nc.Request("concord.kv.put", []byte(fmt.Sprintf(`{"key":%q,"value":%d}`, key, i)), 5*time.Second)
				if err != nil || msg.Header.Get(schema.HeaderErrorCode) != "" {
					return // the node is gone: not acknowledged
				}
				mu.Lock()
				acked = append(acked, key)
				mu.Unlock()
			}
		}(w, nc)
	}
	checkFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(acked) < 500 {
			return fmt.Errorf("%d writes acknowledged", len(acked))
		}
		return nil
	})
	n.kill() // writers are mid-flight
	close(stop)
	wg.Wait()

	segs, err := filepath.Glob(filepath.Join(n.dataDir, "wal", "*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segment files: %v", err)
	}
	sort.Strings(segs) // the name starts with the zero-padded first index
	path := segs[len(segs)-1]
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	batches := walBatches(t, data)
	if len(batches) < 2 {
		t.Fatalf("%d batches in %s", len(batches), path)
	}
	last := batches[len(batches)-1]
	torn := data[last[0]:last[1]]
	if !bytes.Contains(torn, []byte("torn.w")) {
		t.Fatal("the last batch holds none of the test's writes")
	}
	cut := last[0] + (last[1]-last[0])/2 + 3 // mid-record, not on a frame boundary
	if err := os.Truncate(path, int64(cut)); err != nil {
		t.Fatal(err)
	}

	n.restart()
	c = connect(t, n.natsURL)
	kvs, _ := c.fullState()
	// One key per put: the revisions present are exactly base+1..revision.
	revs := map[int64]bool{}
	present := map[string]bool{}
	for _, kv := range kvs.KVs {
		if strings.HasPrefix(kv.Key, "torn.") {
			revs[kv.ModRevision] = true
			present[kv.Key] = true
		}
	}
	if int64(len(revs)) != kvs.Revision-base {
		t.Fatalf("%d keys at revisions %d..%d: the log lost something before its tail", len(revs), base+1, kvs.Revision)
	}
	for r := base + 1; r <= kvs.Revision; r++ {
		if !revs[r] {
			t.Fatalf("revision %d missing below %d", r, kvs.Revision)
		}
	}
	lostAcked := 0
	for _, key := range acked {
		if present[key] {
			continue
		}
		if !bytes.Contains(torn, []byte(key)) {
			t.Fatalf("acknowledged write %s is gone and was not in the torn batch", key)
		}
		lostAcked++
	}
	t.Logf("%d writes acknowledged, %d keys after recovery at revision %d; the torn batch of %d bytes held %d acknowledged writes (acknowledged after its fsync, before the simulated power loss)",
		len(acked), len(present), kvs.Revision, len(torn), lostAcked)

	// The recovered log takes new writes, and they survive a clean restart.
	rev := c.put("after.torn", 1, 0)
	n.stop()
	n.restart()
	c = connect(t, n.natsURL)
	if g := c.get(map[string]any{"key": "after.torn"}); len(g.KVs) != 1 || g.KVs[0].ModRevision != rev {
		t.Fatalf("write after recovery lost: %+v", g)
	}
	if got := c.get(map[string]any{"prefix": "torn.", "count_only": true}); got.Count != int64(len(present)) {
		t.Fatalf("%d torn.* keys after a second restart, want %d", got.Count, len(present))
	}
}
