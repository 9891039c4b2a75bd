package robustness

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	cc "github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

// Packet-level network faults: each node in a network namespace of its
// own (netLab), faults made with nftables on every link at once (NATS
// routes, client links and Raft alike), and each cut checked to have taken
// effect before the scenario relies on it.

// labCluster is a Concord cluster whose nodes run in a netLab: NATS on
// <ip>:4222, routes on <ip>:6222, Raft on <ip>:7000.
type labCluster struct {
	t     *testing.T
	lab   *netLab
	names []string
	nodes map[string]*node
}

func natsURL(l *netLab, host string) string  { return "nats://" + l.ip[host] + ":4222" }
func raftAddr(l *netLab, host string) string { return l.ip[host] + ":7000" }

// startLabCluster starts a node on each named host of lab: the first
// bootstraps, the others join; it returns once all are members.
func startLabCluster(t *testing.T, lab *netLab, names ...string) *labCluster {
	t.Helper()
	return startLabClusterWith(t, lab, labOptions{}, names...)
}

// labOptions changes how startLabClusterWith starts each node.
type labOptions struct {
	bin     string                     // the binary; binPath when ""
	flags   []string                   // added to every node's serve flags
	env     func(host string) []string // added to a node's environment
	dataDir func(host string) string   // a node's data directory; a temporary one when nil
}

// startLabClusterWith is startLabCluster with options.
func startLabClusterWith(t *testing.T, lab *netLab, o labOptions, names ...string) *labCluster {
	t.Helper()
	c := &labCluster{t: t, lab: lab, names: names, nodes: map[string]*node{}}
	var routes []string
	for _, h := range names {
		routes = append(routes, "nats://"+lab.ip[h]+":6222")
	}
	dir := t.TempDir()
	for i, h := range names {
		mode := "--join"
		if i == 0 {
			mode = "--bootstrap"
		}
		data := filepath.Join(dir, h)
		if o.dataDir != nil {
			data = o.dataDir(h)
		}
		n := newNodeWith(t, lab.ns[h], natsURL(lab, h), append([]string{"serve", "--node-id", h,
			"--data-dir", data, "--raft-addr", raftAddr(lab, h),
			"--nats-listen", lab.ip[h] + ":4222", "--nats-cluster", lab.ip[h] + ":6222",
			"--nats-routes", strings.Join(routes, ","), mode}, o.flags...))
		n.bin = o.bin
		if o.env != nil {
			n.env = o.env(h)
		}
		n.start()
		c.nodes[h] = n
	}
	c.nodes[names[0]].waitServing(60 * time.Second)
	c.waitMembers(60 * time.Second)
	return c
}

// follower returns a node that does not lead, once the cluster is whole,
// and the others.
func (c *labCluster) follower() (string, []string) {
	c.t.Helper()
	leader, followers := c.roles(30 * time.Second)
	return followers[0], append([]string{leader}, followers[1:]...)
}

// roles returns the leader, once the cluster is whole, and the other
// nodes.
func (c *labCluster) roles(timeout time.Duration) (string, []string) {
	c.t.Helper()
	leader := c.waitMembers(timeout).Leader
	var followers []string
	for _, h := range c.names {
		if h != leader {
			followers = append(followers, h)
		}
	}
	return leader, followers
}

// status asks the cluster, through host's own server, for its status.
func (c *labCluster) status(host string) (schema.ClusterStatusReply, error) {
	var st schema.ClusterStatusReply
	nc, err := connectFrom(c.lab.ns[host], natsURL(c.lab, host), nats.Timeout(2*time.Second))
	if err != nil {
		return st, err
	}
	defer nc.Close()
	data, err := request(nc, "concord.cluster.status", map[string]any{}, 3*time.Second)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(data, &st)
}

// waitMembers waits until every node is a reachable member, as the leader
// sees it through the first node's server.
func (c *labCluster) waitMembers(timeout time.Duration) schema.ClusterStatusReply {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, err := c.status(c.names[0])
		if err == nil {
			reachable := 0
			for _, m := range st.Members {
				if m.Reachable {
					reachable++
				}
			}
			if reachable == len(c.names) && st.Leader != "" {
				return st
			}
			err = fmt.Errorf("%d of %d members reachable, leader %q", reachable, len(c.names), st.Leader)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("cluster not whole within %s: %v", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A follower cut off from both other nodes, at every link: clients on its
// NATS server send writes. Its standby answers them (it sees no leader),
// while NATS also routes each of them toward the leader, where it waits
// behind the dead link and arrives when the link heals. So no write the
// cut-off node answered "503, nothing changed" may be applied later: the
// answer must be 504 outcome_unknown. Before that rule, every write of
// such a cut got 503 and every one was applied after the heal.
func TestCutFollowerNeverSaysRetryForAWriteThatLands(t *testing.T) {
	lab := newNetLab(t, "n1", "n2", "n3", "cl")
	c := startLabCluster(t, lab, "n1", "n2", "n3")
	victim, others := c.follower()
	nc, err := connectFrom(lab.ns["cl"], natsURL(lab, victim), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := request(nc, "concord.kv.put", map[string]any{"key": "cut.before", "value": 1}, 10*time.Second); err != nil {
		t.Fatalf("a put through %s before the cut: %v", victim, err)
	}

	lab.cut(victim, both, others...)
	for _, o := range others {
		if lab.reaches(victim, raftAddr(lab, o), time.Second) || lab.reaches(o, raftAddr(lab, victim), time.Second) {
			t.Fatalf("the cut between %s and %s did not take effect", victim, o)
		}
	}
	if !lab.reaches("cl", lab.ip[victim]+":4222", time.Second) {
		t.Fatalf("the client host lost %s too: the cut is wider than meant", victim)
	}

	// Writes through the cut-off server, each with an idempotency key
	// and no deadline, as a plain `nats req` user sends them.
	type sent struct {
		key, answer string
	}
	var writes []sent
	standbyAnswered := 0
	deadline := time.Now().Add(20 * time.Second)
	for len(writes) < 14 && time.Now().Before(deadline) {
		key := fmt.Sprintf("cut.%02d", len(writes))
		m := nats.NewMsg("concord.kv.put")
		m.Data = []byte(fmt.Sprintf(`{"key":%q,"value":1}`, key))
		m.Header.Set(schema.HeaderIdempotencyKey, nuid.Next())
		answer := "no reply"
		if resp, err := nc.RequestMsg(m, 3*time.Second); err == nil {
			answer = "ok"
			if name := errorName(resp); name != "" {
				answer = name
			}
		}
		if answer == schema.ErrUnavailable || answer == schema.ErrOutcomeUnknown || answer == schema.ErrNotLeader {
			standbyAnswered++
		}
		writes = append(writes, sent{key, answer})
	}
	if standbyAnswered == 0 {
		t.Fatalf("no write through the cut-off node was answered by it (%v): the scenario tested nothing", writes)
	}

	lab.heal()
	for _, o := range others {
		if !lab.reaches(victim, raftAddr(lab, o), 2*time.Second) {
			t.Fatalf("%s does not reach %s after the heal", victim, o)
		}
	}
	c.waitMembers(90 * time.Second)
	// What waited behind the dead links has arrived by now.
	time.Sleep(3 * time.Second)

	reader, err := connectFrom(lab.ns[others[0]], natsURL(lab, others[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	applied := 0
	for _, w := range writes {
		data, err := request(reader, "concord.kv.get", map[string]any{"key": w.key}, 10*time.Second)
		if err != nil {
			t.Fatalf("get %s: %v", w.key, err)
		}
		var r schema.KVGetReply
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.KVs) == 0 {
			continue
		}
		applied++
		if w.answer == schema.ErrUnavailable || w.answer == schema.ErrNotLeader {
			t.Errorf("put %s was answered %s (nothing changed, retry) during the cut, and was applied at revision %d", w.key, w.answer, r.KVs[0].ModRevision)
		}
	}
	t.Logf("%d writes through the cut-off %s: answers %v; %d applied after the heal", len(writes), victim, writes, applied)
}

// errorName returns the error name of an error reply, "" for a success.
func errorName(m *nats.Msg) string {
	if m.Header.Get(schema.HeaderErrorCode) == "" {
		return ""
	}
	var er schema.ErrorReply
	if err := json.Unmarshal(m.Data, &er); err != nil || er.Error == nil {
		return "undecodable error"
	}
	return er.Error.Name
}

// availabilityBound is how soon after the leader is cut off the healthy
// majority must serve writes through both of its servers again: a new
// election (a second or two), and NATS declaring the routes to the cut
// node dead, so that it stops handing requests to the old leader's
// subscription there. Generous for a busy machine; with NATS's default
// route pings that took 24 to 40 s.
const availabilityBound = 15 * time.Second

// The leader cut off at every link: writes through the two healthy
// servers are served again within availabilityBound, and the time it took
// and the share served during the cut are logged.
func TestLeaderCutHealthyMajorityServes(t *testing.T) {
	lab := newNetLab(t, "n1", "n2", "n3")
	c := startLabCluster(t, lab, "n1", "n2", "n3")
	leader, healthy := c.roles(30 * time.Second)
	conns := map[string]*nats.Conn{}
	for _, h := range healthy {
		nc, err := connectFrom(lab.ns[h], natsURL(lab, h), nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		conns[h] = nc
	}
	lab.cut(leader, both, healthy...)
	cutAt := time.Now()
	for _, h := range healthy {
		if lab.reaches(leader, raftAddr(lab, h), time.Second) || lab.reaches(h, raftAddr(lab, leader), time.Second) {
			t.Fatalf("the cut between %s and %s did not take effect", leader, h)
		}
	}
	// Each healthy server gets one put at a time, each given a second;
	// served again means ten in a row succeeded through both servers.
	var ok, total int
	streak := 0
	var recovered time.Duration
	for i := 0; time.Since(cutAt) < availabilityBound+10*time.Second; i++ {
		h := healthy[i%2]
		_, err := request(conns[h], "concord.kv.put", map[string]any{"key": fmt.Sprintf("avail.%d", i), "value": i}, time.Second)
		total++
		if err != nil {
			streak = 0
			continue
		}
		ok++
		if streak++; streak == 10 {
			recovered = time.Since(cutAt)
			break
		}
	}
	lab.heal()
	if recovered == 0 || recovered > availabilityBound {
		t.Fatalf("writes through the healthy servers not served again within %s of the leader's cut (%d of %d served)", availabilityBound, ok, total)
	}
	t.Logf("leader %s cut: writes through the healthy servers served again %s after the cut; %d of %d served until then",
		leader, recovered.Round(100*time.Millisecond), ok, total)
}

// A Go client on a server cut off from the rest of the cluster (its own
// link to that server is fine, so NATS never moves it) keeps hearing the
// node's standby; it moves to another server of its pool and its writes
// go through, well within their deadline.
func TestClientOnCutServerMoves(t *testing.T) {
	lab := newNetLab(t, "n1", "n2", "n3", "cl")
	c := startLabCluster(t, lab, "n1", "n2", "n3")
	victim, others := c.follower()
	// The victim's server first in the pool, and no shuffling: the client
	// starts there.
	urls := []string{natsURL(lab, victim), natsURL(lab, others[0]), natsURL(lab, others[1])}
	gc, err := cc.Connect(cc.URL(strings.Join(urls, ",")), cc.AttemptTimeout(time.Second),
		cc.NATSOptions(nats.DontRandomize(), nats.SetCustomDialer(nsDialer{netns: lab.ns["cl"]}), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if got := gc.NATS().ConnectedUrl(); got != urls[0] {
		t.Fatalf("the client started on %s, not the victim's %s", got, urls[0])
	}
	lab.cut(victim, both, others...)
	for _, o := range others {
		if lab.reaches(victim, raftAddr(lab, o), time.Second) {
			t.Fatalf("the cut between %s and %s did not take effect", victim, o)
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	for i := 0; i < 5; i++ {
		if _, err := gc.Put(ctx, schema.KVPutRequest{Key: fmt.Sprintf("move.%d", i), Value: json.RawMessage(`1`)}); err != nil {
			t.Fatalf("put %d from a client of the cut-off %s: %v (connected to %s)", i, victim, err, gc.NATS().ConnectedUrl())
		}
	}
	if got := gc.NATS().ConnectedUrl(); got == urls[0] {
		t.Fatalf("the puts went through, but the client is still on the cut-off %s", got)
	}
	t.Logf("a client of the cut-off %s moved to %s; five puts went through %s after the cut",
		victim, gc.NATS().ConnectedUrl(), time.Since(start).Round(100*time.Millisecond))
	lab.heal()
}
