package robustness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/failpoint"
	"github.com/concord-io/concord/tests/robustness/lazyfs"
)

// Crashes where no real fault can be timed to land, made with the
// failpoints of a binary built with the failpoints tag (service/failpoint):
// the failpoint kills the node with SIGKILL at its point, and the test
// then cuts the power of that node's disk (lazyfs), so that
// what was written and not fsynced is gone as well, as in a machine that
// lost power at that instant. One 3-node cluster runs the network
// scenarios' checked workload throughout (faultWorkload: linearizable
// history, watchers, leases never early, replicas byte-identical), and
// takes each crash in turn (three rounds in the long profile); the crashed
// node restarts on what survived.

// failpointPort is where each node of the failpoint scenarios serves
// gofail's HTTP switch (GOFAIL_HTTP), on its lab address.
const failpointPort = "7100"

// crash is one failpoint scenario.
type crash struct {
	point string
	// onLeader picks the leader as the node to crash, else a follower.
	onLeader bool
	// terms are the gofail terms set on the point.
	terms string
}

// crashes are the scenarios, in the order the cluster takes them. The
// counts put the log points at a random append rather than the first.
func crashes() []crash {
	nth := func(lo, hi int) string { return fmt.Sprintf(`%d*off->return("kill")`, lo+rand.IntN(hi-lo)) }
	return []crash{
		{point: failpoint.LogBeforeSync, onLeader: true, terms: nth(20, 200)},
		{point: failpoint.LogBeforeSync, terms: nth(20, 200)},
		{point: failpoint.LogAfterSync, onLeader: true, terms: nth(20, 200)},
		{point: failpoint.BeforeReply, onLeader: true, terms: nth(10, 100)},
		{point: failpoint.SnapshotWrite, terms: `return("kill")`},
		{point: failpoint.SnapshotBeforeRename, onLeader: true, terms: `return("kill")`},
	}
}

// powerLab is the 3-node lab cluster of the failpoint and cluster
// power-cut scenarios: each node's data on a lazyfs disk of its own (n2's
// under the ext4-like model, the others' strict), and, in the failpoints
// build, gofail's switch open on its lab address.
type powerLab struct {
	lab   *netLab
	c     *labCluster
	disks map[string]*powerDisk
}

func startFailpointLab(t *testing.T) *powerLab {
	t.Helper()
	return startPowerLab(t, failpointBin(t))
}

// failpointBin is the failpoints build, and skips the scenario when there
// is none.
func failpointBin(t *testing.T) string {
	t.Helper()
	if failpointBinPath == "" {
		t.Skip("no failpoints build: CONCORD_ROBUSTNESS_BIN is set without CONCORD_ROBUSTNESS_FAILPOINTS_BIN")
	}
	return failpointBinPath
}

// labTrailingLogs is the Raft log entries the power lab's nodes keep after
// a snapshot (--trailing-logs): few, so that a node away for seconds must
// install the leader's snapshot.
const labTrailingLogs = 100

// startPowerLab starts the 3-node lab cluster of bin with each node's data
// on a lazyfs disk of its own.
func startPowerLab(t *testing.T, bin string) *powerLab {
	t.Helper()
	f := &powerLab{lab: newNetLab(t, "n1", "n2", "n3", "cl"), disks: map[string]*powerDisk{}}
	// Both durability models: n2's disk is ext4-like, the others strict.
	for i, h := range []string{"n1", "n2", "n3"} {
		f.disks[h] = newPowerDisk(t, models[i%len(models)])
	}
	// Frequent snapshots, so that the snapshot points are reached within
	// seconds and a node that is away falls behind the leader's log.
	f.c = startLabClusterWith(t, f.lab, labOptions{
		bin:     bin,
		flags:   []string{"--snapshot-threshold", "300", "--snapshot-interval", "500ms", "--trailing-logs", strconv.Itoa(labTrailingLogs)},
		env:     f.env,
		dataDir: func(h string) string { return f.disks[h].dataDir() },
	}, "n1", "n2", "n3")
	return f
}

// set sets the point's terms on host, over gofail's HTTP switch.
func (f *powerLab) set(t *testing.T, host, point, terms string) {
	t.Helper()
	dialer := nsDialer{netns: f.lab.ns["cl"]}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) { return dialer.Dial(network, addr) },
	}}
	url := "http://" + net.JoinHostPort(f.lab.ip[host], failpointPort) + "/" + point
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(terms))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("set failpoint %s on %s: %v", point, host, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("set failpoint %s on %s: %s: %s", point, host, resp.Status, body)
	}
}

// waitKilled waits until the point has killed host's process, and checks
// from the node's log that it was the point and not a crash of its own.
func (f *powerLab) waitKilled(t *testing.T, host, point string, timeout time.Duration) {
	t.Helper()
	n := f.c.nodes[host]
	deadline := time.Now().Add(timeout)
	for {
		if gone, _ := n.exited(); gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("failpoint %s on %s not reached within %s", point, host, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if want := "failpoint " + point + ": killing the process"; !strings.Contains(string(b), want) {
		t.Fatalf("%s exited without %q in its log:\n%s", host, want, tail(string(b), 30))
	}
}

// env is host's environment with no point set: gofail's switch on its
// lab address.
func (f *powerLab) env(host string) []string {
	return []string{"GOFAIL_HTTP=" + net.JoinHostPort(f.lab.ip[host], failpointPort)}
}

// restart cuts the power of host's disk (the process is already dead) and
// starts it again on what survived, with no point set.
func (f *powerLab) restart(host string) {
	n := f.c.nodes[host]
	f.disks[host].cut(n)
	n.env = f.env(host)
	n.start()
}

func TestFailpoints(t *testing.T) {
	f := startFailpointLab(t)
	w := startFaultWorkload(t, f.lab, f.c)
	time.Sleep(2 * time.Second)
	rounds := 1
	if longProfile() {
		rounds = 3
	}
	for round := 0; round < rounds && !t.Failed(); round++ {
		for _, cr := range crashes() {
			name := cr.point + " on a follower"
			if cr.onLeader {
				name = cr.point + " on the leader"
			}
			if !t.Run(name, func(t *testing.T) { runCrash(t, f, w, cr) }) {
				break
			}
		}
	}
	if !t.Failed() {
		t.Run("snapshotRestore on a follower installing the leader's snapshot", func(t *testing.T) { crashDuringInstall(t, f, w) })
	}
	w.stop()
	w.check(t, f.c)
}

// runCrash sets cr's point on its node, waits for the kill, cuts the
// power, restarts the node and waits until the cluster has recovered.
func runCrash(t *testing.T, f *powerLab, w *faultWorkload, cr crash) {
	leader, followers := f.c.roles(60 * time.Second)
	host := followers[rand.IntN(len(followers))]
	if cr.onLeader {
		host = leader
	}
	start := time.Now()
	f.set(t, host, cr.point, cr.terms)
	f.waitKilled(t, host, cr.point, 60*time.Second)
	killed := time.Now()
	f.restart(host)
	recovery := w.recover(t, f.c, killed)
	t.Logf("%s on %s (%s): reached %s after it was set; the cluster served again through every server %s after the kill",
		cr.point, host, cr.terms, killed.Sub(start).Round(10*time.Millisecond), recovery.Round(100*time.Millisecond))
	w.report = append(w.report, fmt.Sprintf("%s on %s: recovered %s after the kill", cr.point, host, recovery.Round(100*time.Millisecond)))
}

// crashDuringInstall stops a follower until the leader's log no longer
// holds what it lacks, so that it must install the leader's snapshot, and
// starts it with the snapshotRestore point set: it dies half-way through
// the install, loses power, and installs it again on the next start.
func crashDuringInstall(t *testing.T, f *powerLab, w *faultWorkload) {
	_, followers := f.c.roles(60 * time.Second)
	host := followers[0]
	last := f.index(t, host).LastIndex
	if last == 0 {
		t.Fatalf("no node report from %s in the cluster status", host)
	}
	f.c.nodes[host].kill()
	// The leader's next snapshot must be taken past last + the trailing
	// logs it keeps, so that its log starts after what host holds.
	const trailing = labTrailingLogs
	var snap schema.ClusterSnapshotReply
	deadline := time.Now().Add(60 * time.Second)
	for snap.Index <= last+trailing+50 {
		if time.Now().After(deadline) {
			t.Fatalf("the leader's snapshot did not pass index %d within 60 s (at %d)", last+trailing+50, snap.Index)
		}
		time.Sleep(500 * time.Millisecond)
		data, err := request(w.raw[followers[1]], "concord.cluster.snapshot", map[string]any{}, 30*time.Second)
		if err != nil {
			continue // the workload's entries come in; try again
		}
		if err := json.Unmarshal(data, &snap); err != nil {
			t.Fatal(err)
		}
	}
	// A start restores host's own newest snapshot first, through the same
	// point: the install is the second restore when there is one.
	terms := `return("kill")`
	if hasSnapshot(f.disks[host].dataDir()) {
		terms = `1*off->return("kill")`
	}
	n := f.c.nodes[host]
	n.env = append(f.env(host), "GOFAIL_FAILPOINTS="+failpoint.SnapshotRestore+"="+terms)
	start := time.Now()
	n.start()
	f.waitKilled(t, host, failpoint.SnapshotRestore, 60*time.Second)
	killed := time.Now()
	f.restart(host)
	recovery := w.recover(t, f.c, killed)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		got := f.index(t, host).AppliedIndex
		if got >= snap.Index {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s applied up to %d within 60 s of its restart, short of the leader's snapshot at %d", host, got, snap.Index)
		}
	}
	t.Logf("snapshotRestore on %s: killed %s after its start, installing the leader's snapshot at index %d (it held up to %d); recovered %s after the kill",
		host, killed.Sub(start).Round(10*time.Millisecond), snap.Index, last, recovery.Round(100*time.Millisecond))
	w.report = append(w.report, fmt.Sprintf("snapshotRestore on %s during an install: recovered %s after the kill", host, recovery.Round(100*time.Millisecond)))
}

// index is host's report of its log and applied indexes, as the cluster
// status carries it; zero while it has none.
func (f *powerLab) index(t *testing.T, host string) schema.NodeInfo {
	t.Helper()
	st := f.c.waitMembers(60 * time.Second)
	for _, m := range st.Members {
		if m.ID == host && m.Node != nil {
			return *m.Node
		}
	}
	return schema.NodeInfo{}
}

// hasSnapshot reports whether dataDir holds a finished snapshot that a
// start would restore: a directory not named .tmp with a non-empty
// meta.json and state.bin.
func hasSnapshot(dataDir string) bool {
	dir := filepath.Join(dataDir, "snapshots")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		whole := true
		for _, name := range []string{"meta.json", "state.bin"} {
			if st, err := os.Stat(filepath.Join(dir, e.Name(), name)); err != nil || st.Size() == 0 {
				whole = false
			}
		}
		if whole {
			return true
		}
	}
	return false
}

// migrationSteps is how many steps the migration of the v1 test data
// passes through (service/logstore/migrate.go: its log fits one batch).
const migrationSteps = 10

// A node on the data directory a release before the WAL wrote
// (tests/testdata/datadir-v1) dies after a step of the log migration and
// loses power; it starts again, finishes the migration, and holds every
// key of that release at its revision; after every step in turn.
func TestFailpointDuringMigration(t *testing.T) {
	bin := failpointBin(t)
	var want struct {
		Revision int64             `json:"revision"`
		KVs      []schema.KeyValue `json:"kvs"`
	}
	b, err := os.ReadFile("../testdata/datadir-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	for k := range migrationSteps {
		t.Run(fmt.Sprintf("after step %d", k+1), func(t *testing.T) {
			d := newPowerDisk(t, lazyfs.Strict)
			if out, err := exec.Command("cp", "-a", "../testdata/datadir-v1", d.dataDir()).CombinedOutput(); err != nil {
				t.Fatalf("copy the v1 data directory: %v: %s", err, out)
			}
			syncTree(t, d.dataDir()) // cp does not fsync: a cut would take the copy
			n := newNode(t, d.dataDir())
			n.bin = bin
			n.env = []string{fmt.Sprintf(`GOFAIL_FAILPOINTS=%s=%d*off->return("kill")`, failpoint.MigrationStep, k)}
			n.start()
			deadline := time.Now().Add(30 * time.Second)
			for gone := false; !gone; gone, _ = n.exited() {
				if n.ping() == nil {
					t.Fatalf("the node served without being killed after step %d: the migration no longer has %d steps", k+1, migrationSteps)
				}
				if time.Now().After(deadline) {
					t.Fatalf("not killed after step %d within 30 s", k+1)
				}
				time.Sleep(20 * time.Millisecond)
			}
			d.cut(n)
			n.env = nil
			n.start()
			n.waitServing(30 * time.Second)
			checkV1State(t, n, want.Revision, want.KVs)
		})
	}
}

// checkV1State checks that n holds every key of the v1 test data with its
// value, at the revision the old release last reported.
func checkV1State(t *testing.T, n *node, revision int64, kvs []schema.KeyValue) {
	t.Helper()
	nc, err := connectFrom("", n.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	prefix := ""
	data, err := request(nc, "concord.kv.get", schema.KVGetRequest{Prefix: &prefix}, 10*time.Second)
	if err != nil {
		t.Fatalf("read every key: %v", err)
	}
	var got schema.KVGetReply
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Revision != revision {
		t.Errorf("revision %d after the migration, want %d", got.Revision, revision)
	}
	have := map[string]string{}
	for _, kv := range got.KVs {
		have[kv.Key] = compactJSON(t, kv.Value)
	}
	for _, kv := range kvs {
		if v, ok := have[kv.Key]; !ok || v != compactJSON(t, kv.Value) {
			t.Errorf("key %s = %q (present %v) after the migration, want %s", kv.Key, v, ok, kv.Value)
		}
	}
	if len(got.KVs) != len(kvs) {
		t.Errorf("%d keys after the migration, want %d", len(got.KVs), len(kvs))
	}
}

func compactJSON(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("value %s: %v", raw, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// syncTree fsyncs every file and directory under root, and root's parent.
func syncTree(t *testing.T, root string) {
	t.Helper()
	syncPath := func(p string) {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			t.Fatalf("sync %s: %v", p, err)
		}
	}
	if err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		syncPath(p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	syncPath(filepath.Dir(root))
}
