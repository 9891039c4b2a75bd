package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/tests/freeport"
)

// A cluster forms from one bootstrapping node and two joiners; replicas
// end byte-identical; a second bootstrap on the same bus and a node of
// another cluster are both refused with a clear error.
func TestClusterFormsAndRefusesStrangers(t *testing.T) {
	c := startCluster(t, 3)
	nc := c.conn()
	if _, e, err := request(nc, "concord.kv.put", map[string]any{"key": "formed", "value": true}, "formed-1", 20*time.Second); err != nil || e != nil {
		t.Fatal(err, e)
	}
	c.waitConverged(3, 20*time.Second)
	st, err := c.status(nc, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.ClusterID) != 16 || st.Revision != 1 {
		t.Fatalf("status %+v", st)
	}

	// A fourth node told to bootstrap on this bus refuses.
	routes := strings.Split(argAfter(c.nodes[0].args, "--nats-routes"), ",")
	dir := t.TempDir()
	second := newProc(t, 60*time.Second, binPath, "serve", "--node-id", "n4", "--data-dir", filepath.Join(dir, "d4"),
		"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--nats-listen", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)),
		"--nats-cluster", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--nats-routes", strings.Join(routes, ","), "--bootstrap")
	out, err := second.combinedOutput()
	if second.timedOut() {
		t.Fatalf("a second bootstrap on the bus kept running for 60 s:\n%s", tail(string(out), 10))
	}
	if err == nil || !strings.Contains(string(out), "already serves this NATS bus") || !strings.Contains(string(out), st.ClusterID) {
		t.Fatalf("second bootstrap: err %v\n%s", err, tail(string(out), 10))
	}

	// A node of another cluster asking to join is refused.
	foreign := startNode(t, nodeOpts{flags: []string{"--node-id", "n5"}})
	fc := connect(t, foreign.natsURL)
	fc.grant(30)
	foreign.stop()
	args := []string{"serve", "--node-id", "n5", "--data-dir", foreign.dataDir,
		"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--nats-listen", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)),
		"--nats-cluster", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--nats-routes", strings.Join(routes, ","), "--join"}
	joiner := newProc(t, 30*time.Second, binPath, args...)
	out, err = joiner.combinedOutput()
	if joiner.timedOut() {
		t.Fatalf("a node of another cluster kept running for 30 s after asking to join:\n%s", tail(string(out), 10))
	}
	if err == nil || !strings.Contains(string(out), "belongs to cluster") {
		t.Fatalf("foreign join: err %v\n%s", err, tail(string(out), 10))
	}
	if got := c.waitMembers(3, 10*time.Second); len(got.Members) != 3 {
		t.Fatalf("members after the refusals: %+v", got.Members)
	}
}

func argAfter(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// kill -9 of the leader under steady load: a new leader answers within a
// few seconds, every acknowledged write is there (the history is
// linearizable), kept-alive leases survive, abandoned ones expire within
// the failover bound and never before their ttl.
func TestLeaderKillUnderLoad(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	nc := c.conn()
	w := startWorkload(t, c, 4)
	time.Sleep(3 * time.Second)
	old := c.leaderIndex(nc)
	killed := time.Now()
	c.nodes[old].kill()
	next := c.leaderIndex(nc)
	t.Logf("killed leader n%d; n%d leads after %s", old+1, next+1, time.Since(killed))
	if next == old {
		t.Fatalf("the killed node still leads")
	}
	time.Sleep(4 * time.Second)
	c.nodes[old].restart()
	time.Sleep(time.Second)
	w.finish()
	if gap := time.Duration(w.maxGap.Load()); gap > 10*time.Second {
		t.Fatalf("writes stalled for %s around the failover", gap)
	}
	c.waitMembers(3, 20*time.Second)
	c.waitConverged(3, 30*time.Second)
}

// A follower that misses more than the trailing log catches up by
// snapshot install and ends with the leader's exact state.
func TestFollowerCatchesUpBySnapshot(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "--snapshot-threshold", "500", "--snapshot-interval", "200ms", "--trailing-logs", "100")
	nc := c.conn()
	leader := c.leaderIndex(nc)
	f := (leader + 1) % 3
	c.nodes[f].kill()
	putManyCluster(t, c, "bulk.", 10000)
	// The writes' last log index: concurrent writes share entries, so it
	// is not the number of writes.
	wrote, err := nodeInfo(nc, fmt.Sprintf("n%d", leader+1))
	if err != nil {
		t.Fatal(err)
	}
	// An operator can ask for a snapshot too; it covers at least the writes.
	data, e, err := request(nc, "concord.cluster.snapshot", map[string]any{}, "", 20*time.Second)
	if err != nil || e != nil {
		t.Fatalf("cluster.snapshot: %v %v", err, e)
	}
	if err := schema.Validate("cluster.snapshot.reply", data); err != nil {
		t.Fatalf("snapshot reply %s: %v", data, err)
	}
	var sr schema.ClusterSnapshotReply
	mustUnmarshal(t, data, &sr)
	if sr.Index < wrote.AppliedIndex {
		t.Fatalf("snapshot at index %d, before the 10,000 writes, which ended at index %d", sr.Index, wrote.AppliedIndex)
	}
	// While it catches up, the follower's /readyz must not say ready
	// before it has applied what the leader had committed when asked.
	leaderID := fmt.Sprintf("n%d", leader+1)
	c.nodes[f].start()
	var polls, behind int
	checkFor(t, 60*time.Second, 10*time.Millisecond, func() error {
		before, err := nodeInfo(nc, leaderID)
		if err != nil {
			return err
		}
		polls++
		code, body, err := httpStatus(c.metricsAddrs[f], "/readyz")
		if err != nil {
			return err // not listening yet
		}
		if code != 200 {
			behind++
			return fmt.Errorf("n%d not ready: %s", f+1, body)
		}
		after, err := nodeInfo(nc, fmt.Sprintf("n%d", f+1))
		if err != nil {
			return err
		}
		if after.AppliedIndex < before.CommitIndex {
			t.Fatalf("n%d said ready at applied index %d, before the leader's commit index %d of before the probe", f+1, after.AppliedIndex, before.CommitIndex)
		}
		return nil
	})
	t.Logf("n%d: %d readiness polls, %d not ready", f+1, polls, behind)
	c.waitMembers(3, 30*time.Second)
	c.waitConverged(3, 60*time.Second)
	// hashicorp/raft logs this line when a follower installs the leader's
	// snapshot instead of replaying the log.
	log, _ := os.ReadFile(c.nodes[f].logPath)
	if !strings.Contains(string(log), "Installed remote snapshot") {
		t.Fatalf("n%d caught up without installing a snapshot:\n%s", f+1, tail(string(log), 20))
	}
	var g schema.KVGetReply
	data, e, err = request(nc, "concord.kv.get", map[string]any{"prefix": "bulk.", "count_only": true}, "", 10*time.Second)
	if err != nil || e != nil || json.Unmarshal(data, &g) != nil || g.Count != 10000 {
		t.Fatalf("count after catch-up: %v %v %s", err, e, data)
	}
}

func putManyCluster(t *testing.T, c *cluster, prefix string, n int) {
	t.Helper()
	const conns = 16
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := 0; i < conns; i++ {
		nc := c.conn()
		wg.Add(1)
		go func(i int, nc *nats.Conn) {
			defer wg.Done()
			for k := i; k < n; k += conns {
				key := fmt.Sprintf("%s%05d", prefix, k)
				if _, e, err := request(nc, "concord.kv.put", map[string]any{"key": key, "value": k}, "bulk-"+key, 30*time.Second); err != nil || e != nil {
					errs <- fmt.Errorf("%s: %v %v", key, err, e)
					return
				}
			}
		}(i, nc)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A member is removed, the cluster goes on with two, and the node comes
// back by asking to join again.
func TestRemoveAndReAddMember(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	nc := c.conn()
	leader := c.leaderIndex(nc)
	f := (leader + 2) % 3
	id := fmt.Sprintf("n%d", f+1)
	data, e, err := request(nc, "concord.cluster.remove", map[string]any{"id": id}, "", 10*time.Second)
	if err != nil || e != nil {
		t.Fatalf("remove %s: %v %v", id, err, e)
	}
	if err := schema.Validate("cluster.remove.reply", data); err != nil {
		t.Fatalf("remove reply %s: %v", data, err)
	}
	var rr schema.ClusterRemoveReply
	mustUnmarshal(t, data, &rr)
	if len(rr.Members) != 2 {
		t.Fatalf("members after remove: %+v", rr.Members)
	}
	if _, e, _ := request(nc, "concord.cluster.remove", map[string]any{"id": "n9"}, "", 10*time.Second); e == nil || e.Name != schema.ErrNodeNotFound {
		t.Fatalf("removing a stranger: %v", e)
	}
	if _, e, err := request(nc, "concord.kv.put", map[string]any{"key": "two.only", "value": 2}, "two-1", 10*time.Second); err != nil || e != nil {
		t.Fatal(err, e)
	}
	c.waitMembers(2, 10*time.Second)

	c.nodes[f].kill()
	c.nodes[f].restart() // --join: no longer a member, so it asks again
	c.waitMembers(3, 30*time.Second)
	c.waitConverged(3, 30*time.Second)
}

// Every node restarts in turn under load: no acknowledged write is lost
// and the history stays linearizable.
func TestRollingRestartUnderLoad(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	w := startWorkload(t, c, 3)
	time.Sleep(2 * time.Second)
	for i, n := range c.nodes {
		n.stop()
		time.Sleep(500 * time.Millisecond)
		n.restart()
		c.waitMembers(3, 30*time.Second)
		t.Logf("restarted n%d", i+1)
		time.Sleep(time.Second)
	}
	w.finish()
	c.waitConverged(3, 30*time.Second)
}

// The leader is cut off from both followers at the Raft transport: the
// majority elects a new leader and goes on, the old leader stops leading
// (and so stops answering), and after healing the cluster converges.
func TestPartitionedLeaderStepsDown(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	nc := c.conn()
	w := startWorkload(t, c, 3)
	time.Sleep(2 * time.Second)
	old := c.leaderIndex(nc)
	c.partition(old)
	var next int
	checkFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		if next = c.leaderIndex(nc); next == old {
			return fmt.Errorf("n%d still leads", old+1)
		}
		return nil
	})
	// The old leader no longer leads: it answers only for itself.
	checkFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		msg, err := nc.Request(fmt.Sprintf("concord.cluster.node.n%d.info", old+1), []byte(`{}`), time.Second)
		if err != nil {
			return err
		}
		var info schema.NodeInfo
		mustUnmarshal(t, msg.Data, &info)
		if info.State == "leader" {
			return fmt.Errorf("n%d still believes it leads", old+1)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // the majority serves the load meanwhile
	c.heal()
	w.finish()
	c.waitConverged(3, 30*time.Second)
}

// Three nodes on one external NATS server with user/password auth: no
// embedded servers, the same cluster behaviour.
func TestClusterOnExternalNATS(t *testing.T) {
	t.Parallel()
	ns := startNATSServer(t, &server.Options{Username: "concord", Password: "s3cret"})
	url := ns.ClientURL()
	var nodes []*node
	dir := t.TempDir()
	for i := 1; i <= 3; i++ {
		mode := "--join"
		if i == 1 {
			mode = "--bootstrap"
		}
		n := &node{t: t, dataDir: filepath.Join(dir, fmt.Sprintf("d%d", i)), natsURL: url, logPath: filepath.Join(dir, fmt.Sprintf("n%d.log", i)),
			args: []string{"serve", "--node-id", fmt.Sprintf("n%d", i), "--data-dir", filepath.Join(dir, fmt.Sprintf("d%d", i)),
				"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--nats-url", url, "--nats-user", "concord", "--nats-password", "s3cret", mode}}
		n.start()
		t.Cleanup(n.kill)
		nodes = append(nodes, n)
	}
	nc, err := nats.Connect(url, nats.UserInfo("concord", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &cluster{t: t, nodes: nodes, urls: []string{"nats://concord:s3cret@" + strings.TrimPrefix(url, "nats://")}}
	c.waitMembers(3, 30*time.Second)
	if _, e, err := request(nc, "concord.kv.put", map[string]any{"key": "ext.k", "value": 1}, "ext-1", 10*time.Second); err != nil || e != nil {
		t.Fatal(err, e)
	}
	c.waitConverged(3, 20*time.Second)
	// A node with the wrong password does not start.
	out, err := newProc(t, 60*time.Second, binPath, "serve", "--node-id", "n4", "--data-dir", filepath.Join(dir, "d4"), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)),
		"--nats-url", url, "--nats-user", "concord", "--nats-password", "wrong", "--join").combinedOutput()
	if err == nil || !strings.Contains(strings.ToLower(string(out)), "authorization") {
		t.Fatalf("wrong password: err %v\n%s", err, tail(string(out), 5))
	}
}

// A leader puts concurrent commands into shared log entries only while it
// knows every member reads them: a leader elected while a member is down
// proposes every command alone until that member is back and has said so.
// Under load throughout, the replicas end byte-identical.
func TestBatchEntriesWaitForEveryMember(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "--bus-check-interval", "200ms")
	nc := c.conn()
	batching := func(i int) float64 { return scrapeMetrics(t, c.metricsAddrs[i]).value("concord_raft_batch_entries") }
	waitBatching := func(i int, want float64) {
		t.Helper()
		checkFor(t, 30*time.Second, 100*time.Millisecond, func() error {
			if got := batching(i); got != want {
				return fmt.Errorf("n%d concord_raft_batch_entries %v, want %v", i+1, got, want)
			}
			return nil
		})
	}
	leader := c.leaderIndex(nc)
	waitBatching(leader, 1)
	for i := range c.nodes {
		if i != leader && batching(i) != 0 {
			t.Fatalf("follower n%d reports batching", i+1)
		}
	}
	w := startWorkload(t, c, 4)

	// A follower goes down; the old leader is killed and comes back: the
	// new leader cannot ask the downed follower.
	down := (leader + 1) % 3
	c.nodes[down].kill()
	c.nodes[leader].kill()
	c.nodes[leader].restart()
	newLeader := c.leaderIndex(nc)
	if newLeader == down {
		t.Fatalf("n%d leads while it is down", down+1)
	}
	waitBatching(newLeader, 0)
	applied := func() float64 {
		return scrapeMetrics(t, c.metricsAddrs[newLeader]).value("concord_raft_batch_entries_applied_total")
	}
	before := applied()
	time.Sleep(2 * time.Second) // several gate rounds under load: still off, and no batch entry written
	if got := batching(newLeader); got != 0 {
		t.Fatalf("n%d batches while n%d, which it never heard from, is down", newLeader+1, down+1)
	}
	if after := applied(); after != before {
		t.Fatalf("n%d applied %v batch entries while n%d was down", newLeader+1, after-before, down+1)
	}

	c.nodes[down].restart()
	waitBatching(newLeader, 1)
	before = applied()
	checkFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		if applied() == before {
			return fmt.Errorf("no batch entry applied since batching came back on")
		}
		return nil
	})
	w.finish()
	c.waitConverged(3, 30*time.Second)
}
