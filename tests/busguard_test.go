package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/tests/freeport"
)

// One cluster per bus: a bootstrap is refused unless the node is sure no
// other cluster serves the prefix, and two clusters that meet on one bus
// stop answering (service/bus).

// runConcord runs the concord binary to its end, bounded by timeout and
// killed with the test whatever happens, and returns its exit error and
// combined output.
func runConcord(t *testing.T, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	p := newProc(t, timeout, binPath, args...)
	out, err := p.combinedOutput()
	if p.timedOut() {
		t.Fatalf("concord %s still ran after %s:\n%s", strings.Join(args, " "), timeout, tail(string(out), 20))
	}
	return string(out), err
}

// requestOnce sends one request, without retries: an error reply is
// returned as it came.
func requestOnce(nc *nats.Conn, subject string, body any, timeout time.Duration) ([]byte, *schema.Error, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, nil, err
	}
	msg, err := nc.Request(subject, data, timeout)
	if err != nil {
		return nil, nil, err
	}
	if msg.Header.Get(schema.HeaderErrorCode) != "" {
		var er schema.ErrorReply
		if err := json.Unmarshal(msg.Data, &er); err != nil || er.Error == nil {
			return nil, nil, fmt.Errorf("undecodable error reply %q", msg.Data)
		}
		return nil, er.Error, nil
	}
	return msg.Data, nil, nil
}

// burnCPU keeps every core busy until the test ends, in separate
// processes, as another tenant of a busy machine would.
func burnCPU(t *testing.T) {
	t.Helper()
	for range runtime.NumCPU() {
		if err := newProc(t, 0, "sh", "-c", "while :; do :; done").start(); err != nil {
			t.Fatal(err)
		}
	}
}

// clusterIDsOnBus asks P.cluster.nodes and returns the cluster id of every
// node that answered within a second.
func clusterIDsOnBus(t *testing.T, nc *nats.Conn) map[string][]string {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("concord.cluster.nodes", inbox, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	ids := map[string][]string{}
	for {
		msg, err := sub.NextMsg(time.Second)
		if err != nil {
			return ids
		}
		var info schema.NodeInfo
		if json.Unmarshal(msg.Data, &info) == nil && info.ID != "" {
			ids[info.ClusterID] = append(ids[info.ClusterID], info.ID)
		}
	}
}

// A node told to bootstrap on a bus where a cluster runs refuses, every
// time, while the machine is saturated by CPU burners: a slow route or a
// slow answer means "unsure", and unsure means refuse.
func TestSecondBootstrapRefusedUnderCPULoad(t *testing.T) {
	c := startCluster(t, 3)
	nc := c.conn()
	st := c.waitMembers(3, 30*time.Second)
	routes := argAfter(c.nodes[0].args, "--nats-routes")
	burnCPU(t)
	for try := 1; try <= 20; try++ {
		dir := filepath.Join(t.TempDir(), "data")
		start := time.Now()
		out, err := runConcord(t, 2*time.Minute, "serve", "--node-id", fmt.Sprintf("x%d", try), "--data-dir", dir,
			"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--nats-listen", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)),
			"--nats-cluster", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--nats-routes", routes,
			"--bootstrap", "--bootstrap-wait", "30s")
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !(strings.Contains(out, "already serves this NATS bus") || strings.Contains(out, "bootstrap refused")) {
			t.Fatalf("try %d: a second bootstrap was not refused (err %v):\n%s", try, err, tail(out, 15))
		}
		if _, err := os.Stat(filepath.Join(dir, "cluster-id")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("try %d: the refused node recorded a cluster id (stat: %v)", try, err)
		}
		t.Logf("try %d refused after %s: %s", try, time.Since(start).Round(time.Millisecond), lastLine(strings.TrimSpace(out)))
	}
	// The bus still serves one cluster, the first.
	ids := clusterIDsOnBus(t, nc)
	if len(ids) != 1 || len(ids[st.ClusterID]) != 3 {
		t.Fatalf("clusters on the bus after the refusals: %v, want only %s with 3 nodes", ids, st.ClusterID)
	}
}

// A bootstrap whose NATS routes do not come up within --bootstrap-wait is
// refused, with what was checked and how to proceed: until every route is
// up, a cluster behind one could go unseen.
func TestBootstrapRefusedWithoutRoutes(t *testing.T) {
	dead := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t)) // nothing listens there
	start := time.Now()
	out, err := runConcord(t, time.Minute, "serve", "--node-id", "n1", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--nats-listen", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)),
		"--nats-cluster", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--nats-routes", dead,
		"--bootstrap", "--bootstrap-wait", "1s")
	if err == nil {
		t.Fatalf("bootstrapped without its route:\n%s", tail(out, 10))
	}
	for _, want := range []string{"bootstrap refused", "0 of the 1 other servers in --nats-routes", "--join", "--bootstrap-wait"} {
		if !strings.Contains(out, want) {
			t.Fatalf("refusal does not say %q:\n%s", want, tail(out, 10))
		}
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the refusal took %s; --bootstrap-wait was 1s", took)
	}
	// A flag out of range is refused before anything starts.
	out, err = runConcord(t, time.Minute, "serve", "--data-dir", filepath.Join(t.TempDir(), "data"), "--bus-check-interval", "1ms")
	if err == nil || !strings.Contains(out, "bus check interval") {
		t.Fatalf("--bus-check-interval 1ms: err %v\n%s", err, tail(out, 5))
	}
}

// Two nodes told to bootstrap at the same moment on one bus never make two
// clusters: each answers "starting" while it checks, and a node that hears
// another one starting refuses.
func TestConcurrentBootstrapsMakeOneCluster(t *testing.T) {
	for round := 1; round <= 3; round++ {
		dir := t.TempDir()
		cl := []string{fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))}
		routes := "nats://" + cl[0] + ",nats://" + cl[1]
		var nodes []*node
		for i := range 2 {
			n := &node{t: t, dataDir: filepath.Join(dir, fmt.Sprintf("d%d", i)), natsURL: fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t)),
				logPath: filepath.Join(dir, fmt.Sprintf("n%d.log", i))}
			n.args = []string{"serve", "--node-id", fmt.Sprintf("n%d", i+1), "--data-dir", n.dataDir,
				"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--nats-listen", strings.TrimPrefix(n.natsURL, "nats://"),
				"--nats-cluster", cl[i], "--nats-routes", routes, "--bootstrap", "--bootstrap-wait", "20s"}
			nodes = append(nodes, n)
		}
		for _, n := range nodes {
			n.start()
			t.Cleanup(n.kill)
		}
		// Each node either refuses (and exits) or serves; wait until each
		// has done one or the other.
		serving := func(n *node) bool {
			nc, err := nats.Connect(n.natsURL, nats.Timeout(time.Second))
			if err != nil {
				return false
			}
			defer nc.Close()
			info, err := nodeInfo(nc, argAfter(n.args, "--node-id"))
			return err == nil && info.ClusterID != "" && info.State == "leader"
		}
		checkFor(t, 60*time.Second, 200*time.Millisecond, func() error {
			for i, n := range nodes {
				select {
				case <-n.done:
					continue
				default:
				}
				if !serving(n) {
					return fmt.Errorf("n%d neither refused nor leads yet", i+1)
				}
			}
			return nil
		})
		clusters := 0
		for _, n := range nodes {
			b, err := os.ReadFile(filepath.Join(n.dataDir, "cluster-id"))
			select {
			case <-n.done:
				if err == nil {
					t.Fatalf("round %d: %s exited but recorded cluster %s", round, argAfter(n.args, "--node-id"), b)
				}
				log, _ := os.ReadFile(n.logPath)
				if !strings.Contains(string(log), "bootstrap refused") && !strings.Contains(string(log), "already serves this NATS bus") {
					t.Fatalf("round %d: %s exited without a refusal:\n%s", round, argAfter(n.args, "--node-id"), tail(string(log), 10))
				}
			default:
				clusters++
			}
		}
		if clusters > 1 {
			t.Fatalf("round %d: two clusters formed", round)
		}
		t.Logf("round %d: %d cluster(s) formed", round, clusters)
		for _, n := range nodes {
			n.kill()
		}
	}
}

// routedNode starts a single-node cluster whose embedded NATS listens for
// routes, so that its bus can later be joined to another.
func routedNode(t *testing.T, id string) (n *node, clusterAddr, metricsAddr string) {
	t.Helper()
	clusterAddr = fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	metricsAddr = fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	n = startNode(t, nodeOpts{flags: []string{"--node-id", id, "--nats-cluster", clusterAddr,
		"--bus-check-interval", "500ms", "--metrics-listen", metricsAddr}})
	return n, clusterAddr, metricsAddr
}

func readClusterID(t *testing.T, n *node) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.dataDir, "cluster-id"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// Two clusters formed on separate buses, then joined by a NATS route, see
// each other: both stop answering (503 naming both cluster ids), /readyz,
// the metric and `concord status` show it, and the leases of the cluster
// that waits keep their time. Once one cluster is gone, the other serves
// again.
func TestTwoClustersJoinedByARouteStopAnswering(t *testing.T) {
	a, aCluster, aMetrics := routedNode(t, "a1")
	b, bCluster, bMetrics := routedNode(t, "b1")
	ca, cb := connect(t, a.natsURL), connect(t, b.natsURL)
	ca.put("only.a", "a", 0)
	cb.put("only.b", "b", 0)
	idA, idB := readClusterID(t, a), readClusterID(t, b)
	// Long enough for the conflict to be seen (within about one
	// --bus-check-interval of 500 ms) well before it would expire.
	const ttl = 8
	lease := ca.grant(ttl)
	ca.put("leased.a", 1, lease)
	granted := time.Now()

	// A third NATS server routes to both; route gossip meshes all three.
	x := startNATSServer(t, &server.Options{Cluster: server.ClusterOpts{Name: "concord", Host: "127.0.0.1", Port: -1}, Routes: server.RoutesFromStr("nats://" + aCluster + ",nats://" + bCluster)})
	joined := time.Now()
	nc, err := nats.Connect(x.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)

	// Ask through the joint bus until both clusters refuse: replies from
	// A (the key), from B (no key) or the conflict (503).
	type answer struct {
		at   time.Time
		kind string
	}
	var answers []answer
	checkFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		data, e, err := requestOnce(nc, "concord.kv.get", map[string]any{"key": "only.a"}, 2*time.Second)
		switch {
		case err != nil:
			return err
		case e != nil:
			answers = append(answers, answer{time.Now(), "conflict"})
			if e.Name != schema.ErrUnavailable || !strings.Contains(e.Description, idA) || !strings.Contains(e.Description, idB) {
				t.Fatalf("reply during the conflict: %v, want unavailable naming %s and %s", e, idA, idB)
			}
		default:
			var r schema.KVGetReply
			mustUnmarshal(t, data, &r)
			kind := "b"
			if len(r.KVs) == 1 {
				kind = "a"
			}
			answers = append(answers, answer{time.Now(), kind})
		}
		for _, addr := range []string{aMetrics, bMetrics} {
			code, body, err := httpStatus(addr, "/readyz")
			if err != nil || code != 503 || !strings.Contains(body, idA) || !strings.Contains(body, idB) {
				return fmt.Errorf("%s /readyz: %d %q %v", addr, code, body, err)
			}
			if v := scrapeMetrics(t, addr).value("concord_cluster_conflict"); v != 1 {
				return fmt.Errorf("%s concord_cluster_conflict %v", addr, v)
			}
		}
		return nil
	})
	detected := time.Now()
	// Both clusters answered for at most about one discovery interval
	// (500ms) after both could be heard, plus the time a busy machine takes
	// to deliver the answers (generous: this bound is on the late side).
	var firstA, firstB, lastServed time.Time
	for _, a := range answers {
		switch a.kind {
		case "a":
			if firstA.IsZero() {
				firstA = a.at
			}
			lastServed = a.at
		case "b":
			if firstB.IsZero() {
				firstB = a.at
			}
			lastServed = a.at
		}
	}
	if !firstA.IsZero() && !firstB.IsZero() {
		both := firstA
		if firstB.After(both) {
			both = firstB
		}
		if lastServed.Sub(both) > 3*time.Second {
			t.Fatalf("both clusters answered for %s after both were first heard", lastServed.Sub(both))
		}
	}
	t.Logf("joined at +0; conflict everywhere at +%s; %d answers while it formed", detected.Sub(joined).Round(time.Millisecond), len(answers))

	// `concord status` shows it, whichever cluster's leader answers (on
	// one bus either may: both serve the queue group).
	out, err := runConcord(t, time.Minute, "status", "--server", a.natsURL, "--json")
	if err != nil {
		t.Fatalf("concord status: %v\n%s", err, out)
	}
	var st schema.ClusterStatusReply
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status output: %v\n%s", err, out)
	}
	other := map[string]string{idA: idB, idB: idA}[st.ClusterID]
	if other == "" || !strings.Contains(st.Conflict, other) {
		t.Fatalf("status during the conflict: cluster %s, conflict %q", st.ClusterID, st.Conflict)
	}
	out, err = runConcord(t, time.Minute, "status", "--server", b.natsURL)
	if err != nil || !strings.Contains(out, "CONFLICT") || !strings.Contains(out, idA) || !strings.Contains(out, idB) {
		t.Fatalf("concord status (text): %v\n%s", err, out)
	}

	// While the conflict lasts nobody is served, and the lease clock of
	// each cluster stands still: hold it past the lease's ttl.
	for time.Since(granted) < (ttl+2)*time.Second {
		_, e, err := requestOnce(nc, "concord.kv.get", map[string]any{"key": "only.a"}, 2*time.Second)
		if err != nil || e == nil || e.Name != schema.ErrUnavailable {
			t.Fatalf("during the conflict: %v %v, want unavailable", err, e)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The operator stops cluster B: A serves again by itself.
	b.stop()
	checkFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		code, body, err := httpStatus(aMetrics, "/readyz")
		if err != nil || code != 200 {
			return fmt.Errorf("a /readyz: %d %q %v", code, body, err)
		}
		if v := scrapeMetrics(t, aMetrics).value("concord_cluster_conflict"); v != 0 {
			return fmt.Errorf("concord_cluster_conflict %v", v)
		}
		return nil
	})
	if got := ca.get(map[string]any{"key": "only.a"}); len(got.KVs) != 1 {
		t.Fatalf("a after the conflict: %+v", got)
	}
	// The lease outlived its ttl in wall time: the conflict stood its
	// clock still. Its keys are there and its remaining time is within ttl.
	info := ca.info(lease, true)
	if len(info.Keys) != 1 || info.RemainingMS <= 0 || info.RemainingMS > ttl*1000 {
		t.Fatalf("lease %d after the conflict (granted %s ago): %+v", lease, time.Since(granted).Round(time.Millisecond), info)
	}
}

// A bus where something takes P.cluster.nodes and never answers gives
// neither an answer nor "no responders": unsure, and a bootstrap refuses
// rather than guess.
func TestBootstrapRefusedWhenTheBusDoesNotAnswer(t *testing.T) {
	ns := startNATSServer(t, &server.Options{})
	silent, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(silent.Close)
	if _, err := silent.SubscribeSync("concord.cluster.nodes"); err != nil {
		t.Fatal(err)
	}
	if err := silent.Flush(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	out, err := runConcord(t, time.Minute, "serve", "--data-dir", dir, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)),
		"--nats-url", ns.ClientURL(), "--bootstrap", "--bootstrap-wait", "3s")
	if err == nil || !strings.Contains(out, "unsure means refuse") || !strings.Contains(out, "neither an answer nor") {
		t.Fatalf("bootstrap on a bus that does not answer: err %v\n%s", err, tail(out, 10))
	}
	if _, err := os.Stat(filepath.Join(dir, "cluster-id")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused node recorded a cluster id (stat: %v)", err)
	}
}

// A seed server, which others route to but which routes to nobody, cannot
// tell a quiet bus from peers that have not dialled back in yet. Wiped and
// restarted without --join, the seed of a running cluster refuses to
// bootstrap: it waits out the peers' route retry before it believes the
// bus is empty.
func TestWipedSeedDoesNotBootstrapBesideItsCluster(t *testing.T) {
	dir := t.TempDir()
	seedRoute := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	seedURL := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t))
	seedArgs := func(data string) []string {
		return []string{"serve", "--node-id", "n1", "--data-dir", data, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)),
			"--nats-listen", strings.TrimPrefix(seedURL, "nats://"), "--nats-cluster", seedRoute}
	}
	seed := &node{t: t, dataDir: filepath.Join(dir, "seed"), natsURL: seedURL, logPath: filepath.Join(dir, "seed.log"),
		args: append(seedArgs(filepath.Join(dir, "seed")), "--bootstrap")}
	seed.start()
	t.Cleanup(seed.kill)
	seed.waitReady()
	peer := &node{t: t, dataDir: filepath.Join(dir, "peer"), natsURL: fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t)), logPath: filepath.Join(dir, "peer.log")}
	peer.args = []string{"serve", "--node-id", "n2", "--data-dir", peer.dataDir, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)),
		"--nats-listen", strings.TrimPrefix(peer.natsURL, "nats://"), "--nats-cluster", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)),
		"--nats-routes", "nats://" + seedRoute, "--join"}
	peer.start()
	t.Cleanup(peer.kill)
	c := &cluster{t: t, nodes: []*node{seed, peer}, urls: []string{seedURL, peer.natsURL}}
	st := c.waitMembers(2, 30*time.Second)

	seed.kill()
	// A new, empty data directory; no --join: a first start bootstraps.
	out, err := runConcord(t, time.Minute, seedArgs(filepath.Join(dir, "seed-wiped"))...)
	if err == nil || !strings.Contains(out, st.ClusterID) || !strings.Contains(out, "already serves this NATS bus") {
		t.Fatalf("the wiped seed was not refused (err %v):\n%s", err, tail(out, 10))
	}
}
