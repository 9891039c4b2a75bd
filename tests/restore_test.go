package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	cc "github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
	"github.com/concord-io/concord/tests/freeport"
)

// A restarting node is never silent, and a kill -9 in the middle of a
// snapshot restore or a snapshot write loses nothing acknowledged. To hit
// the middle every time, however busy the machine, the node runs with the
// test-only pause switch (--test-pause-file): it stops half-way through a
// snapshot restore, or after the first bytes of a snapshot write, for as
// long as the file names that point.

// writePause names the points where the node holds; none releases it.
func writePause(t testing.TB, path string, points ...string) {
	t.Helper()
	data, _ := json.Marshal(map[string]any{"hold": points})
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// logSize is where the next lines of a node's log will start.
// finishedSnapshots returns the state files of the snapshots a node has
// finished writing in dataDir. Raft writes a snapshot in a directory named
// *.tmp and renames it once whole: a test that waits for a snapshot and
// then kills the node must not take one still being written, which the
// restart would remove (and so have none to restore).
func finishedSnapshots(dataDir string) []string {
	all, _ := filepath.Glob(filepath.Join(dataDir, "snapshots", "*", "state.bin"))
	var done []string
	for _, p := range all {
		if !strings.HasSuffix(filepath.Dir(p), ".tmp") {
			done = append(done, p)
		}
	}
	return done
}

func logSize(t testing.TB, n *node) int64 {
	t.Helper()
	fi, err := os.Stat(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// logSince is what a node logged after offset.
func logSince(t testing.TB, n *node, offset int64) string {
	t.Helper()
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) < offset {
		return ""
	}
	return string(b[offset:])
}

// waitHolding waits until the node logs, after offset, that it holds at
// point, and fails if it exits first.
func waitHolding(t testing.TB, n *node, offset int64, point string) {
	t.Helper()
	checkFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		select {
		case <-n.done:
			t.Fatalf("concord exited before holding at %s: %v", point, n.err)
		default:
		}
		if !strings.Contains(logSince(t, n, offset), "test hook: holding at "+point) {
			return fmt.Errorf("not holding at %s yet", point)
		}
		return nil
	})
}

// restoring is what a node says while it restores its snapshot.
var restoring = regexp.MustCompile(`restoring snapshot, [0-9.]+ [kMG]?B of [0-9.]+ [kMG]?B`)

// ackedWriter puts fresh keys from several connections until stopped and
// remembers every put that was acknowledged.
type ackedWriter struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	count atomic.Int64
	mu    sync.Mutex
	acked map[string]int
}

func startWriters(t *testing.T, url, prefix string, writers int) *ackedWriter {
	t.Helper()
	w := &ackedWriter{stop: make(chan struct{}), acked: map[string]int{}}
	for g := 0; g < writers; g++ {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer nc.Close()
			for i := 0; ; i++ {
				select {
				case <-w.stop:
					return
				default:
				}
				key := fmt.Sprintf("%s%02d.%06d", prefix, g, i)
				body, _ := json.Marshal(map[string]any{"key": key, "value": i})
				msg, err := nc.Request("concord.kv.put", body, 2*time.Second)
				if err != nil || msg.Header.Get(schema.HeaderErrorCode) != "" {
					// Not acknowledged: it may or may not have been
					// applied. Slow down while the node is gone.
					select {
					case <-w.stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					continue
				}
				w.mu.Lock()
				w.acked[key] = i
				w.mu.Unlock()
				w.count.Add(1)
			}
		}()
	}
	t.Cleanup(w.halt)
	return w
}

// halt stops the writers and waits for them.
func (w *ackedWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// waitAcked waits until at least n more puts than before were
// acknowledged.
func (w *ackedWriter) waitAcked(t testing.TB, n int64) {
	t.Helper()
	base := w.count.Load()
	checkFor(t, 60*time.Second, 10*time.Millisecond, func() error {
		if got := w.count.Load() - base; got < n {
			return fmt.Errorf("%d of %d more puts acknowledged", got, n)
		}
		return nil
	})
}

// checkAcked reads every key and fails for each acknowledged put that is
// missing or holds another value: zero tolerance.
func checkAcked(t *testing.T, c *client, acked map[string]int) {
	t.Helper()
	kvs, _ := c.fullState()
	have := make(map[string]json.RawMessage, len(kvs.KVs))
	for _, kv := range kvs.KVs {
		have[kv.Key] = kv.Value
	}
	lost := 0
	for key, v := range acked {
		got, ok := have[key]
		if !ok || string(got) != fmt.Sprint(v) {
			if lost < 10 {
				t.Errorf("acknowledged put %s = %d: read back %q (present %v)", key, v, got, ok)
			}
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged puts lost", lost, len(acked))
	}
}

// A node restarting after kill -9 answers every request 503 unavailable
// with what it is doing, never "no responders"; /readyz, its node report
// and `concord status` say the same; a Go client call made meanwhile
// waits and then succeeds, and one whose deadline passes says why. A
// second kill -9, in the middle of the restore, loses nothing.
func TestRestartIsNeverSilent(t *testing.T) {
	t.Parallel()
	pause := filepath.Join(t.TempDir(), "pause.json")
	addr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	n := startNode(t, nodeOpts{flags: []string{"--metrics-listen", addr, "--test-pause-file", pause}})
	c := connect(t, n.natsURL)
	putMany(t, n, "restore.", 3000, 0)
	var snap schema.ClusterSnapshotReply
	c.ok(subjects.ClusterSnapshot, `{}`, &snap)
	for i := 0; i < 50; i++ { // in the log only
		c.put(fmt.Sprintf("restore.log.%02d", i), i, 0)
	}
	before, _ := c.fullState()

	writePause(t, pause, "snapshot-restore")
	n.kill()
	off := logSize(t, n)
	n.start()
	waitHolding(t, n, off, "snapshot-restore")

	c = connect(t, n.natsURL)
	// The standby subscribed moments after NATS came up; from its first
	// answer on, every request gets one.
	checkFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		msg, err := c.nc.Request("concord.kv.get", []byte(`{"key":"restore.00001"}`), 2*time.Second)
		if err != nil {
			return err
		}
		if msg.Header.Get(schema.HeaderErrorCode) != "503" {
			t.Fatalf("during the restore: %q %s", msg.Header.Get(schema.HeaderErrorCode), msg.Data)
		}
		return nil
	})
	var act string
	for i := 0; i < 10; i++ {
		e := c.fails(subjects.KVGet, `{"key":"restore.00001"}`, schema.ErrUnavailable)
		got := restoring.FindString(e.Description)
		if got == "" || !strings.HasPrefix(e.Description, "node n1 cannot serve requests yet: ") {
			t.Fatalf("503 during the restore: %q", e.Description)
		}
		if act != "" && got != act {
			t.Fatalf("the restore moved while held: %q, then %q", act, got)
		}
		act = got
	}
	// A write is answered outcome_unknown: before Raft runs, the node
	// does not know its cluster's members, any of which might have the
	// request too. Nothing applies it (checked after restart): this node
	// alone could, and its leader subscription was not up.
	c.fails(subjects.KVPut, `{"key":"restore.refused","value":1}`, schema.ErrOutcomeUnknown)
	c.fails(subjects.LeaseGrant, `{"ttl":30}`, schema.ErrOutcomeUnknown)
	// Cluster requests that write nothing get the read's answer.
	if e := c.fails(subjects.ClusterStatus, `{}`, schema.ErrUnavailable); !strings.Contains(e.Description, act) {
		t.Fatalf("cluster.status during the restore: %q", e.Description)
	}

	// /readyz says the same.
	code, body, err := httpStatus(addr, "/readyz")
	if err != nil || code != 503 || body != "not ready: "+act {
		t.Fatalf("/readyz during the restore: %d %q %v; want 503 %q", code, body, err, "not ready: "+act)
	}
	// So does the node's own report.
	var info schema.NodeInfo
	msg, err := c.nc.Request("concord.cluster.node.n1.info", []byte(`{}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate("cluster.node.info.reply", msg.Data); err != nil {
		t.Fatalf("node info %s: %v", msg.Data, err)
	}
	mustUnmarshal(t, msg.Data, &info)
	if info.State != schema.NodeStateStarting || info.Activity != act {
		t.Fatalf("node info during the restore: %+v, want state starting and activity %q", info, act)
	}
	// And `concord status`: no leader answers, so it shows each node's
	// report, and the 503 it got.
	r := newCLI(t, n.natsURL).expect(cliUnavailable, "status", "--timeout", "1500ms")
	if !strings.Contains(r.stdout, "no leader serves requests") || !strings.Contains(r.stdout, act) || !strings.Contains(r.stderr, act) {
		t.Fatalf("concord status during the restore: %v; want %q", r, act)
	}

	// The Go client retries the 503s: a call whose deadline passes says
	// why; one with time to spare waits.
	gc, err := cc.Connect(cc.URL(n.natsURL))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	key := "restore.00001"
	_, err = gc.Get(ctx, schema.KVGetRequest{Key: &key})
	cancel()
	if !errors.Is(err, cc.ErrUnavailable) || !strings.Contains(err.Error(), act) {
		t.Fatalf("client call past its deadline: %v; want unavailable with %q", err, act)
	}
	waited := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, err := gc.Put(ctx, schema.KVPutRequest{Key: "restore.waited", Value: json.RawMessage(`"yes"`)})
		waited <- err
	}()

	// kill -9 in the middle of the restore, then start for real.
	n.kill()
	select {
	case err := <-waited:
		t.Fatalf("the client call returned while the node was down: %v", err)
	default:
	}
	writePause(t, pause)
	n.restart()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("client call made during the restart: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the client call made during the restart did not return")
	}

	c = connect(t, n.natsURL)
	after, _ := c.fullState()
	want := map[string]string{"restore.waited": `"yes"`}
	for _, kv := range before.KVs {
		want[kv.Key] = string(kv.Value)
	}
	for _, kv := range after.KVs {
		if w, ok := want[kv.Key]; !ok || w != string(kv.Value) {
			t.Errorf("after the restarts: %s = %s, want %q (expected %v)", kv.Key, kv.Value, w, ok)
		}
		delete(want, kv.Key)
	}
	if len(want) > 0 {
		t.Fatalf("lost over the restarts: %d keys, e.g. %v", len(want), firstKeys(want, 5))
	}
	if g := c.get(map[string]any{"key": "restore.refused"}); len(g.KVs) != 0 {
		t.Fatalf("a put answered 503 during the restore was applied: %+v", g.KVs)
	}
}

func firstKeys(m map[string]string, n int) []string {
	var out []string
	for k := range m {
		if len(out) == n {
			break
		}
		out = append(out, k)
	}
	return out
}

// kill -9 while a Raft snapshot is being written, with writes going on:
// the node starts from the previous snapshot and its log, every
// acknowledged put is there, and the half-written snapshot is gone.
func TestKillDuringSnapshotWrite(t *testing.T) {
	t.Parallel()
	pause := filepath.Join(t.TempDir(), "pause.json")
	n := startNode(t, nodeOpts{flags: []string{"--snapshot-threshold", "300", "--snapshot-interval", "100ms", "--trailing-logs", "100", "--test-pause-file", pause}})
	c := connect(t, n.natsURL)
	putMany(t, n, "persist.base.", 2000, 0)
	c.ok(subjects.ClusterSnapshot, `{}`, nil) // a complete snapshot to start from
	base, _ := c.fullState()

	writePause(t, pause, "snapshot-persist")
	off := logSize(t, n)
	w := startWriters(t, n.natsURL, "persist.w", 8)
	waitHolding(t, n, off, "snapshot-persist")
	w.waitAcked(t, 300) // acknowledged while the snapshot is half-written
	torn, _ := filepath.Glob(filepath.Join(n.dataDir, "snapshots", "*.tmp"))
	if len(torn) != 1 {
		t.Fatalf("snapshots being written: %v, want one", torn)
	}
	n.kill() // the writers are still writing
	w.halt()
	t.Logf("%d puts acknowledged before the kill", len(w.acked))

	writePause(t, pause)
	off = logSize(t, n)
	n.restart()
	c = connect(t, n.natsURL)
	for _, kv := range base.KVs {
		var v int
		mustUnmarshal(t, kv.Value, &v)
		w.acked[kv.Key] = v
	}
	checkAcked(t, c, w.acked)
	// The one torn by the kill, by name: the restarted node may already be
	// writing a snapshot of its own, in a .tmp directory too.
	for _, p := range torn {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the half-written snapshot %s is still there after the restart (%v)", p, err)
		}
	}
	if !strings.Contains(logSince(t, n, off), "removed a snapshot that a crash left half-written") {
		t.Fatal("the restart did not say it removed the half-written snapshot")
	}
	// Snapshots work again after the restart.
	c.ok(subjects.ClusterSnapshot, `{}`, nil)
}

// In a cluster whose other two nodes serve, a member held in the middle of
// its snapshot restore takes no request from them: every request sent
// through its NATS server is answered by the leader, none with a 503.
// The leader's `concord status` shows what the member is doing, and the
// member catches up once released.
func TestRestartingMemberTakesNoRequests(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "--snapshot-threshold", "300", "--snapshot-interval", "100ms", "--trailing-logs", "100")
	nc := c.conn()
	leader := c.leaderIndex(nc)
	f := (leader + 1) % 3
	id := fmt.Sprintf("n%d", f+1)
	putManyCluster(t, c, "member.", 2000)
	// Concurrent puts share log entries; one at a time, each is an entry,
	// and the member takes a snapshot every 300 of them.
	more := 0
	checkFor(t, 60*time.Second, 0, func() error {
		snaps := finishedSnapshots(c.nodes[f].dataDir)
		if len(snaps) > 0 {
			return nil
		}
		for i := 0; i < 50; i++ {
			if _, e, err := request(nc, "concord.kv.put", map[string]any{"key": fmt.Sprintf("member.more.%05d", more), "value": more}, "", 30*time.Second); err != nil || e != nil {
				t.Fatalf("put: %v %v", err, e)
			}
			more++
		}
		return fmt.Errorf("%s has no snapshot yet", id)
	})

	writePause(t, c.pauses[f], "snapshot-restore")
	c.nodes[f].kill()
	off := logSize(t, c.nodes[f])
	c.nodes[f].start()
	waitHolding(t, c.nodes[f], off, "snapshot-restore")

	// Through the held member's own NATS server only: "no responders"
	// until its routes are up, then the leader's answers. A 503 is a
	// request the member took.
	fc, err := nats.Connect(c.urls[f])
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	ask := func(subject, body string) error {
		msg, err := fc.Request(subject, []byte(body), 5*time.Second)
		if err != nil {
			return err
		}
		if code := msg.Header.Get(schema.HeaderErrorCode); code != "" {
			t.Fatalf("%s %s through the restarting %s: %s %s", subject, body, id, code, msg.Data)
		}
		return nil
	}
	checkFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		return ask("concord.kv.get", `{"key":"member.00001"}`)
	})
	for i := 0; i < 100; i++ {
		if err := ask("concord.kv.put", fmt.Sprintf(`{"key":"member.during.%03d","value":%d}`, i, i)); err != nil {
			t.Fatalf("put %d through the restarting %s: %v", i, id, err)
		}
		if err := ask("concord.kv.get", fmt.Sprintf(`{"key":"member.during.%03d"}`, i)); err != nil {
			t.Fatalf("get %d through the restarting %s: %v", i, id, err)
		}
	}
	if strings.Contains(logSince(t, c.nodes[f], off), "standby: answering requests") {
		t.Logf("%s's standby subscribed while the leader served (its answers lost to the leader's)", id)
	}

	// The leader's status shows the held member's report.
	st, err := c.status(nc, false)
	if err != nil {
		t.Fatal(err)
	}
	var act string
	for _, m := range st.Members {
		if m.ID == id {
			if !m.Reachable || m.Node.State != schema.NodeStateStarting || !restoring.MatchString(m.Node.Activity) {
				t.Fatalf("%s in the status during its restore: %+v %+v", id, m, m.Node)
			}
			act = m.Node.Activity
		}
	}
	if out := newCLI(t, c.urls[leader]).ok("status"); !strings.Contains(out, id+": "+act) {
		t.Fatalf("concord status during %s's restore:\n%s\nwant %q", id, out, id+": "+act)
	}

	writePause(t, c.pauses[f])
	c.waitConverged(3, 60*time.Second)
	checkFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		code, body, err := httpStatus(c.metricsAddrs[f], "/readyz")
		if err != nil || code != 200 {
			return fmt.Errorf("%s /readyz: %d %q %v", id, code, body, err)
		}
		return nil
	})
}
