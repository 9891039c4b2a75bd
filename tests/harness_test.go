package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
	"github.com/concord-io/concord/tests/freeport"
)

// binPath is the concord binary built once for the whole run.
var binPath string

// exiting is held by whichever of TestMain's end and its signal handler
// exits the process, so that the other cannot exit first with its own
// status (once the handler has killed the children, the tests may finish
// and pass).
var exiting sync.Mutex

func TestMain(m *testing.M) {
	// Interrupted (Ctrl-C, or a CI runner's SIGTERM): the children have
	// process groups of their own, so the terminal's signal does not reach
	// them; kill them and every descendant before going. A signal ignored
	// from the start (a background job's SIGINT) stays ignored.
	sigs := make(chan os.Signal, 1)
	for _, sig := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		if !signal.Ignored(sig) {
			signal.Notify(sigs, sig)
		}
	}
	go func() {
		sig := <-sigs
		exiting.Lock()
		killAllProcs()
		fmt.Fprintf(os.Stderr, "tests: %v: killed every process the tests started\n", sig)
		os.Exit(1)
	}()
	code := 0
	if os.Getenv(procHelperVar) != "" {
		code = m.Run() // a child for TestProc*: no concord binary needed
	} else {
		code = buildAndRun(m)
	}
	exiting.Lock()
	// Every test's Cleanup has killed what it started; anything alive with
	// one of this binary's markers escaped that, and fails the run.
	for _, l := range killAllProcs() {
		fmt.Fprintf(os.Stderr, "tests: a process outlived its test (killed now): %s\n", l)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// buildAndRun builds the concord binary into a temporary directory and
// runs the tests.
func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "concord-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "concord")
	build := newProc(nil, 10*time.Minute, "go", "build", "-o", binPath, "../cmd/concord")
	build.cmd.Stdout, build.cmd.Stderr = os.Stdout, os.Stderr
	if err := build.run(); err != nil {
		fmt.Fprintln(os.Stderr, "build concord:", err)
		return 1
	}
	return m.Run()
}

// checkFor polls f until it returns nil or timeout passes.
func checkFor(t testing.TB, timeout, interval time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %s: %v", timeout, err)
		}
		time.Sleep(interval)
	}
}

// startNATSServer runs a nats-server in the test process, on a random
// loopback port unless opts says otherwise, with NoSigs and a 4 MiB max
// payload when opts sets none, and shuts it down when the test ends.
func startNATSServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	if opts.Host == "" && opts.Port == 0 {
		opts.Host, opts.Port = "127.0.0.1", -1
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = 4 << 20
	}
	opts.NoSigs = true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return ns
}

// node is one concord process.
type node struct {
	t       testing.TB
	dataDir string
	natsURL string
	args    []string
	logPath string
	bin     string // the binary to run; binPath when empty

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit error, once done is closed
}

// nodeOpts tune startNode.
type nodeOpts struct {
	// extra flags for `concord serve`
	flags []string
	// natsURL, when set, makes the node use this external NATS.
	natsURL string
	// dataDir, when set, is the data directory instead of a new one.
	dataDir string
	// bin, when set, is the binary to run instead of the one built.
	bin string
}

// startNode starts a single-node concord with embedded NATS on free ports
// and waits until it answers requests.
func startNode(t testing.TB, o nodeOpts) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{t: t, dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "concord.log"), bin: o.bin}
	if o.dataDir != "" {
		n.dataDir = o.dataDir
	}
	n.args = []string{"serve", "--data-dir", n.dataDir, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))}
	if o.natsURL != "" {
		n.natsURL = o.natsURL
		n.args = append(n.args, "--nats-url", o.natsURL)
	} else {
		n.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t))
		n.args = append(n.args, "--nats-listen", strings.TrimPrefix(n.natsURL, "nats://"))
	}
	n.args = append(n.args, o.flags...)
	n.start()
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			if b, err := os.ReadFile(n.logPath); err == nil {
				lines := 60
				if strings.Contains(string(b), "SIGQUIT") {
					lines = 100000 // a goroutine dump from a stuck shutdown: all of it
				}
				t.Logf("concord log:\n%s", tail(string(b), lines))
			}
		}
	})
	n.waitReady()
	return n
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

func (n *node) start() {
	n.t.Helper()
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	bin := binPath
	if n.bin != "" {
		bin = n.bin
	}
	p := newProc(n.t, 0, bin, n.args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.start(); err != nil {
		logf.Close()
		n.t.Fatal(err)
	}
	done := make(chan struct{})
	n.mu.Lock()
	n.cmd, n.done = p.cmd, done
	n.mu.Unlock()
	go func() {
		err := p.wait()
		logf.Close()
		n.mu.Lock()
		n.err = err
		n.mu.Unlock()
		close(done)
	}()
}

// waitReady polls until the leader answers a read.
func (n *node) waitReady() {
	n.t.Helper()
	checkFor(n.t, 20*time.Second, 50*time.Millisecond, func() error {
		select {
		case <-n.done:
			n.t.Fatalf("concord exited before it was ready: %v", n.err)
		default:
		}
		return answersLeaseList(n.natsURL, "concord")
	})
}

// answersLeaseList returns nil once the cluster at prefix, reached at url
// with opts, answers a lease.list: its leader serves.
func answersLeaseList(url, prefix string, opts ...nats.Option) error {
	nc, err := nats.Connect(url, append(opts, nats.Timeout(time.Second))...)
	if err != nil {
		return err
	}
	defer nc.Close()
	msg, err := nc.Request(prefix+".lease.list", []byte(`{}`), time.Second)
	if err != nil {
		return err
	}
	if msg.Header.Get(schema.HeaderErrorCode) != "" {
		return fmt.Errorf("not ready: %s", msg.Data)
	}
	return nil
}

// kill sends SIGKILL and waits for the process to go.
func (n *node) kill() {
	n.signal(syscall.SIGKILL)
}

// stop sends SIGTERM, waits, and fails the test unless the exit was clean.
func (n *node) stop() {
	n.t.Helper()
	if err := n.signal(syscall.SIGTERM); err != nil {
		n.t.Fatalf("concord exited with %v after SIGTERM", err)
	}
}

func (n *node) signal(sig syscall.Signal) error {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
	default:
		_ = cmd.Process.Signal(sig)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			// Stuck: a goroutine dump (SIGQUIT) into the log says where.
			_ = cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-done:
			case <-time.After(2 * time.Second):
			}
			_ = cmd.Process.Kill()
			<-done
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cmd = nil
	return n.err
}

// restart starts the process again with the same flags and data.
func (n *node) restart() {
	n.t.Helper()
	n.start()
	n.waitReady()
}

// client is a test's NATS connection to a node.
type client struct {
	t     testing.TB
	nc    *nats.Conn
	names subjects.Names
}

func connect(t testing.TB, url string) *client {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	names, _ := subjects.New(subjects.DefaultPrefix)
	return &client{t: t, nc: nc, names: names}
}

// reply is a decoded response: either a success body or an error.
type reply struct {
	data []byte
	err  *schema.Error
}

// raw sends body (a string or any value to marshal) to an endpoint and
// checks the reply against the schema of that endpoint's reply or of error.
func (c *client) raw(ep subjects.Endpoint, body any) reply {
	c.t.Helper()
	var data []byte
	switch b := body.(type) {
	case string:
		data = []byte(b)
	case []byte:
		data = b
	default:
		var err error
		if data, err = json.Marshal(b); err != nil {
			c.t.Fatal(err)
		}
	}
	msg, err := c.nc.Request(c.names.Request(ep), data, 10*time.Second)
	if err != nil {
		c.t.Fatalf("request %s %s: %v", ep, data, err)
	}
	if code := msg.Header.Get(schema.HeaderErrorCode); code != "" {
		if err := schema.Validate("error", msg.Data); err != nil {
			c.t.Fatalf("%s error reply %s fails its schema: %v", ep, msg.Data, err)
		}
		var er schema.ErrorReply
		if err := json.Unmarshal(msg.Data, &er); err != nil {
			c.t.Fatal(err)
		}
		if strconv.Itoa(er.Error.Code) != code || msg.Header.Get(schema.HeaderError) != er.Error.Description {
			c.t.Fatalf("%s error headers %q/%q disagree with body %s", ep, code, msg.Header.Get(schema.HeaderError), msg.Data)
		}
		return reply{data: msg.Data, err: er.Error}
	}
	if err := schema.Validate(string(ep)+".reply", msg.Data); err != nil {
		c.t.Fatalf("%s reply %s fails its schema: %v", ep, msg.Data, err)
	}
	return reply{data: msg.Data}
}

// ok sends a request that must succeed and decodes the reply into out.
func (c *client) ok(ep subjects.Endpoint, body any, out any) {
	c.t.Helper()
	r := c.raw(ep, body)
	if r.err != nil {
		c.t.Fatalf("%s %v: unexpected error %v", ep, body, r.err)
	}
	if out != nil {
		if err := json.Unmarshal(r.data, out); err != nil {
			c.t.Fatalf("decode %s reply %s: %v", ep, r.data, err)
		}
	}
}

// fails sends a request that must fail with the named error and returns it.
func (c *client) fails(ep subjects.Endpoint, body any, name string) *schema.Error {
	c.t.Helper()
	r := c.raw(ep, body)
	if r.err == nil {
		c.t.Fatalf("%s %v: succeeded with %s, want error %s", ep, body, r.data, name)
	}
	if r.err.Name != name {
		c.t.Fatalf("%s %v: error %v, want %s", ep, body, r.err, name)
	}
	return r.err
}

func (c *client) grant(ttl int64) int64 {
	c.t.Helper()
	var g schema.LeaseGrantReply
	c.ok(subjects.LeaseGrant, schema.LeaseGrantRequest{TTL: ttl}, &g)
	return g.ID
}

func (c *client) put(key string, value any, lease int64) int64 {
	c.t.Helper()
	req := map[string]any{"key": key, "value": value}
	if lease != 0 {
		req["lease"] = lease
	}
	var p schema.KVPutReply
	c.ok(subjects.KVPut, req, &p)
	return p.Revision
}

func (c *client) get(req any) schema.KVGetReply {
	c.t.Helper()
	var g schema.KVGetReply
	c.ok(subjects.KVGet, req, &g)
	return g
}

// revision reads the current cluster revision.
func (c *client) revision() int64 {
	c.t.Helper()
	return c.get(map[string]any{"prefix": "", "count_only": true}).Revision
}

func (c *client) info(id int64, keys bool) schema.LeaseInfo {
	c.t.Helper()
	var in schema.LeaseInfo
	c.ok(subjects.LeaseInfo, schema.LeaseInfoRequest{ID: id, Keys: keys}, &in)
	return in
}

// seenEvent is a watch event with the time it arrived.
type seenEvent struct {
	schema.Event
	at time.Time
}

// watcher collects watch events on a subject, validating each.
type watcher struct {
	t   testing.TB
	sub *nats.Subscription

	mu     sync.Mutex
	events []seenEvent
	bad    []string
}

func (c *client) watch(subject string) *watcher {
	c.t.Helper()
	w := &watcher{t: c.t}
	sub, err := c.nc.Subscribe(subject, func(m *nats.Msg) {
		at := time.Now()
		var ev schema.Event
		var problem string
		if err := schema.Validate("event", m.Data); err != nil {
			problem = fmt.Sprintf("event %s fails its schema: %v", m.Data, err)
		} else if err := json.Unmarshal(m.Data, &ev); err != nil {
			problem = err.Error()
		} else if m.Header.Get(schema.HeaderRevision) != strconv.FormatInt(ev.Revision, 10) || m.Header.Get(schema.HeaderOperation) != ev.Operation() {
			problem = fmt.Sprintf("event headers %v disagree with %s", m.Header, m.Data)
		} else if m.Subject != "concord.watch."+ev.Key {
			problem = fmt.Sprintf("event for %q arrived on %q", ev.Key, m.Subject)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if problem != "" {
			w.bad = append(w.bad, problem)
			return
		}
		w.events = append(w.events, seenEvent{ev, at})
	})
	if err != nil {
		c.t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		c.t.Fatal(err)
	}
	if err := c.nc.Flush(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { sub.Unsubscribe() })
	w.sub = sub
	return w
}

// snapshot returns the events seen so far and fails on any invalid one.
func (w *watcher) snapshot() []seenEvent {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.bad) > 0 {
		w.t.Fatalf("invalid watch events: %v", w.bad)
	}
	return append([]seenEvent(nil), w.events...)
}

// waitFor waits until at least n events have arrived and returns them.
func (w *watcher) waitFor(n int, timeout time.Duration) []seenEvent {
	w.t.Helper()
	var evs []seenEvent
	checkFor(w.t, timeout, 5*time.Millisecond, func() error {
		evs = w.snapshot()
		if len(evs) < n {
			return fmt.Errorf("%d of %d events", len(evs), n)
		}
		return nil
	})
	return evs
}

// fullState reads every key and lease (anonymous included), for comparing
// a node's state before and after a restart.
func (c *client) fullState() (schema.KVGetReply, []schema.LeaseInfo) {
	c.t.Helper()
	var kvs schema.KVGetReply
	after := ""
	for {
		page := c.get(map[string]any{"prefix": "", "after": after, "limit": 10000})
		kvs.Revision = page.Revision
		kvs.KVs = append(kvs.KVs, page.KVs...)
		if !page.More {
			break
		}
		after = page.KVs[len(page.KVs)-1].Key
	}
	var leases []schema.LeaseInfo
	var afterID int64
	for {
		var l schema.LeaseListReply
		c.ok(subjects.LeaseList, schema.LeaseListRequest{IncludeAnonymous: true, After: afterID, Limit: 10000}, &l)
		leases = append(leases, l.Leases...)
		if !l.More {
			break
		}
		afterID = l.Leases[len(l.Leases)-1].ID
	}
	return kvs, leases
}

// mustJSON compacts a JSON literal for comparisons.
func mustJSON(t testing.TB, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func mustUnmarshal(t testing.TB, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
}
