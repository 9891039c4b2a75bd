package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
	"github.com/concord-io/concord/tests/freeport"
)

// Tenants by NATS account, with deploy/nats/accounts.conf used as it is
// (only the ports are the test's): Concord in its account, two tenant
// accounts importing its requests and their own events.

// tenantSecrets are the passwords of deploy/nats/accounts.conf's users.
type tenantSecrets struct {
	replica, events, operator, a, b string
	conf                            string
}

// useTenantAccounts makes fresh passwords for every user of
// deploy/nats/accounts.conf and puts them where the file and the nodes
// read them.
func useTenantAccounts(t *testing.T) tenantSecrets {
	t.Helper()
	s := tenantSecrets{replica: "r" + nuid.Next(), events: "e" + nuid.Next(), operator: "o" + nuid.Next(),
		a: "a" + nuid.Next(), b: "b" + nuid.Next()}
	var err error
	if s.conf, err = filepath.Abs("../deploy/nats/accounts.conf"); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"CONCORD_REPLICA_PASSWORD": s.replica, "CONCORD_EVENTS_PASSWORD": s.events, "CONCORD_OPERATOR_PASSWORD": s.operator,
		"TENANT_A_PASSWORD": s.a, "TENANT_B_PASSWORD": s.b,
		"CONCORD_NATS_PASSWORD": s.replica, "CONCORD_NATS_EVENTS_PASSWORD": s.events,
	} {
		t.Setenv(k, v)
	}
	return s
}

// startTenantNode starts one node on the accounts of secrets: on its
// embedded server configured by the file, or on an external nats-server
// (in this process) loaded from the same file. It returns the client URL.
func startTenantNode(t *testing.T, secrets tenantSecrets, external bool, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	url := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t))
	args := []string{"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--bootstrap",
		"--nats-user", "concord-replica", "--nats-events-user", "concord-events"}
	args = append(args, extra...)
	if external {
		opts, err := server.ProcessConfigFile(secrets.conf)
		if err != nil {
			t.Fatal(err)
		}
		opts.Host, opts.Port = "127.0.0.1", 0
		fmt.Sscanf(url, "nats://127.0.0.1:%d", &opts.Port)
		startNATSServer(t, opts)
		args = append(args, "--nats-url", url)
	} else {
		args = append(args, "--nats-config", secrets.conf, "--nats-listen", strings.TrimPrefix(url, "nats://"))
	}
	operator := nats.UserInfo("concord-operator", secrets.operator)
	startSecuredNode(t, dir, "n1", url, args, func() error { return answersLeaseList(url, "concord", operator) })
	return url
}

// connectAs is connect with credentials.
func connectAs(t *testing.T, url, user, password string) *client {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo(user, password))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	names, _ := subjects.New(subjects.DefaultPrefix)
	return &client{t: t, nc: nc, names: names}
}

// Two tenants and the operator (the default tenant) use the same key
// names, lease ids and watch subjects at once: none sees, changes, renews
// or revokes another's, by any field, subject or header it controls.
func TestTenantsIsolatedByAccount(t *testing.T) {
	for _, mode := range []string{"embedded", "external"} {
		t.Run(mode, func(t *testing.T) {
			secrets := useTenantAccounts(t)
			url := startTenantNode(t, secrets, mode == "external")
			op := connectAs(t, url, "concord-operator", secrets.operator)
			a := connectAs(t, url, "tenant-a", secrets.a)
			b := connectAs(t, url, "tenant-b", secrets.b)
			tenantIsolation(t, url, secrets, op, a, b)
		})
	}
}

func tenantIsolation(t *testing.T, url string, secrets tenantSecrets, op, a, b *client) {
	// Every party watches every watch subject it can; the operator also
	// the tenants' export, where it sees each tenant's events apart.
	watchOp, watchA, watchB := op.watch("concord.watch.>"), a.watch("concord.watch.>"), b.watch("concord.watch.>")
	opTenants := watchRaw(t, op.nc, "concord.tenant.>")

	parties := []struct {
		name string
		c    *client
	}{{"operator", op}, {"A", a}, {"B", b}}
	for i, p := range parties {
		// The same lease id (each tenant counts its own from 1, and the
		// default tenant's too) and the same key, different values.
		var g schema.LeaseGrantReply
		p.c.ok(subjects.LeaseGrant, map[string]any{"ttl": 60 + i}, &g)
		if g.ID != 1 {
			t.Fatalf("%s's first lease is %d, want 1: lease ids are the tenant's own", p.name, g.ID)
		}
		p.c.ok(subjects.KVPut, map[string]any{"key": "svc.api", "value": p.name, "lease": 1}, nil)
		p.c.ok(subjects.KVPut, map[string]any{"key": "cfg." + p.name, "value": 1}, nil)
	}
	for i, p := range parties {
		got := p.c.get(map[string]any{"prefix": ""})
		if got.Count != 2 || string(got.KVs[1].Value) != `"`+p.name+`"` {
			t.Fatalf("%s reads %+v, want its own two keys", p.name, got.KVs)
		}
		info := p.c.info(1, true)
		if info.TTL != int64(60+i) || len(info.Keys) != 1 || info.Keys[0] != "svc.api" {
			t.Fatalf("%s's lease 1 is %+v", p.name, info)
		}
		var list schema.LeaseListReply
		p.c.ok(subjects.LeaseList, map[string]any{}, &list)
		if len(list.Leases) != 1 {
			t.Fatalf("%s lists %d leases, want its own one", p.name, len(list.Leases))
		}
	}

	// Each watcher sees its own two puts, under the usual subjects.
	for _, w := range []struct {
		name string
		w    *watcher
	}{{"operator", watchOp}, {"A", watchA}, {"B", watchB}} {
		evs := w.w.waitFor(2, 10*time.Second)
		for _, ev := range evs {
			if ev.Key != "svc.api" && ev.Key != "cfg."+w.name {
				t.Fatalf("%s's watcher saw %s", w.name, ev.Key)
			}
		}
	}
	opTenants.waitSubject(t, "concord.tenant.TENANT_A.watch.cfg.A")
	opTenants.waitSubject(t, "concord.tenant.TENANT_B.watch.cfg.B")

	// B revokes its lease 1: its key goes; A's and the operator's stay.
	b.ok(subjects.LeaseRevoke, map[string]any{"id": 1}, nil)
	if got := b.get(map[string]any{"key": "svc.api"}); got.Count != 0 {
		t.Fatalf("B's key survived its lease: %+v", got)
	}
	for _, p := range []*client{op, a} {
		if got := p.get(map[string]any{"key": "svc.api"}); got.Count != 1 {
			t.Fatal("B's revoke of its lease 1 deleted another tenant's key")
		}
		p.ok(subjects.LeaseKeepAlive, map[string]any{"id": 1}, nil)
	}
	b.fails(subjects.LeaseKeepAlive, map[string]any{"id": 1}, schema.ErrLeaseNotFound)
	b.fails(subjects.KVPut, map[string]any{"key": "x", "value": 1, "lease": 1}, schema.ErrLeaseNotFound)

	// A compare in B on a key only A and the operator have fails; a key
	// or prefix that looks like another tenant's is just a key of B's.
	var txn schema.KVTxnReply
	b.ok(subjects.KVTxn, map[string]any{
		"compare": []any{map[string]any{"key": "cfg.A", "target": "version", "op": ">", "value": 0}},
		"success": []any{map[string]any{"put": map[string]any{"key": "leak", "value": 1}}},
	}, &txn)
	if txn.Succeeded {
		t.Fatal("B's compare read A's key")
	}
	b.ok(subjects.KVPut, map[string]any{"key": "TENANT_A.cfg.A", "value": "B's"}, nil)
	if got := a.get(map[string]any{"prefix": "TENANT_A"}); got.Count != 0 {
		t.Fatalf("B's key named like A's space reached A: %+v", got)
	}
	// An idempotency key is the tenant's own.
	a.ok(subjects.KVPut, map[string]any{"key": "k", "value": "A", "idempotency_key": "same"}, nil)
	b.ok(subjects.KVPut, map[string]any{"key": "k", "value": "B-other", "idempotency_key": "same"}, nil)

	// A forged Nats-Request-Info header from a client in A: the server
	// replaces it with A's, so the write lands in A's space.
	forged := nats.NewMsg("concord.kv.put")
	forged.Header.Set("Nats-Request-Info", `{"acc":"TENANT_B"}`)
	forged.Data = []byte(`{"key":"forged","value":1}`)
	if resp, err := a.nc.RequestMsg(forged, 10*time.Second); err != nil || resp.Header.Get(schema.HeaderErrorCode) != "" {
		t.Fatalf("forged put: %v %v", err, resp)
	}
	if b.get(map[string]any{"key": "forged"}).Count != 0 || a.get(map[string]any{"key": "forged"}).Count != 1 {
		t.Fatal("a forged Nats-Request-Info header moved A's write into B's space")
	}
	// The same header hidden behind a bare line feed, which the server
	// passes on beside its own: refused, nothing written anywhere.
	reply := rawRequest(t, url, "tenant-b", secrets.b, "concord.kv.put",
		"NATS/1.0\r\nX-Pad: y\nNats-Request-Info: {\"acc\":\"TENANT_A\"}\r\n\r\n", `{"key":"smuggled","value":1}`)
	if !strings.Contains(reply, `"invalid_request"`) || !strings.Contains(reply, "Nats-Request-Info") {
		t.Fatalf("a smuggled second Nats-Request-Info header got %q, want invalid_request naming the header", reply)
	}
	for _, p := range []*client{op, a, b} {
		if p.get(map[string]any{"key": "smuggled"}).Count != 0 {
			t.Fatal("a request with a smuggled Nats-Request-Info header was applied")
		}
	}
	// The operator's connection may act as a tenant by writing the header
	// itself: that is why its account is the operator's alone.
	asA := nats.NewMsg("concord.kv.get")
	asA.Header.Set("Nats-Request-Info", `{"acc":"TENANT_A"}`)
	asA.Data = []byte(`{"key":"cfg.A"}`)
	if resp, err := op.nc.RequestMsg(asA, 10*time.Second); err != nil || !strings.Contains(string(resp.Data), `"cfg.A"`) {
		t.Fatalf("the operator reading as A: %v %v", err, resp)
	}
	// ... but a cluster endpoint refuses any tenant, whoever asks.
	status := nats.NewMsg("concord.cluster.status")
	status.Header.Set("Nats-Request-Info", `{"acc":"TENANT_A"}`)
	status.Data = []byte(`{}`)
	if resp, err := op.nc.RequestMsg(status, 10*time.Second); err != nil || resp.Header.Get(schema.HeaderErrorCode) != "403" {
		t.Fatalf("cluster.status for tenant A: %v %v, want 403", err, resp)
	}
	// Tenants cannot reach the cluster endpoints at all: not exported.
	if _, err := a.nc.Request("concord.cluster.status", []byte(`{}`), 2*time.Second); err == nil {
		t.Fatal("tenant A reached concord.cluster.status")
	}

	// No watcher ever saw another party's event.
	time.Sleep(200 * time.Millisecond)
	for _, w := range []struct {
		name string
		w    *watcher
	}{{"operator", watchOp}, {"A", watchA}, {"B", watchB}} {
		for _, ev := range w.w.snapshot() {
			if strings.HasPrefix(ev.Key, "cfg.") && ev.Key != "cfg."+w.name {
				t.Fatalf("%s's watcher saw another tenant's %s", w.name, ev.Key)
			}
			if ev.Key == "leak" || ev.Key == "smuggled" || (ev.Key == "forged" && w.name != "A") {
				t.Fatalf("%s's watcher saw %s", w.name, ev.Key)
			}
		}
	}
}

// rawRequest sends a request over a plain protocol connection, with a
// header block written byte for byte (which nats.go would not write), and
// returns the reply's payload.
func rawRequest(t *testing.T, url, user, password, subject, header, body string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "nats://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	r := bufio.NewReader(conn)
	if _, err := r.ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	connect, _ := json.Marshal(map[string]any{"verbose": false, "pedantic": false, "headers": true, "user": user, "pass": password})
	inbox := "_INBOX." + nuid.Next()
	fmt.Fprintf(conn, "CONNECT %s\r\nSUB %s 1\r\nHPUB %s %s %d %d\r\n%s%s\r\nPING\r\n",
		connect, inbox, subject, inbox, len(header), len(header)+len(body), header, body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("raw request: %v", err)
		}
		switch {
		case strings.HasPrefix(line, "-ERR"):
			t.Fatalf("raw request: %s", line)
		case strings.HasPrefix(line, "HMSG"):
			var subj, sid string
			var hlen, total int
			if _, err := fmt.Sscanf(line, "HMSG %s %s %d %d", &subj, &sid, &hlen, &total); err != nil {
				t.Fatalf("raw request: %q: %v", line, err)
			}
			buf := make([]byte, total+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				t.Fatal(err)
			}
			return string(buf[hlen:total])
		case strings.HasPrefix(line, "MSG"):
			t.Fatalf("raw request: a reply without headers: %s", line)
		}
	}
}

// The tenant accounts example cannot be bent to let one tenant import
// another's events: the server refuses the file.
func TestTenantAccountsRefuseForeignEvents(t *testing.T) {
	secrets := useTenantAccounts(t)
	data, err := os.ReadFile(secrets.conf)
	if err != nil {
		t.Fatal(err)
	}
	bent := strings.Replace(string(data), `subject: "concord.tenant.TENANT_B.watch.>"`, `subject: "concord.tenant.TENANT_A.watch.>"`, 1)
	if bent == string(data) {
		t.Fatal("the example no longer has TENANT_B's event import")
	}
	path := filepath.Join(t.TempDir(), "bent.conf")
	if err := os.WriteFile(path, []byte(bent), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err == nil {
		var ns *server.Server
		ns, err = server.NewServer(opts)
		if ns != nil {
			ns.Shutdown()
		}
	}
	if err == nil || !strings.Contains(err.Error(), "not authorized") {
		t.Fatalf("TENANT_B importing TENANT_A's events: %v, want the server to refuse", err)
	}
}

// Quotas, set by the operator with the CLI: each is hit exactly at its
// limit with an error naming it and the use, the refused request changes
// nothing, and the other tenant is not held to it. The operator sees every
// tenant's use.
func TestTenantQuotas(t *testing.T) {
	secrets := useTenantAccounts(t)
	// One tenant with series of its own: the first met, A; B is "other".
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	url := startTenantNode(t, secrets, false, "--metrics-listen", httpAddr, "--metrics-tenants", "1")
	a := connectAs(t, url, "tenant-a", secrets.a)
	b := connectAs(t, url, "tenant-b", secrets.b)
	opArgs := []string{"--server", url, "--user", "concord-operator", "--password", secrets.operator}
	cli := func(args ...string) string {
		t.Helper()
		out, err := runConcord(t, 30*time.Second, append(args, opArgs...)...)
		if err != nil {
			t.Fatalf("concord %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	out := cli("tenant", "quota", "TENANT_A", "--leases", "2", "--keys", "3", "--value-bytes", "12", "--keepalive-many", "2")
	if !strings.Contains(out, "tenant TENANT_A is held to 2 leases, 3 keys, 12 value bytes, keepalive_many of 2, 0 requests/s") {
		t.Fatalf("tenant quota said %q", out)
	}
	// A tenant cannot set quotas: the cluster subjects are not imported.
	if _, err := runConcord(t, 30*time.Second, "tenant", "quota", "TENANT_A", "--server", url, "--user", "tenant-a", "--password", secrets.a, "--timeout", "2s"); err == nil {
		t.Fatal("tenant A set its own quota")
	}

	a.ok(subjects.LeaseGrant, map[string]any{"ttl": 60}, nil)
	a.ok(subjects.KVPut, map[string]any{"key": "k1", "value": "1234", "lease": 1}, nil) // 6 bytes
	a.ok(subjects.KVPut, map[string]any{"key": "k2", "ttl": 60, "value": 1}, nil)       // a second lease, 1 byte
	unchanged := func(what string) {
		t.Helper()
		kvs, leases := a.fullState()
		if len(kvs.KVs) != 2 || len(leases) != 2 {
			t.Fatalf("%s: A holds %d keys and %d leases, want 2 and 2", what, len(kvs.KVs), len(leases))
		}
	}
	for _, c := range []struct {
		what string
		ep   subjects.Endpoint
		body any
		name string
		says string
	}{
		{"a third lease", subjects.LeaseGrant, map[string]any{"ttl": 60}, schema.ErrLimitExceeded, "tenant TENANT_A is at its quota of 2 leases (2 in use)"},
		{"a value over the bytes", subjects.KVPut, map[string]any{"key": "k1", "value": "12345678901"}, schema.ErrLimitExceeded, "over its quota of 12 bytes (7 in use)"},
		{"keepalive_many of 3", subjects.LeaseKeepAliveMany, map[string]any{"ids": []int64{1, 2, 3}}, schema.ErrTooLarge, "at most 2 leases in one keepalive_many"},
	} {
		e := a.fails(c.ep, c.body, c.name)
		if !strings.Contains(e.Description, c.says) {
			t.Fatalf("%s: %q, want it to say %q", c.what, e.Description, c.says)
		}
		unchanged(c.what)
	}
	a.ok(subjects.KVPut, map[string]any{"key": "k3", "value": 1}, nil)
	e := a.fails(subjects.KVPut, map[string]any{"key": "k4", "value": 1}, schema.ErrLimitExceeded)
	if !strings.Contains(e.Description, "tenant TENANT_A is at its quota of 3 keys (3 in use)") {
		t.Fatalf("a fourth key: %q", e.Description)
	}
	// B has no quota: ten leases are fine.
	for range 10 {
		b.grant(60)
	}

	// The operator's view, and one tenant's.
	out = cli("tenant", "list")
	for _, want := range []string{"TENANT_A", "TENANT_B", "\n-  "} {
		if !strings.Contains(out, want) {
			t.Fatalf("tenant list lacks %q:\n%s", want, out)
		}
	}
	var list schema.ClusterTenantsReply
	mustUnmarshal(t, []byte(cli("tenant", "list", "--json")), &list)
	got := map[string]schema.TenantUsage{}
	for _, u := range list.Tenants {
		got[u.Tenant] = u
	}
	if u := got["TENANT_A"]; u.Keys != 3 || u.Leases+u.AnonymousLeases != 2 || u.ValueBytes != 8 || u.Quota == nil || u.Quota.Keys != 3 {
		t.Fatalf("TENANT_A's use: %+v", u)
	}
	if u := got["TENANT_B"]; u.Leases != 10 || u.Quota == nil || *u.Quota != (schema.TenantQuota{}) {
		t.Fatalf("TENANT_B's use: %+v", u)
	}
	if out := cli("status", "--tenant", "TENANT_B"); !strings.Contains(out, "TENANT_B") || strings.Contains(out, "TENANT_A") {
		t.Fatalf("status --tenant TENANT_B:\n%s", out)
	}
	if out, err := runConcord(t, 30*time.Second, append([]string{"status", "--tenant", "NOBODY"}, opArgs...)...); err == nil || !strings.Contains(out, "has written nothing") {
		t.Fatalf("status --tenant NOBODY: %v\n%s", err, out)
	}

	// A default quota with a rate holds B; A keeps its own, which has no
	// rate. B's burst of 5 passes, and then it is refused with 429 while A
	// goes on.
	cli("tenant", "quota", "*", "--rate", "5")
	var refused *schema.Error
	var refusedIn time.Duration
	for i := 0; i < 50 && refused == nil; i++ {
		sent := time.Now()
		r := b.raw(subjects.KVGet, map[string]any{"key": "x"})
		refused, refusedIn = r.err, time.Since(sent)
	}
	if refused == nil || refused.Name != schema.ErrLimitExceeded || !strings.Contains(refused.Description, "tenant TENANT_B is over its quota of 5 requests per second") {
		t.Fatalf("B over its rate: %v", refused)
	}
	// The refusal is held a second before it is answered, so clients
	// that send as fast as they are answered slow down.
	if refusedIn < time.Second {
		t.Errorf("B's refusal for its rate came after %v, want at least the 1 s hold", refusedIn)
	}
	// Unless the request's deadline is nearer: then it is answered in
	// time. (The bucket refilled during the hold: the first few pass.)
	var held *nats.Msg
	var heldIn time.Duration
	for i := 0; i < 20 && held == nil; i++ {
		req := nats.NewMsg(b.names.Request(subjects.KVGet))
		req.Data = []byte(`{"key":"x"}`)
		req.Header.Set(schema.HeaderDeadline, schema.FormatDeadline(time.Now().Add(400*time.Millisecond)))
		sent := time.Now()
		r, err := b.nc.RequestMsg(req, 10*time.Second)
		if err != nil {
			t.Fatalf("B's request with a deadline 400 ms away: %v", err)
		}
		if r.Header.Get(schema.HeaderErrorCode) != "" {
			held, heldIn = r, time.Since(sent)
		}
	}
	if held == nil || held.Header.Get(schema.HeaderErrorCode) != "429" {
		t.Errorf("B over its rate with a deadline 400 ms away: %v", held)
	} else if heldIn >= time.Second {
		t.Errorf("B's refusal with a deadline 400 ms away came after %v", heldIn)
	}
	// Eight clients sending B's requests in a closed loop for 3 s: each
	// request in flight is answered at most once a second past the
	// rate, so about 5×3 + 5 + 8×3 answers, not the thousands a node
	// answers in 3 s. (A slow machine answers fewer, which passes.)
	var answered atomic.Int64
	var wg sync.WaitGroup
	until := time.Now().Add(3 * time.Second)
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(until) {
				if _, err := b.nc.Request(b.names.Request(subjects.KVGet), []byte(`{"key":"x"}`), 10*time.Second); err != nil {
					t.Errorf("B's flood: %v", err)
					return
				}
				answered.Add(1)
			}
		})
	}
	for range 20 {
		a.get(map[string]any{"key": "k1"})
	}
	wg.Wait()
	if n := answered.Load(); n > 150 {
		t.Errorf("8 clients of B over its rate of 5/s were answered %d times in 3 s; held refusals allow about 50", n)
	}
	// Clearing A's quota puts A under the default one.
	cli("tenant", "quota", "TENANT_A", "--clear")
	mustUnmarshal(t, []byte(cli("tenant", "list", "TENANT_A", "--json")), &list)
	if len(list.Tenants) != 1 || *list.Tenants[0].Quota != (schema.TenantQuota{RequestsPerSecond: 5}) {
		t.Fatalf("A after --clear: %+v", list.Tenants)
	}
	// The tenants' series: A's own, B's in "other", the operator's "-".
	m := scrapeMetrics(t, httpAddr)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"concord_tenant_keys", []string{"tenant", "TENANT_A"}, 3},
		{"concord_tenant_value_bytes", []string{"tenant", "TENANT_A"}, 8},
		{"concord_tenant_leases", []string{"tenant", "other"}, 10},
		{"concord_tenant_keys", []string{"tenant", "-"}, 0},
		{"concord_tenant_quota", []string{"tenant", "TENANT_A", "kind", "requests_per_second"}, 5},
	} {
		if got := m.value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if m.metric("concord_tenant_keys", "tenant", "TENANT_B") != nil {
		t.Error("TENANT_B has series of its own past --metrics-tenants 1")
	}
	if got := m.value("concord_tenant_requests_total", "tenant", "TENANT_A", "outcome", "limit_exceeded"); got != 3 {
		t.Errorf("A's limit_exceeded requests: %v, want 3 (leases, value bytes, keys)", got)
	}
	if got := m.value("concord_tenant_requests_total", "tenant", "other", "outcome", "limit_exceeded"); got < 1 {
		t.Errorf("B's requests over its rate: %v, want at least 1", got)
	}
	if got := m.value("concord_tenant_requests_total", "tenant", "TENANT_A", "outcome", "too_large"); got != 1 {
		t.Errorf("A's too_large requests: %v, want 1", got)
	}
}
