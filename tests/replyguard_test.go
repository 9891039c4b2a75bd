package tests

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
	"github.com/concord-io/concord/tests/freeport"
)

// Replies go only where replies belong (service/replyguard.go): a request
// whose reply subject lies in Concord's own subject space, in a $ system
// space, or is no literal subject is dropped, not executed and not
// answered; and with the shipped roles, the serving connection may not
// publish there even if that check failed.

// steerBodies holds, for every request subject, a body that would change
// something if it were executed.
func steerBodies() map[string]any {
	bodies := map[string]any{
		"concord.lease.grant":           map[string]any{"ttl": 60},
		"concord.lease.keepalive":       map[string]any{"id": 1},
		"concord.lease.keepalive_many":  map[string]any{"ids": []int64{1}},
		"concord.lease.revoke":          map[string]any{"id": 1},
		"concord.lease.info":            map[string]any{"id": 1},
		"concord.lease.list":            map[string]any{},
		"concord.kv.put":                map[string]any{"key": "steer.k", "value": 1},
		"concord.kv.get":                map[string]any{"key": "steer.before"},
		"concord.kv.delete":             map[string]any{"key": "steer.before"},
		"concord.kv.txn":                map[string]any{"success": []any{map[string]any{"put": map[string]any{"key": "steer.t", "value": 1}}}},
		"concord.kv.changes":            map[string]any{"prefix": "", "after_revision": 0},
		"concord.kv.history":            map[string]any{"key": "steer.before"},
		"concord.kv.compact":            map[string]any{"revision": 1},
		"concord.cluster.join":          map[string]any{"id": "intruder", "address": "127.0.0.1:1"},
		"concord.cluster.remove":        map[string]any{"id": "ghost"},
		"concord.cluster.status":        map[string]any{},
		"concord.cluster.snapshot":      map[string]any{},
		"concord.cluster.backup":        map[string]any{},
		"concord.cluster.backup.chunk":  map[string]any{"id": "0123456789abcdef", "offset": 0, "length": 1},
		"concord.cluster.tenants":       map[string]any{},
		"concord.cluster.quota":         map[string]any{"tenant": "steer", "keys": 1},
		"concord.cluster.tenant.move":   map[string]any{"tenant": "steer", "phase": "fence", "to": "elsewhere"},
		"concord.cluster.tenant.export": map[string]any{"tenant": "steer", "section": "keys"},
		"concord.cluster.nodes":         map[string]any{},
		"concord.cluster.node.n1.info":  map[string]any{},
	}
	names, _ := subjects.New(subjects.DefaultPrefix)
	for _, ep := range subjects.Endpoints {
		if _, ok := bodies[names.Request(ep)]; !ok {
			panic("steerBodies: no body for " + names.Request(ep))
		}
	}
	return bodies
}

// countOn counts the messages on subject, and those whose subject starts
// with prefix when subject ends in ">".
func countOn(t *testing.T, nc *nats.Conn, subject string) func() int {
	t.Helper()
	w := watchRaw(t, nc, subject)
	return func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.subjects)
	}
}

// settledCount waits until count reaches at least want (the messages
// already sent have been handled) and returns it then.
func settledCount(t *testing.T, count func() int, want int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for count() < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return count()
}

// Without any NATS permissions in the way, a request whose reply subject
// is a watch subject, a request subject, a $ subject or not a literal
// subject is dropped by the node: never executed, never answered, and
// counted by reason. Every request subject is tried, the per-node ones
// included.
func TestStrayReplySubjectsAreRefused(t *testing.T) {
	t.Parallel()
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	n := startNode(t, nodeOpts{flags: []string{"--metrics-listen", metricsAddr}})
	c := connect(t, n.natsURL)
	c.put("steer.before", "v", 0)
	rev := c.revision()
	// Every reason's series is there at 0 before the first refusal, so
	// that an alert on its increase sees that refusal.
	before := scrapeMetrics(t, metricsAddr)
	for _, reason := range []string{"concord_subject", "system_subject", "invalid_subject"} {
		if m := before.metric("concord_requests_refused_reply_total", "reason", reason); m == nil || m.Counter.GetValue() != 0 {
			t.Errorf("before any refusal, concord_requests_refused_reply_total{reason=%q} is %v, want a series at 0", reason, m)
		}
	}

	obs, err := nats.Connect(n.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(obs.Close)
	onWatch := countOn(t, obs, "concord.watch.>")
	onSRV := countOn(t, obs, "$SRV.>")
	onGet := countOn(t, obs, "concord.kv.get")
	onInvalid := countOn(t, obs, "steer.>")

	sender, err := nats.Connect(n.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sender.Close)
	bodies := steerBodies()
	replies := map[string]string{ // reply subject → reason it is refused
		"concord.watch.steer.api.n1": "concord_subject",
		"concord.kv.get":             "concord_subject",
		"$SRV.PING.steer":            "system_subject",
		"steer..empty":               "invalid_subject",
	}
	want := map[string]float64{}
	sentToGet := 0
	for subject, body := range bodies {
		data, _ := json.Marshal(body)
		for reply, reason := range replies {
			if err := sender.PublishRequest(subject, reply, data); err != nil {
				t.Fatal(err)
			}
			want[reason]++
			if subject == "concord.kv.get" {
				sentToGet++
			}
		}
	}
	if err := sender.Flush(); err != nil {
		t.Fatal(err)
	}
	// The node counts each refusal as it drops it.
	checkFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		m := scrapeMetrics(t, metricsAddr)
		for reason, n := range want {
			if got := m.value("concord_requests_refused_reply_total", "reason", reason); got != n {
				return fmt.Errorf("refused for %s: %v, want %v", reason, got, n)
			}
		}
		return nil
	})
	// A request with a reply subject outside Concord's space, not under
	// _INBOX., is answered: the check is about where, not whose inbox.
	custom := "steer.replies." + nuid.Next()
	sub, err := sender.SubscribeSync(custom)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.PublishRequest("concord.kv.get", custom, []byte(`{"key":"steer.before"}`)); err != nil {
		t.Fatal(err)
	}
	if msg, err := sub.NextMsg(10 * time.Second); err != nil || !strings.Contains(string(msg.Data), "steer.before") {
		t.Fatalf("request with reply %s: %v %v", custom, msg, err)
	}
	if err := obs.Flush(); err != nil {
		t.Fatal(err)
	}
	// Nothing was published where the stray replies pointed, and nothing
	// was executed.
	if got := onWatch(); got != 0 {
		t.Fatalf("%d messages on watch subjects", got)
	}
	if got := onSRV(); got != 0 {
		t.Fatalf("%d messages on $SRV subjects", got)
	}
	// Flush returns before the observer's handlers have run: wait for
	// what was sent, then demand no more.
	if got := settledCount(t, onGet, sentToGet+1); got != sentToGet+1 {
		t.Fatalf("%d messages on concord.kv.get, sent %d: a reply went there", got, sentToGet+1)
	}
	if got := settledCount(t, onInvalid, 1); got != 1 { // the one answered request above
		t.Fatalf("%d messages under steer.>, want the 1 answered reply", got)
	}
	if got := c.revision(); got != rev {
		t.Fatalf("revision moved from %d to %d: a refused request was executed", rev, got)
	}
	if leases := c.get(map[string]any{"prefix": "steer."}); len(leases.KVs) != 1 {
		t.Fatalf("keys after the refused requests: %+v", leases.KVs)
	}
	// kv.compact moves no revision: the floor says it was not executed.
	var h schema.KVHistoryReply
	c.ok(subjects.KVHistory, map[string]any{"key": "steer.before"}, &h)
	if h.CompactRevision != 0 {
		t.Fatalf("the compaction floor moved to %d: a refused kv.compact was executed", h.CompactRevision)
	}
	if log := readLog(t, n); !strings.Contains(log, "refused a request whose reply subject") || strings.Count(log, "refused a request whose reply subject") > 2 {
		t.Fatalf("want one rate-limited log line about the refusals, log:\n%s", tail(log, 20))
	}
}

// The second wall: with the shipped roles, even a node that did not check
// reply subjects (the test-only --test-allow-any-reply) cannot be made to
// publish on a watch subject, by any role and through any request subject
// that role may send, because its serving connection may publish replies
// only under _INBOX. and its watch events go out on the events role. The
// node tried, and NATS refused it: the node's log says so.
func TestRolesStopStrayRepliesWithoutTheCheck(t *testing.T) {
	roles := useRoles(t)
	clientPassword, reader, readerPub, conf := roles.client, roles.reader, roles.readerPub, roles.conf
	replicaPassword := roles.replica
	url := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t))
	dir := t.TempDir()
	n := startSecuredNode(t, dir, "n1", url, []string{"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)),
		"--nats-config", conf, "--nats-user", "concord-replica", "--nats-events-user", "concord-events",
		"--nats-listen", strings.TrimPrefix(url, "nats://"), "--test-allow-any-reply"}, func() error {
		nc, err := nats.Connect(url, nats.UserInfo("concord-client", clientPassword))
		if err != nil {
			return err
		}
		defer nc.Close()
		_, e, err := requestOnce(nc, "concord.kv.put", map[string]any{"key": "steer.before", "value": 1}, 2*time.Second)
		if err != nil || e != nil {
			return fmt.Errorf("put: %v %v", err, e)
		}
		return nil
	})

	client := dialRole(t, "client", url, nats.UserInfo("concord-client", clientPassword))
	ro := dialRole(t, "reader", url, nats.Nkey(readerPub, reader.Sign))
	replica := dialRole(t, "replica", url, nats.UserInfo("concord-replica", replicaPassword))
	watch := watchRaw(t, client.nc, "concord.watch.>")
	// Watch events still flow, on the events role.
	if e := client.allowed("concord.kv.put", map[string]any{"key": "steer.event", "value": 2}); e != nil {
		t.Fatal(e)
	}
	watch.waitSubject(t, "concord.watch.steer.event")

	bodies := steerBodies()
	may := map[string]func(string) bool{
		"client": func(s string) bool {
			return (strings.HasPrefix(s, "concord.lease.") || strings.HasPrefix(s, "concord.kv.")) && s != "concord.kv.compact"
		},
		"reader": func(s string) bool {
			return s == "concord.kv.get" || s == "concord.kv.changes" || s == "concord.kv.history" || s == "concord.lease.info" || s == "concord.lease.list"
		},
		"replica": func(s string) bool { return strings.HasPrefix(s, "concord.cluster.") || s == "concord.kv.compact" },
	}
	var steered []string
	for role, rc := range map[string]*roleConn{"client": client, "reader": ro, "replica": replica} {
		for subject, body := range bodies {
			if !may[role](subject) {
				continue
			}
			reply := "concord.watch.stray." + role + "." + strings.ReplaceAll(strings.TrimPrefix(subject, "concord."), ".", "_")
			data, _ := json.Marshal(body)
			if err := rc.nc.PublishRequest(subject, reply, data); err != nil {
				t.Fatal(err)
			}
			steered = append(steered, reply)
		}
		rc.noViolations() // the roles may send these requests
	}
	if len(steered) < 15 {
		t.Fatalf("only %d steering attempts", len(steered))
	}
	// The node tried each reply, and NATS refused every one.
	checkFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		lines := strings.Split(readLog(t, n), "\n")
	next:
		for _, reply := range steered {
			for _, line := range lines {
				// The log quotes the subject inside a quoted value: \"subject\"
				if strings.Contains(line, "Violation") && strings.Contains(line, reply+`\"`) {
					continue next
				}
			}
			return fmt.Errorf("no refused publish to %s in the node's log", reply)
		}
		return nil
	})
	if err := client.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	watch.mu.Lock()
	defer watch.mu.Unlock()
	for _, s := range watch.subjects {
		if strings.HasPrefix(s, "concord.watch.stray.") {
			t.Fatalf("a reply reached a watch subject: %s (all: %v)", s, watch.subjects)
		}
	}
}
