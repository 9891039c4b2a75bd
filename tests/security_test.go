package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/nats-io/nuid"
	"golang.org/x/crypto/bcrypt"

	"github.com/concord-io/concord/internal/testca"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/tests/freeport"
)

// Security: NATS roles from a nats-server configuration file
// (deploy/nats/roles.conf), the embedded server configured by
// --nats-config, TLS client certificates towards NATS, Raft over mutual
// TLS, and the start-up errors of all of these. Every certificate and key
// is made here, for the test, and lives in its temporary directory.

// testPKI is a throw-away certificate authority whose certificates go to
// one directory.
type testPKI struct {
	ca     *testca.CA
	dir    string
	caFile string
}

// newPKI makes a CA named name and writes its certificate to dir.
func newPKI(t *testing.T, dir, name string) *testPKI {
	t.Helper()
	ca := testca.New(t, dir, name)
	return &testPKI{ca: ca, dir: dir, caFile: ca.File()}
}

// issue signs a certificate for 127.0.0.1 and localhost, good for server
// and client authentication, and returns its certificate and key files.
func (p *testPKI) issue(t *testing.T, name string) (certFile, keyFile string) {
	t.Helper()
	f := p.ca.Issue(t, p.dir, name)
	return f.CertFile, f.KeyFile
}

// startSecuredNode starts `concord serve args` as node name, with its log
// in dir, and polls ready until it returns nil; the process is killed at
// the end of the test.
func startSecuredNode(t *testing.T, dir, name, natsURL string, args []string, ready func() error) *node {
	t.Helper()
	n := &node{t: t, dataDir: filepath.Join(dir, "data-"+name), natsURL: natsURL,
		args:    append([]string{"serve", "--node-id", name, "--data-dir", filepath.Join(dir, "data-"+name)}, args...),
		logPath: filepath.Join(dir, name+".log")}
	n.start()
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			if b, err := os.ReadFile(n.logPath); err == nil {
				t.Logf("%s log:\n%s", name, tail(string(b), 40))
			}
		}
	})
	if ready != nil {
		checkFor(t, 30*time.Second, 100*time.Millisecond, func() error {
			select {
			case <-n.done:
				t.Fatalf("%s exited before it was ready: %v", name, n.err)
			default:
			}
			return ready()
		})
	}
	return n
}

// readLog returns a node's log so far.
func readLog(t *testing.T, n *node) string {
	t.Helper()
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// roleConn is a NATS connection that records the asynchronous errors the
// server sends it, such as permission violations.
type roleConn struct {
	t    *testing.T
	name string
	nc   *nats.Conn

	mu   sync.Mutex
	errs []error
}

// dialRole connects to url with opts and records asynchronous errors.
func dialRole(t *testing.T, name, url string, opts ...nats.Option) *roleConn {
	t.Helper()
	r := &roleConn{t: t, name: name}
	opts = append(opts, nats.Name(name), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
	}))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("%s: connect: %v", name, err)
	}
	t.Cleanup(nc.Close)
	r.nc = nc
	return r
}

// violations returns the permission violations received so far.
func (r *roleConn) violations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, err := range r.errs {
		if errors.Is(err, nats.ErrPermissionViolation) {
			out = append(out, err.Error())
		}
	}
	return out
}

// waitViolation waits for the server's "Permissions Violation for <op> to
// <subject>" (op is Publish or Subscription).
func (r *roleConn) waitViolation(op, subject string) {
	r.t.Helper()
	want := strings.ToLower(fmt.Sprintf("Permissions Violation for %s to %q", op, subject))
	checkFor(r.t, 5*time.Second, 20*time.Millisecond, func() error {
		for _, v := range r.violations() {
			if strings.Contains(strings.ToLower(v), want) {
				return nil
			}
		}
		return fmt.Errorf("%s: no %q among %q", r.name, want, r.violations())
	})
}

// noViolations fails if the server refused anything this connection did.
func (r *roleConn) noViolations() {
	r.t.Helper()
	if err := r.nc.Flush(); err != nil {
		r.t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // async errors trail the PONG
	if v := r.violations(); len(v) > 0 {
		r.t.Fatalf("%s: unexpected permission violations %q", r.name, v)
	}
}

// allowed sends a request that must reach Concord; it returns the reply's
// error (nil for a success).
func (r *roleConn) allowed(subject string, body any) *schema.Error {
	r.t.Helper()
	_, e, err := request(r.nc, subject, body, "", 20*time.Second)
	if err != nil {
		r.t.Fatalf("%s: %s: %v", r.name, subject, err)
	}
	return e
}

// refusedPublish sends a request the role may not send: the server drops
// it (no reply, so a timeout) and tells the client.
func (r *roleConn) refusedPublish(subject string, body any) {
	r.t.Helper()
	data, _ := json.Marshal(body)
	msg, err := r.nc.Request(subject, data, 300*time.Millisecond)
	if err == nil {
		r.t.Fatalf("%s: %s was answered: %s", r.name, subject, msg.Data)
	}
	if !errors.Is(err, nats.ErrTimeout) {
		r.t.Fatalf("%s: %s: %v, want a timeout", r.name, subject, err)
	}
	r.waitViolation("Publish", subject)
}

// refusedSubscribe subscribes where the role may not.
func (r *roleConn) refusedSubscribe(subject string) {
	r.t.Helper()
	sub, err := r.nc.SubscribeSync(subject)
	if err != nil {
		r.t.Fatal(err)
	}
	defer sub.Unsubscribe()
	r.waitViolation("Subscription", subject)
}

// roleSecrets are the credentials of deploy/nats/roles.conf's roles for one
// test, and the file's path.
type roleSecrets struct {
	replica, events, client string // passwords
	reader                  nkeys.KeyPair
	readerPub               string
	conf                    string
}

// useRoles makes fresh credentials for every role of deploy/nats/roles.conf
// and puts them in the environment the file and the nodes read: the server
// holds a bcrypt hash of the replica password and the other passwords in
// plain text, to use both forms; the nodes get the replica and events
// passwords.
func useRoles(t *testing.T) roleSecrets {
	t.Helper()
	r := roleSecrets{replica: "replica" + nuid.Next(), events: "events" + nuid.Next(), client: "client" + nuid.Next()}
	hash, err := bcrypt.GenerateFromPassword([]byte(r.replica), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if r.reader, err = nkeys.CreateUser(); err != nil {
		t.Fatal(err)
	}
	if r.readerPub, err = r.reader.PublicKey(); err != nil {
		t.Fatal(err)
	}
	if r.conf, err = filepath.Abs("../deploy/nats/roles.conf"); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"CONCORD_REPLICA_PASSWORD": string(hash), "CONCORD_EVENTS_PASSWORD": r.events,
		"CONCORD_CLIENT_PASSWORD": r.client, "CONCORD_READER_NKEY": r.readerPub,
		"CONCORD_NATS_PASSWORD": r.replica, "CONCORD_NATS_EVENTS_PASSWORD": r.events,
	} {
		t.Setenv(k, v)
	}
	return r
}

// The permissions example of deploy/nats/roles.conf, used as it is (only
// the ports are the test's): two Concord nodes serve with the replica
// role's credentials and form a cluster through it; the client, read-only
// and replica roles can do what the file says and are refused the rest;
// join and remove requests are accepted only from the replica role.
func TestRolePermissions(t *testing.T) {
	roles := useRoles(t)
	replicaPassword, clientPassword, eventsPassword := roles.replica, roles.client, roles.events
	reader, readerPub, conf := roles.reader, roles.readerPub, roles.conf

	dir := t.TempDir()
	var urls, routes, clusterAddrs []string
	for i := 0; i < 2; i++ {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t)))
		clusterAddrs = append(clusterAddrs, fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)))
		routes = append(routes, "nats://"+clusterAddrs[i])
	}
	all := strings.Join(urls, ",")
	replicaAuth := nats.UserInfo("concord-replica", replicaPassword)
	var nodes []*node
	for i, mode := range []string{"--bootstrap", "--join"} {
		name := fmt.Sprintf("n%d", i+1)
		args := []string{"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)),
			"--nats-config", conf, "--nats-user", "concord-replica", "--nats-events-user", "concord-events",
			"--nats-listen", strings.TrimPrefix(urls[i], "nats://"),
			"--nats-cluster", clusterAddrs[i], "--nats-routes", strings.Join(routes, ","), mode}
		nodes = append(nodes, startSecuredNode(t, dir, name, urls[i], args, nil))
	}
	// The cluster forms through the replica role: n2 asked to join over
	// concord.cluster.join, and the leader reached both members over
	// concord.cluster.node.<id>.info.
	checkFor(t, 40*time.Second, 200*time.Millisecond, func() error {
		for i, n := range nodes {
			select {
			case <-n.done:
				t.Fatalf("n%d exited: %v", i+1, n.err)
			default:
			}
		}
		nc, err := nats.Connect(all, replicaAuth, nats.Timeout(time.Second))
		if err != nil {
			return err
		}
		defer nc.Close()
		data, e, err := request(nc, "concord.cluster.status", map[string]any{}, "", 2*time.Second)
		if err != nil || e != nil {
			return fmt.Errorf("status: %v %v", err, e)
		}
		var st schema.ClusterStatusReply
		if err := json.Unmarshal(data, &st); err != nil {
			return err
		}
		reachable := 0
		for _, m := range st.Members {
			if m.Reachable && m.Suffrage == schema.SuffrageVoter {
				reachable++
			}
		}
		if reachable != 2 {
			return fmt.Errorf("%d reachable voters in %+v", reachable, st.Members)
		}
		return nil
	})

	replica := dialRole(t, "replica", all, replicaAuth)

	// Without credentials, nothing.
	if nc, err := nats.Connect(urls[0]); err == nil {
		nc.Close()
		t.Fatal("connected without credentials")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect without credentials: %v", err)
	}

	client := dialRole(t, "client", all, nats.UserInfo("concord-client", clientPassword))
	ro := dialRole(t, "reader", all, nats.Nkey(readerPub, reader.Sign))
	clientWatch := watchRaw(t, client.nc, "concord.watch.>")
	readerWatch := watchRaw(t, ro.nc, "concord.watch.role.>")

	t.Run("client", func(t *testing.T) {
		client.t, ro.t, replica.t = t, t, t
		var g schema.LeaseGrantReply
		data, e, err := request(client.nc, "concord.lease.grant", map[string]any{"ttl": 60}, "", 20*time.Second)
		if err != nil || e != nil {
			t.Fatalf("grant: %v %v", err, e)
		}
		mustUnmarshal(t, data, &g)
		if e := client.allowed("concord.kv.put", map[string]any{"key": "role.k", "value": "v", "lease": g.ID}); e != nil {
			t.Fatalf("put: %v", e)
		}
		if e := client.allowed("concord.lease.keepalive", map[string]any{"id": g.ID}); e != nil {
			t.Fatalf("keepalive: %v", e)
		}
		if e := client.allowed("concord.kv.get", map[string]any{"key": "role.k"}); e != nil {
			t.Fatalf("get: %v", e)
		}
		// The watch events, published by the node with the replica
		// role, reach both roles that may watch.
		clientWatch.waitSubject(t, "concord.watch.role.k")
		readerWatch.waitSubject(t, "concord.watch.role.k")
		client.noViolations()

		if e := client.allowed("concord.kv.history", map[string]any{"key": "role.k"}); e != nil {
			t.Fatalf("history: %v", e)
		}
		client.noViolations()
		// Compaction is for operators: refused to applications.
		client.refusedPublish("concord.kv.compact", map[string]any{"revision": 1})
		client.refusedPublish("concord.cluster.join", map[string]any{"id": "intruder", "address": "127.0.0.1:1"})
		client.refusedPublish("concord.cluster.remove", map[string]any{"id": "n2"})
		client.refusedPublish("concord.cluster.status", map[string]any{})
		client.refusedPublish("concord.watch.role.k", map[string]any{"type": "forged"})
		client.refusedSubscribe("concord.kv.put")
		client.refusedSubscribe("$SRV.>")
	})

	t.Run("read-only", func(t *testing.T) {
		client.t, ro.t, replica.t = t, t, t
		if e := ro.allowed("concord.kv.get", map[string]any{"prefix": "role."}); e != nil {
			t.Fatalf("get: %v", e)
		}
		if e := ro.allowed("concord.kv.changes", map[string]any{"prefix": "", "after_revision": 0}); e != nil {
			t.Fatalf("changes: %v", e)
		}
		if e := ro.allowed("concord.lease.list", map[string]any{}); e != nil {
			t.Fatalf("list: %v", e)
		}
		if e := ro.allowed("concord.kv.history", map[string]any{"key": "role.k"}); e != nil {
			t.Fatalf("history: %v", e)
		}
		if e := ro.allowed("concord.kv.get", map[string]any{"key": "role.k", "revision": 1}); e != nil {
			t.Fatalf("get at a past revision: %v", e)
		}
		if e := ro.allowed("concord.lease.info", map[string]any{"id": 999999}); e == nil || e.Name != schema.ErrLeaseNotFound {
			t.Fatalf("info of an unknown lease: %v, want lease_not_found", e)
		}
		ro.noViolations()

		ro.refusedPublish("concord.kv.put", map[string]any{"key": "role.k", "value": "x"})
		ro.refusedPublish("concord.kv.delete", map[string]any{"key": "role.k"})
		ro.refusedPublish("concord.kv.txn", map[string]any{})
		ro.refusedPublish("concord.kv.compact", map[string]any{"revision": 1})
		ro.refusedPublish("concord.lease.grant", map[string]any{"ttl": 10})
		ro.refusedPublish("concord.lease.keepalive", map[string]any{"id": 1})
		ro.refusedPublish("concord.lease.revoke", map[string]any{"id": 1})
		ro.refusedPublish("concord.cluster.join", map[string]any{"id": "intruder", "address": "127.0.0.1:1"})
		ro.refusedPublish("concord.cluster.remove", map[string]any{"id": "n2"})
		ro.refusedSubscribe("concord.lease.*")
		// Nothing it tried changed the data, nor compacted the history.
		if e := client.allowed("concord.kv.get", map[string]any{"key": "role.k"}); e != nil {
			t.Fatal(e)
		}
		if f := roleFloor(t, client); f != 0 {
			t.Fatalf("the refused compactions moved the floor to %d", f)
		}
	})

	t.Run("replica", func(t *testing.T) {
		client.t, ro.t, replica.t = t, t, t
		// Join and remove requests reach the leader from this role: these
		// two are answered (and refused on their merits).
		if e := replica.allowed("concord.cluster.remove", map[string]any{"id": "ghost"}); e == nil || e.Name != schema.ErrNodeNotFound {
			t.Fatalf("remove of a non-member: %v, want node_not_found", e)
		}
		if e := replica.allowed("concord.cluster.join", map[string]any{"id": "bad id!", "address": "127.0.0.1:1"}); e == nil || e.Name != schema.ErrInvalidRequest {
			t.Fatalf("join with a bad id: %v, want invalid_request", e)
		}
		// It may serve requests and answer under _INBOX....
		sub, err := replica.nc.SubscribeSync("concord.kv.get")
		if err != nil {
			t.Fatal(err)
		}
		sub.Unsubscribe()
		if err := replica.nc.Publish("_INBOX.role.reply", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		// It compacts the history (operators use its credentials): a
		// revision in the future is refused on its merits, then one is
		// taken.
		if e := replica.allowed("concord.kv.compact", map[string]any{"revision": 1 << 40}); e == nil || e.Name != schema.ErrInvalidRequest {
			t.Fatalf("compact in the future: %v, want invalid_request", e)
		}
		if e := replica.allowed("concord.kv.compact", map[string]any{"revision": 1}); e != nil {
			t.Fatalf("compact: %v", e)
		}
		if f := roleFloor(t, client); f != 1 {
			t.Fatalf("the floor after the replica's compaction: %d, want 1", f)
		}
		replica.noViolations()
		// ... but not act as a client, publish watch events (that is the
		// events role's), nor publish outside its subjects.
		replica.refusedPublish("concord.kv.put", map[string]any{"key": "role.r", "value": 1})
		replica.refusedPublish("concord.lease.grant", map[string]any{"ttl": 10})
		for _, subject := range []string{"concord.watch.role.replica", "elsewhere"} {
			if err := replica.nc.Publish(subject, []byte("x")); err != nil {
				t.Fatal(err)
			}
			replica.waitViolation("Publish", subject)
		}
	})

	// The CLI's kv history and kv compact under the same roles: history
	// for the reader and the client, compaction for the replica only; a
	// refusal exits 9 at once with the server's words.
	t.Run("cli history and compact", func(t *testing.T) {
		client.t, ro.t, replica.t = t, t, t
		seed, err := reader.Seed()
		if err != nil {
			t.Fatal(err)
		}
		seedFile := filepath.Join(t.TempDir(), "reader.nk")
		if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
			t.Fatal(err)
		}
		asReader := newCLI(t, all, "NATS_NKEY="+seedFile)
		asClient := newCLI(t, all, "NATS_USER=concord-client", "NATS_PASSWORD="+clientPassword)
		asReplica := newCLI(t, all, "NATS_USER=concord-replica", "NATS_PASSWORD="+replicaPassword)
		if e := client.allowed("concord.kv.put", map[string]any{"key": "role.h", "value": 1}); e != nil {
			t.Fatal(e)
		}
		for name, c := range map[string]*cli{"reader": asReader, "client": asClient} {
			if out := c.ok("kv", "history", "role.h"); !strings.Contains(out, "type=put key=role.h") {
				t.Fatalf("%s: kv history: %q", name, out)
			}
			c.expectRefused(`Permissions Violation for Publish to "concord.kv.compact"`, "kv", "compact", "2", "--timeout", "60s")
		}
		if f := roleFloor(t, client); f != 1 {
			t.Fatalf("the refused compactions moved the floor to %d", f)
		}
		if out := asReplica.ok("kv", "compact", "2"); !strings.HasPrefix(out, "compacted: the history starts after revision 2") {
			t.Fatalf("replica: kv compact 2: %q", out)
		}
		if f := roleFloor(t, client); f != 2 {
			t.Fatalf("the floor after the replica's kv compact: %d, want 2", f)
		}
	})

	t.Run("events", func(t *testing.T) {
		events := dialRole(t, "events", all, nats.UserInfo("concord-events", eventsPassword))
		client.t, ro.t, replica.t = t, t, t
		// It publishes watch events, which the watching roles receive...
		if err := events.nc.Publish("concord.watch.role.events", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		clientWatch.waitSubject(t, "concord.watch.role.events")
		events.noViolations()
		// ... and nothing else: no requests, no replies, no subscriptions.
		events.refusedPublish("concord.kv.get", map[string]any{"key": "role.k"})
		events.refusedPublish("concord.cluster.status", map[string]any{})
		if err := events.nc.Publish("_INBOX.role.reply", []byte("x")); err != nil {
			t.Fatal(err)
		}
		events.waitViolation("Publish", "_INBOX.role.reply")
		events.refusedSubscribe("concord.kv.*")
		events.refusedSubscribe("_INBOX.>")
	})

	// The nodes, which serve with the replica role, were refused nothing:
	// their connections log every asynchronous error.
	// The servers log every violation too, with the connection's name
	// ("concord-n1") or, in process, "pipe".
	for i, n := range nodes {
		for _, line := range strings.Split(readLog(t, n), "\n") {
			own := strings.Contains(line, "concord-n") || strings.Contains(line, "pipe - ")
			if strings.Contains(strings.ToLower(line), "permissions violation") || own && strings.Contains(line, "Violation") {
				t.Fatalf("n%d was refused something: %s", i+1, line)
			}
		}
	}
}

// roleFloor reads the compaction floor through a role that may read
// history.
func roleFloor(t *testing.T, r *roleConn) int64 {
	t.Helper()
	data, e, err := request(r.nc, "concord.kv.history", map[string]any{"key": "role.floor"}, "", 20*time.Second)
	if err != nil || e != nil {
		t.Fatalf("%s: history: %v %v", r.name, err, e)
	}
	var h schema.KVHistoryReply
	mustUnmarshal(t, data, &h)
	return h.CompactRevision
}

// rawWatch records the subjects of messages on a subscription.
type rawWatch struct {
	mu       sync.Mutex
	subjects []string
}

// watchRaw subscribes nc to subject and records what arrives.
func watchRaw(t *testing.T, nc *nats.Conn, subject string) *rawWatch {
	t.Helper()
	w := &rawWatch{}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		w.mu.Lock()
		w.subjects = append(w.subjects, m.Subject)
		w.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return w
}

// waitSubject waits for a message on subject.
func (w *rawWatch) waitSubject(t *testing.T, subject string) {
	t.Helper()
	checkFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, s := range w.subjects {
			if s == subject {
				return nil
			}
		}
		return fmt.Errorf("no event on %s among %v", subject, w.subjects)
	})
}

// --nats-config with TLS that requires client certificates: the file's
// listen address is used because --nats-listen is not given; clients need
// a certificate the CA signed; the node's own in-process connection still
// works without one.
func TestNATSConfigTLSClientCerts(t *testing.T) {
	dir := t.TempDir()
	ca := newPKI(t, dir, "nats")
	serverCert, serverKey := ca.issue(t, "server")
	clientCert, clientKey := ca.issue(t, "client")
	port := freeport.Port(t)
	conf := filepath.Join(dir, "tls.conf")
	body := fmt.Sprintf(`listen: 127.0.0.1:%d
tls {
  cert_file: %q
  key_file: %q
  ca_file: %q
  verify: true
}
`, port, serverCert, serverKey, ca.caFile)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("tls://127.0.0.1:%d", port)
	withCert := []nats.Option{nats.ClientCert(clientCert, clientKey), nats.RootCAs(ca.caFile), nats.Timeout(time.Second)}
	startSecuredNode(t, dir, "n1", url, []string{"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--nats-config", conf}, func() error {
		nc, err := nats.Connect(url, withCert...)
		if err != nil {
			return err
		}
		defer nc.Close()
		_, e, err := request(nc, "concord.lease.list", map[string]any{}, "", time.Second)
		if e != nil {
			return e
		}
		return err
	})
	c := dialRole(t, "client", url, withCert...)
	if e := c.allowed("concord.kv.put", map[string]any{"key": "tls.k", "value": 1}); e != nil {
		t.Fatal(e)
	}
	// No certificate, or one from another CA: refused at the handshake.
	if nc, err := nats.Connect(url, nats.RootCAs(ca.caFile), nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Fatal("connected without a client certificate")
	}
	other := newPKI(t, dir, "other")
	otherCert, otherKey := other.issue(t, "stranger")
	if nc, err := nats.Connect(url, nats.ClientCert(otherCert, otherKey), nats.RootCAs(ca.caFile), nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Fatal("connected with a certificate of another CA")
	}
	// Plain text is refused too.
	if nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port), nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Fatal("connected without TLS")
	}
}

// An external NATS that requires TLS client certificates: the node
// connects with --nats-tls-cert/--nats-tls-key/--nats-tls-ca, and without
// a certificate it exits with the connection error.
func TestExternalNATSTLSClientCert(t *testing.T) {
	dir := t.TempDir()
	ca := newPKI(t, dir, "ext")
	serverCert, serverKey := ca.issue(t, "server")
	nodeCert, nodeKey := ca.issue(t, "node")
	tlsConfig, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: serverCert, KeyFile: serverKey, CaFile: ca.caFile, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	ns := startNATSServer(t, &server.Options{TLSConfig: tlsConfig, TLSVerify: true, TLSTimeout: 2})
	url := ns.ClientURL()
	if !strings.HasPrefix(url, "tls://") {
		t.Fatalf("server URL %s", url)
	}

	// Without a client certificate the node cannot connect, and says so.
	out, code := runServeFails(t, "--data-dir", filepath.Join(dir, "nocert"), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)),
		"--nats-url", url, "--nats-tls-ca", ca.caFile)
	if code != 1 || !strings.Contains(out, "connect to nats") {
		t.Fatalf("exit %d without a client certificate:\n%s", code, out)
	}

	withCert := []nats.Option{nats.ClientCert(nodeCert, nodeKey), nats.RootCAs(ca.caFile), nats.Timeout(time.Second)}
	startSecuredNode(t, dir, "n1", url, []string{"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)),
		"--nats-url", url, "--nats-tls-cert", nodeCert, "--nats-tls-key", nodeKey, "--nats-tls-ca", ca.caFile}, func() error {
		nc, err := nats.Connect(url, withCert...)
		if err != nil {
			return err
		}
		defer nc.Close()
		_, e, err := request(nc, "concord.lease.list", map[string]any{}, "", time.Second)
		if e != nil {
			return e
		}
		return err
	})
	c := dialRole(t, "client", url, withCert...)
	if e := c.allowed("concord.kv.put", map[string]any{"key": "ext.tls", "value": true}); e != nil {
		t.Fatal(e)
	}
	if ns.NumClients() < 2 {
		t.Fatalf("external server has %d clients; the node should be one", ns.NumClients())
	}
}

// runServeFails runs `concord serve args` and expects it to exit on its
// own, with an error, within 20 s; it returns the output and exit code.
func runServeFails(t *testing.T, args ...string) (string, int) {
	t.Helper()
	p := newProc(t, 20*time.Second, binPath, append([]string{"serve"}, args...)...)
	var out bytes.Buffer
	p.cmd.Stdout, p.cmd.Stderr = &out, &out
	err := p.run()
	if p.timedOut() {
		t.Fatalf("concord serve %q kept running:\n%s", args, tail(out.String(), 20))
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("concord serve %q: %v, want an exit error\n%s", args, err, out.String())
	}
	return out.String(), exit.ExitCode()
}

// Bad security settings stop `concord serve` at once with a clear error
// and exit code 1, before it listens anywhere or writes its data
// directory.
func TestSecurityStartupErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newPKI(t, dir, "one")
	other := newPKI(t, dir, "other")
	cert, key := ca.issue(t, "n1")
	otherCert, otherKey := other.issue(t, "n9")
	badConf := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(badConf, []byte("authorization {\n  users = [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	jsConf := filepath.Join(dir, "js.conf")
	if err := os.WriteFile(jsConf, []byte("jetstream: enabled\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	authConf := filepath.Join(dir, "auth.conf")
	if err := os.WriteFile(authConf, []byte("authorization {\n  users = [ {user: a, password: s3cretpw} ]\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"nats config missing", []string{"--nats-config", filepath.Join(dir, "nope.conf")}, "--nats-config"},
		{"nats config syntax", []string{"--nats-config", badConf}, badConf},
		{"nats config jetstream", []string{"--nats-config", jsConf}, "enables JetStream"},
		{"nats config with nats url", []string{"--nats-config", authConf, "--nats-url", "nats://127.0.0.1:1"}, "not with --nats-url"},
		{"embedded auth without credentials", []string{"--nats-config", authConf}, "requires clients to authenticate"},
		{"embedded auth wrong password", []string{"--nats-config", authConf, "--nats-user", "a", "--nats-password", "wrong"}, "credentials"},
		{"nats client cert missing", []string{"--nats-tls-cert", missing, "--nats-tls-key", key}, "no such file"},
		{"raft key missing", []string{"--raft-tls-cert", cert, "--raft-tls-ca", ca.caFile}, "a private key is required"},
		{"raft cert missing", []string{"--raft-tls-key", key, "--raft-tls-ca", ca.caFile}, "a certificate is required"},
		{"raft CA missing", []string{"--raft-tls-cert", cert, "--raft-tls-key", key}, "a CA is required"},
		{"raft cert file absent", []string{"--raft-tls-cert", missing, "--raft-tls-key", key, "--raft-tls-ca", ca.caFile}, "no such file"},
		{"raft key of another cert", []string{"--raft-tls-cert", cert, "--raft-tls-key", otherKey, "--raft-tls-ca", ca.caFile}, "private key does not match"},
		{"raft cert of another CA", []string{"--raft-tls-cert", otherCert, "--raft-tls-key", otherKey, "--raft-tls-ca", ca.caFile}, "does not verify against CA"},
		{"raft CA not PEM", []string{"--raft-tls-cert", cert, "--raft-tls-key", key, "--raft-tls-ca", badConf}, "holds no PEM certificate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			natsAddr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
			raftAddr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
			args := append([]string{"--data-dir", data, "--raft-addr", raftAddr, "--nats-listen", natsAddr}, c.args...)
			out, code := runServeFails(t, args...)
			if code != 1 || !strings.Contains(strings.ToLower(out), strings.ToLower(c.want)) {
				t.Fatalf("exit %d, want 1 with %q:\n%s", code, c.want, out)
			}
			if strings.Contains(out, "concord started") {
				t.Fatalf("the node started:\n%s", out)
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("data directory made: %v", err)
			}
		})
	}
}

// startTLSCluster starts size nodes like startCluster, each with its own
// certificate from ca, Raft over mutual TLS; it also returns the NATS
// route URLs, for a node to join later.
func startTLSCluster(t *testing.T, size int, ca *testPKI, trust ...string) (*cluster, []string) {
	t.Helper()
	caFile := ca.caFile
	if len(trust) > 0 {
		caFile = trust[0] // a bundle the nodes trust instead of ca alone
	}
	c := &cluster{t: t, dir: t.TempDir()}
	var routes, clusterAddrs []string
	for i := 0; i < size; i++ {
		clusterAddrs = append(clusterAddrs, fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)))
		routes = append(routes, "nats://"+clusterAddrs[i])
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t)))
		c.raftAddrs = append(c.raftAddrs, fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)))
		c.faults = append(c.faults, filepath.Join(c.dir, fmt.Sprintf("faults-n%d.json", i+1)))
	}
	for i := 0; i < size; i++ {
		name := fmt.Sprintf("n%d", i+1)
		cert, key := ca.issue(t, name)
		mode := "--join"
		if i == 0 {
			mode = "--bootstrap"
		}
		args := []string{"--raft-addr", c.raftAddrs[i],
			"--raft-tls-cert", cert, "--raft-tls-key", key, "--raft-tls-ca", caFile,
			"--nats-listen", strings.TrimPrefix(c.urls[i], "nats://"),
			"--nats-cluster", clusterAddrs[i], "--nats-routes", strings.Join(routes, ","),
			"--test-fault-file", c.faults[i], mode}
		n := startSecuredNode(t, c.dir, name, c.urls[i], args, nil)
		c.nodes = append(c.nodes, n)
	}
	// All at once: n1 bootstraps only once its NATS routes are up.
	c.nodes[0].waitReady()
	c.waitMembers(size, 30*time.Second)
	return c, routes
}

// nodeInfo asks one node for its own report.
func nodeInfo(nc *nats.Conn, id string) (schema.NodeInfo, error) {
	var info schema.NodeInfo
	// "no responders" until the routes between the NATS servers are all up
	// and have carried the node's interest: retry it, as clients do.
	var msg *nats.Msg
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		msg, err = nc.Request("concord.cluster.node."+id+".info", []byte(`{}`), 2*time.Second)
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return info, err
	}
	return info, json.Unmarshal(msg.Data, &info)
}

// Raft over mutual TLS: three nodes with certificates of one CA form a
// cluster and replicate; plain TCP to a node's Raft port gets no Raft
// traffic through; a fourth node whose certificate another CA signed never
// receives the log, and the cluster stays healthy.
func TestRaftTLSCluster(t *testing.T) {
	ca := newPKI(t, t.TempDir(), "raft")
	// The members trust the CA that signed them and a next one, as in the
	// middle of a CA rotation.
	next := newPKI(t, t.TempDir(), "next")
	bundle := filepath.Join(t.TempDir(), "bundle.pem")
	writeBundle(t, bundle, ca.caFile, next.caFile)
	c, routes := startTLSCluster(t, 3, ca, bundle)
	nc := c.conn()
	for i := 0; i < 20; i++ {
		if _, e, err := request(nc, "concord.kv.put", map[string]any{"key": fmt.Sprintf("tls.k%d", i), "value": i}, "", 20*time.Second); err != nil || e != nil {
			t.Fatal(err, e)
		}
	}
	c.waitConverged(3, 30*time.Second)

	// Plain TCP: an AppendEntries from a much later term would make a
	// follower take that term (and drop its leader) if it got through.
	leader := c.leaderIndex(nc)
	target := (leader + 1) % 3
	id := fmt.Sprintf("n%d", target+1)
	before, err := nodeInfo(nc, id)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	req := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("intruder"), Addr: []byte(plain.LocalAddr())},
		Term:      before.Term + 100,
	}
	var resp raft.AppendEntriesResponse
	if err := plain.AppendEntries(raft.ServerID(id), raft.ServerAddress(c.raftAddrs[target]), req, &resp); err == nil {
		t.Fatalf("plain TCP AppendEntries to a TLS node answered: %+v", resp)
	}
	checkFor(t, 5*time.Second, 50*time.Millisecond, func() error {
		if !strings.Contains(readLog(t, c.nodes[target]), "raft TLS handshake refused") {
			return errors.New("the refused handshake is not logged")
		}
		return nil
	})
	after, err := nodeInfo(nc, id)
	if err != nil {
		t.Fatal(err)
	}
	if after.Term != before.Term || after.Leader != before.Leader {
		t.Fatalf("plain TCP reached Raft: term %d -> %d, leader %q -> %q", before.Term, after.Term, before.Leader, after.Leader)
	}

	// A node with a certificate of another CA asks to join.
	stranger := newPKI(t, t.TempDir(), "stranger")
	// The leader test-dials a joiner's Raft address before adding it; the
	// handshake fails, so it refuses the join and n4 never becomes a
	// member that counts against the quorum.
	n4 := joinRefused(t, c, nc, routes, "n4", stranger, stranger.caFile)

	// The other direction: n5's certificate is from the next CA, which the
	// members trust, but n5 trusts only the next CA, so it refuses the
	// leader's certificate. In TLS 1.3 the leader's side of the handshake
	// succeeds before n5 has checked the leader's certificate; the leader's
	// probe must still see the refusal.
	n5 := joinRefused(t, c, nc, routes, "n5", next, next.caFile)
	n5.kill()
	for i := 0; i < 10; i++ {
		if _, e, err := request(nc, "concord.kv.put", map[string]any{"key": fmt.Sprintf("tls.after%d", i), "value": i}, "", 20*time.Second); err != nil || e != nil {
			t.Fatalf("the cluster stopped taking writes: %v %v", err, e)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		info, err := nodeInfo(nc, "n4")
		if err != nil {
			t.Fatal(err)
		}
		if info.AppliedIndex != 0 || info.Revision != 0 || info.Term != 0 && info.Leader != "" {
			t.Fatalf("n4 took part in the cluster: %+v", info)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st, err := c.status(nc, false); err == nil {
		for _, m := range st.Members {
			if m.Node != nil {
				t.Logf("with n4 asking to join: %s %s, applied index %d, revision %d", m.ID, m.Suffrage, m.Node.AppliedIndex, m.Node.Revision)
			}
		}
	}

	// The three stay healthy; take n4 out of the configuration if the
	// leader added it, and the members converge.
	n4.kill()
	if _, e, err := request(nc, "concord.cluster.remove", map[string]any{"id": "n4"}, "", 20*time.Second); err != nil || e != nil && e.Name != schema.ErrNodeNotFound {
		t.Fatalf("remove n4: %v %v", err, e)
	}
	c.waitMembers(3, 20*time.Second)
	c.waitConverged(3, 30*time.Second)
}

// writeBundle concatenates PEM files into one CA bundle.
func writeBundle(t *testing.T, path string, files ...string) {
	t.Helper()
	var all []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	if err := os.WriteFile(path, all, 0o600); err != nil {
		t.Fatal(err)
	}
}

// joinRefused starts node id with --join, a Raft certificate from issuer
// and caFile as the CA it trusts, and waits until a member logs that it
// refused the join, failing if id ever becomes a member; the joiner must
// log the refused handshake.
func joinRefused(t *testing.T, c *cluster, nc *nats.Conn, routes []string, id string, issuer *testPKI, caFile string) *node {
	t.Helper()
	cert, key := issuer.issue(t, id)
	url := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t))
	raftAddr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	joiner := startSecuredNode(t, c.dir, id, url, []string{"--raft-addr", raftAddr,
		"--raft-tls-cert", cert, "--raft-tls-key", key, "--raft-tls-ca", caFile,
		"--nats-listen", strings.TrimPrefix(url, "nats://"),
		"--nats-cluster", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--nats-routes", strings.Join(routes, ","),
		"--join"}, func() error {
		_, err := nodeInfo(nc, id)
		return err
	})
	refused := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !refused; time.Sleep(100 * time.Millisecond) {
		if st, err := c.status(nc, false); err == nil {
			for _, m := range st.Members {
				if m.ID == id {
					t.Fatalf("%s was added despite its Raft TLS mismatch: %+v", id, st.Members)
				}
			}
		}
		for _, n := range c.nodes {
			log := readLog(t, n)
			refused = refused || strings.Contains(log, "refused a join") && strings.Contains(log, raftAddr)
		}
	}
	if !refused {
		t.Fatalf("no member logged that it refused %s's join", id)
	}
	if !strings.Contains(readLog(t, joiner), "raft TLS handshake refused") {
		t.Fatalf("%s logged no refused handshake", id)
	}
	return joiner
}
