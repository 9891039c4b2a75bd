package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
	"github.com/concord-io/concord/tests/freeport"
)

// cluster is a set of concord processes on loopback whose embedded NATS
// servers route to each other, so a client may connect to any of them.
type cluster struct {
	t     *testing.T
	dir   string
	nodes []*node
	// per node: NATS client URL, Raft address, fault-switch file, pause
	// file (--test-pause-file), and the operator listener (/metrics,
	// /readyz)
	urls, raftAddrs, faults, pauses, metricsAddrs []string
}

// startCluster starts size nodes: n1 bootstraps, the others join. extra
// flags go to every node.
func startCluster(t *testing.T, size int, extra ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir()}
	var routes []string
	clusterPorts := make([]int, size)
	for i := 0; i < size; i++ {
		clusterPorts[i] = freeport.Port(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", clusterPorts[i]))
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t)))
		c.raftAddrs = append(c.raftAddrs, fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)))
		c.faults = append(c.faults, filepath.Join(c.dir, fmt.Sprintf("faults-n%d.json", i+1)))
		c.pauses = append(c.pauses, filepath.Join(c.dir, fmt.Sprintf("pause-n%d.json", i+1)))
		c.metricsAddrs = append(c.metricsAddrs, fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)))
	}
	// Registered first, so a node that fails to start still shows its log.
	t.Cleanup(func() {
		if t.Failed() {
			keepLogs(t, c.dir)
		}
		for i, n := range c.nodes {
			n.kill()
			if t.Failed() {
				if b, err := os.ReadFile(n.logPath); err == nil {
					lines := 40
					if strings.Contains(string(b), "SIGQUIT") {
						lines = 100000 // a goroutine dump from a stuck shutdown: all of it
					}
					t.Logf("n%d log:\n%s", i+1, tail(string(b), lines))
				}
			}
		}
	})
	for i := 0; i < size; i++ {
		mode := "--join"
		if i == 0 {
			mode = "--bootstrap"
		}
		args := []string{"serve", "--node-id", fmt.Sprintf("n%d", i+1),
			"--data-dir", filepath.Join(c.dir, fmt.Sprintf("data-n%d", i+1)),
			"--raft-addr", c.raftAddrs[i],
			"--nats-listen", strings.TrimPrefix(c.urls[i], "nats://"),
			"--nats-cluster", fmt.Sprintf("127.0.0.1:%d", clusterPorts[i]),
			"--nats-routes", strings.Join(routes, ","),
			"--test-fault-file", c.faults[i],
			"--test-pause-file", c.pauses[i],
			"--metrics-listen", c.metricsAddrs[i],
			mode}
		args = append(args, extra...)
		n := &node{t: t, dataDir: filepath.Join(c.dir, fmt.Sprintf("data-n%d", i+1)), natsURL: c.urls[i], args: args,
			logPath: filepath.Join(c.dir, fmt.Sprintf("n%d.log", i+1))}
		n.start()
		c.nodes = append(c.nodes, n)
	}
	// All at once: n1 bootstraps only once its NATS routes to the others
	// are up (a bootstrap needs to see the whole bus).
	c.nodes[0].waitReady()
	c.waitMembers(size, 30*time.Second)
	return c
}

// conn connects to every node's NATS server, reconnecting on failures.
func (c *cluster) conn() *nats.Conn {
	c.t.Helper()
	nc, err := nats.Connect(strings.Join(c.urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}

// status asks the leader for the cluster status.
func (c *cluster) status(nc *nats.Conn, hash bool) (schema.ClusterStatusReply, error) {
	var st schema.ClusterStatusReply
	body, _ := json.Marshal(schema.ClusterStatusRequest{Hash: hash})
	msg, err := nc.Request("concord."+string(subjects.ClusterStatus), body, 3*time.Second)
	if err != nil {
		return st, err
	}
	if msg.Header.Get(schema.HeaderErrorCode) != "" {
		return st, fmt.Errorf("status: %s", msg.Data)
	}
	if err := schema.Validate("cluster.status.reply", msg.Data); err != nil {
		c.t.Errorf("cluster.status reply %s: %v", msg.Data, err)
	}
	return st, json.Unmarshal(msg.Data, &st)
}

// waitMembers waits until the leader reports size reachable voters.
func (c *cluster) waitMembers(size int, timeout time.Duration) schema.ClusterStatusReply {
	c.t.Helper()
	nc := c.conn()
	defer nc.Close()
	var st schema.ClusterStatusReply
	checkFor(c.t, timeout, 100*time.Millisecond, func() error {
		var err error
		if st, err = c.status(nc, false); err != nil {
			return err
		}
		reachable := 0
		for _, m := range st.Members {
			if m.Reachable && m.Suffrage == schema.SuffrageVoter {
				reachable++
			}
		}
		if len(st.Members) != size || reachable != size {
			return fmt.Errorf("%d members, %d reachable voters, want %d", len(st.Members), reachable, size)
		}
		return nil
	})
	return st
}

// leaderIndex returns the position of the current leader in c.nodes.
func (c *cluster) leaderIndex(nc *nats.Conn) int {
	c.t.Helper()
	var idx int
	checkFor(c.t, 20*time.Second, 50*time.Millisecond, func() error {
		st, err := c.status(nc, false)
		if err != nil {
			return err
		}
		_, err = fmt.Sscanf(st.Leader, "n%d", &idx)
		idx--
		return err
	})
	return idx
}

// waitConverged waits until every member reports the same applied index
// and the same state hash: the replicas hold byte-identical state.
func (c *cluster) waitConverged(size int, timeout time.Duration) {
	c.t.Helper()
	nc := c.conn()
	defer nc.Close()
	checkFor(c.t, timeout, 200*time.Millisecond, func() error {
		st, err := c.status(nc, true)
		if err != nil {
			return err
		}
		if len(st.Members) != size {
			return fmt.Errorf("%d members", len(st.Members))
		}
		var first *schema.NodeInfo
		for _, m := range st.Members {
			if !m.Reachable {
				return fmt.Errorf("%s unreachable", m.ID)
			}
			if first == nil {
				first = m.Node
				continue
			}
			if m.Node.AppliedIndex != first.AppliedIndex || m.Node.StateHash != first.StateHash {
				return fmt.Errorf("%s at %d hash %.8s, %s at %d hash %.8s", first.ID, first.AppliedIndex, first.StateHash, m.ID, m.Node.AppliedIndex, m.Node.StateHash)
			}
		}
		return nil
	})
}

// partition cuts node i off from every other node at the Raft transport
// (both directions); heal undoes it.
func (c *cluster) partition(i int) {
	c.t.Helper()
	var others []string
	for j, addr := range c.raftAddrs {
		if j != i {
			others = append(others, addr)
			c.writeFaults(j, []string{c.raftAddrs[i]})
		}
	}
	c.writeFaults(i, others)
}

func (c *cluster) heal() {
	c.t.Helper()
	for j := range c.faults {
		c.writeFaults(j, nil)
	}
}

func (c *cluster) writeFaults(i int, block []string) {
	c.t.Helper()
	data, _ := json.Marshal(map[string]any{"block": block})
	tmp := c.faults[i] + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, c.faults[i]); err != nil {
		c.t.Fatal(err)
	}
}

// keepLogsVar names a directory where a failed cluster test leaves a copy
// of its nodes' logs, which t.TempDir would otherwise remove with the test.
const keepLogsVar = "CONCORD_TEST_KEEP_LOGS"

// keepLogs copies every node log in dir into a new directory under
// $CONCORD_TEST_KEEP_LOGS, when that is set, and says where.
func keepLogs(t *testing.T, dir string) {
	root := os.Getenv(keepLogsVar)
	if root == "" {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) == 0 {
		return
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	dest, err := os.MkdirTemp(root, name+"-")
	if err != nil {
		t.Logf("keep logs: %v", err)
		return
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err == nil {
			err = os.WriteFile(filepath.Join(dest, filepath.Base(l)), b, 0o644)
		}
		if err != nil {
			t.Logf("keep logs: %v", err)
		}
	}
	t.Logf("node logs kept in %s", dest)
}
