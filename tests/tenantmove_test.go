package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

	cc "github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/tests/freeport"
)

// moveConf is a bus with two Concord clusters (prefixes c1 and c2) in
// Concord's account, and two tenants placed by where their imports point:
// TENANT_A at %[1]s, TENANT_B at c1.
const moveConf = `
listen: 127.0.0.1:%[2]d
accounts {
  CONCORD {
    users = [ { user: concord, password: %[3]s } ]
    exports = [
      { service: "c1.lease.*" }, { service: "c1.kv.*" }, { stream: "c1.tenant.*.watch.>", account_token_position: 3 }
      { service: "c2.lease.*" }, { service: "c2.kv.*" }, { stream: "c2.tenant.*.watch.>", account_token_position: 3 }
    ]
  }
  TENANT_A {
    users = [ { user: tenant-a, password: %[4]s } ]
    imports = [
      { service: { account: CONCORD, subject: "%[1]s.lease.*" }, to: "concord.lease.*" }
      { service: { account: CONCORD, subject: "%[1]s.kv.*" }, to: "concord.kv.*" }
      { stream: { account: CONCORD, subject: "%[1]s.tenant.TENANT_A.watch.>" }, to: "concord.watch.>" }
    ]
  }
  TENANT_B {
    users = [ { user: tenant-b, password: %[4]s } ]
    imports = [
      { service: { account: CONCORD, subject: "c1.lease.*" }, to: "concord.lease.*" }
      { service: { account: CONCORD, subject: "c1.kv.*" }, to: "concord.kv.*" }
      { stream: { account: CONCORD, subject: "c1.tenant.TENANT_B.watch.>" }, to: "concord.watch.>" }
    ]
  }
}
`

// A tenant moves between two clusters on one bus while it writes and keeps
// leases alive, and while another tenant writes on the source: every write
// it was told succeeded is on the target once; a write it was told changed
// nothing is nowhere; every lease arrives with no less time than it had
// at the fence and no more than it had when last read; the other tenant
// never notices; the source refuses the tenant afterwards naming the
// target. The operator repoints the tenant's imports by reloading the
// server's configuration, as in docs/tenancy.md.
func TestTenantMoveBetweenClusters(t *testing.T) {
	dir := t.TempDir()
	port := freeport.Port(t)
	secret, tenantSecret := "c"+nuid.Next(), "t"+nuid.Next()
	conf := filepath.Join(dir, "nats.conf")
	writeConf := func(aAt string) {
		t.Helper()
		if err := os.WriteFile(conf, []byte(fmt.Sprintf(moveConf, aAt, port, secret, tenantSecret)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeConf("c1")
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	ns := startNATSServer(t, opts)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	operator := nats.UserInfo("concord", secret)
	t.Setenv("CONCORD_NATS_PASSWORD", secret)
	for i, prefix := range []string{"c1", "c2"} {
		args := []string{"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--bootstrap", "--subject-prefix", prefix,
			"--nats-url", url, "--nats-user", "concord"}
		startSecuredNode(t, dir, fmt.Sprintf("n%d", i+1), url, args, func() error { return answersLeaseList(url, prefix, operator) })
	}
	tenantClient := func(user string) *cc.Client {
		c, err := cc.Connect(cc.URL(url), cc.NATSOptions(nats.UserInfo(user, tenantSecret)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	a, b := tenantClient("tenant-a"), tenantClient("tenant-b")
	ctx := context.Background()

	// A's leases: 20 kept alive throughout, with a key each, and 5 left
	// alone whose time left is read just before the move.
	var leases, idle []int64
	for i := range 25 {
		g, err := a.Grant(ctx, schema.LeaseGrantRequest{TTL: 30})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.PutKey(ctx, fmt.Sprintf("lease.%d", g.ID), json.RawMessage(`1`), cc.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
		if i < 20 {
			leases = append(leases, g.ID)
		} else {
			idle = append(idle, g.ID)
		}
	}

	// Writers: A puts new keys (each call has its idempotency key, reused
	// by its retries), B puts on c1; both record every outcome.
	type outcome struct {
		key string
		err error
	}
	var mu sync.Mutex
	var aResults, bResults []outcome
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var aOK atomic.Int64
	writer := func(c *cc.Client, name string, out *[]outcome) {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("w.%s.%d", name, i)
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := c.PutKey(cctx, key, json.RawMessage(fmt.Sprint(i)))
			cancel()
			mu.Lock()
			*out = append(*out, outcome{key, err})
			mu.Unlock()
			if err == nil && strings.HasPrefix(name, "a") {
				aOK.Add(1)
			}
		}
	}
	for i := range 2 {
		wg.Add(2)
		go writer(a, fmt.Sprintf("a.%d", i), &aResults)
		go writer(b, fmt.Sprintf("b.%d", i), &bResults)
	}
	wg.Add(1)
	go func() { // the keep-alives
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			a.KeepAliveMany(cctx, schema.LeaseKeepAliveManyRequest{IDs: leases})
			cancel()
		}
	}()
	waitForCount(t, &aOK, 50)

	// The idle leases' time left, read just before the move.
	before := map[int64]int64{}
	readAt := time.Now()
	for _, id := range idle {
		li, err := a.LeaseInfo(ctx, schema.LeaseInfoRequest{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		before[id] = li.RemainingMS
	}

	out, err := runConcord(t, 2*time.Minute, "tenant", "move", "TENANT_A", "--to-prefix", "c2", "--subject-prefix", "c1",
		"--server", url, "--user", "concord", "--password", secret)
	if err != nil {
		t.Fatalf("tenant move: %v\n%s", err, out)
	}
	t.Logf("concord tenant move: %s", strings.TrimSpace(out))
	// The operator repoints A's imports at c2.
	writeConf("c2")
	if err := ns.Reload(); err != nil {
		t.Fatal(err)
	}
	moved := aOK.Load()
	waitForCount(t, &aOK, moved+50)
	close(stop)
	wg.Wait()

	// The idle leases: no less time than they had at the fence, no more
	// than when read before it.
	for _, id := range idle {
		li, err := a.LeaseInfo(ctx, schema.LeaseInfoRequest{ID: id})
		if err != nil {
			t.Fatalf("idle lease %d after the move: %v", id, err)
		}
		elapsed := time.Since(readAt).Milliseconds()
		if li.RemainingMS > before[id] || li.RemainingMS < before[id]-elapsed-5 {
			t.Errorf("idle lease %d: %d ms left after the move, had %d ms %d ms before", id, li.RemainingMS, before[id], elapsed)
		}
	}
	// Every lease and its key arrived.
	for _, id := range append(append([]int64{}, leases...), idle...) {
		li, err := a.LeaseInfo(ctx, schema.LeaseInfoRequest{ID: id, Keys: true})
		if err != nil || len(li.Keys) != 1 || li.Keys[0] != fmt.Sprintf("lease.%d", id) {
			t.Fatalf("lease %d on the target: %+v %v", id, li, err)
		}
	}
	// Every acknowledged write is there once (version 1: never applied
	// twice); every write refused as unchanged is nowhere.
	all, err := a.GetPrefix(ctx, "w.a.", func(r *schema.KVGetRequest) { r.Limit = 10000 })
	if err != nil || all.More {
		t.Fatalf("A's keys on the target: more %v, %v", all != nil && all.More, err)
	}
	got := map[string]schema.KeyValue{}
	for _, kv := range all.KVs {
		got[kv.Key] = kv
	}
	acked, refused, unknown := 0, 0, 0
	for _, o := range aResults {
		kv, present := got[o.key]
		switch {
		case o.err == nil:
			acked++
			if !present || kv.Version != 1 {
				t.Errorf("acknowledged %s: present %v, version %d", o.key, present, kv.Version)
			}
		case errors.Is(o.err, cc.ErrOutcomeUnknown):
			unknown++
			if present && kv.Version != 1 {
				t.Errorf("in-doubt %s applied twice", o.key)
			}
		default:
			refused++
			if present {
				t.Errorf("%s was refused (%v) but is on the target", o.key, o.err)
			}
		}
	}
	t.Logf("A: %d writes acknowledged, %d refused, %d in doubt; %d keys on the target", acked, refused, unknown, len(got))
	// B never noticed.
	for _, o := range bResults {
		if o.err != nil {
			t.Errorf("B's write %s failed during A's move: %v", o.key, o.err)
		}
	}
	// The source refuses A, naming the target; the target serves it.
	nc, err := nats.Connect(url, operator)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	asA := nats.NewMsg("c1.kv.get")
	asA.Header.Set("Nats-Request-Info", `{"acc":"TENANT_A"}`)
	asA.Data = []byte(`{"key":"lease.1"}`)
	resp, err := nc.RequestMsg(asA, 10*time.Second)
	if err != nil || resp.Header.Get(schema.HeaderErrorCode) != "503" || !strings.Contains(string(resp.Data), `moved to the cluster at subject prefix \"c2\"`) {
		t.Fatalf("A on the source after the move: %v %s", err, respData(resp))
	}
	var list schema.ClusterTenantsReply
	mustUnmarshal(t, []byte(runConcordOK(t, "tenant", "list", "TENANT_A", "--json", "--subject-prefix", "c1", "--server", url, "--user", "concord", "--password", secret)), &list)
	if len(list.Tenants) != 1 || list.Tenants[0].Keys != 0 || list.Tenants[0].Leases != 0 {
		t.Fatalf("A on the source after the move: %+v", list.Tenants)
	}
}

func waitForCount(t *testing.T, n *atomic.Int64, want int64) {
	t.Helper()
	checkFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		if got := n.Load(); got < want {
			return fmt.Errorf("%d of %d", got, want)
		}
		return nil
	})
}

func respData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}

func runConcordOK(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runConcord(t, time.Minute, args...)
	if err != nil {
		t.Fatalf("concord %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}
