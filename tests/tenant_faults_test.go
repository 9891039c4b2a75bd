package tests

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
)

// These tests name a request's tenant by the Nats-Request-Info header
// that a NATS server stamps on requests crossing a service import. Here a
// client of the cluster's own account writes it itself, which the node
// cannot tell apart (docs/tenancy.md: that account is the operator's). The
// node's paths are the same as behind real imports, which
// tests/tenancy_test.go runs; the cluster harness's embedded servers then
// need no accounts.

// Two tenants under load through a leader kill, a leader pause and a
// partition of the leader: each tenant's acknowledged writes are there,
// once, with its own values under key names both use; no lease expires
// before its time, each tenant's idle leases keep their remaining time
// (less what passed, plus what the clock stood still); the replicas end
// byte-identical.
func TestTenantsThroughFaults(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	nc := c.conn()
	defer nc.Close()
	tenants := []string{"TENANT_A", "TENANT_B"}
	ok := func(tenant, subject string, body any) []byte {
		t.Helper()
		data, e, err := requestAs(nc, tenant, subject, body, "", 30*time.Second)
		if err != nil || e != nil {
			t.Fatalf("%s %s: %v %v", tenant, subject, err, e)
		}
		return data
	}
	// Each tenant: 5 idle leases of 60 s, a key on each.
	for _, tn := range tenants {
		for range 5 {
			var g schema.LeaseGrantReply
			mustUnmarshal(t, ok(tn, "concord.lease.grant", map[string]any{"ttl": 60}), &g)
			ok(tn, "concord.kv.put", map[string]any{"key": fmt.Sprintf("idle.%d", g.ID), "value": tn, "lease": g.ID})
		}
	}
	// Writers: the same key names in both tenants, values saying whose.
	var mu sync.Mutex
	acked := map[string]map[string]bool{}
	for _, tn := range tenants {
		acked[tn] = map[string]bool{}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, tn := range tenants {
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wnc := c.conn()
				defer wnc.Close()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("w.%d.%d", w, i)
					_, e, err := requestAs(wnc, tn, "concord.kv.put", map[string]any{"key": key, "value": tn + "/" + key}, tn+"-"+key, 30*time.Second)
					if err == nil && e == nil {
						mu.Lock()
						acked[tn][key] = true
						mu.Unlock()
					}
				}
			}()
		}
	}

	readIdle := func() map[string]map[int64]int64 {
		out := map[string]map[int64]int64{}
		for _, tn := range tenants {
			var list schema.LeaseListReply
			mustUnmarshal(t, ok(tn, "concord.lease.list", map[string]any{}), &list)
			out[tn] = map[int64]int64{}
			for _, l := range list.Leases {
				out[tn][l.ID] = l.RemainingMS
			}
		}
		return out
	}
	before, readAt := readIdle(), time.Now()

	leader := c.leaderIndex(nc)
	t.Logf("kill -9 of the leader n%d", leader+1)
	c.nodes[leader].kill()
	time.Sleep(3 * time.Second)
	c.nodes[leader].restart()

	leader = c.leaderIndex(nc)
	t.Logf("SIGSTOP of the leader n%d for 3 s", leader+1)
	c.nodes[leader].pause(true)
	time.Sleep(3 * time.Second)
	c.nodes[leader].pause(false)

	leader = c.leaderIndex(nc)
	t.Logf("partition of the leader n%d for 4 s", leader+1)
	c.partition(leader)
	time.Sleep(4 * time.Second)
	c.heal()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	after, elapsed := readIdle(), time.Since(readAt).Milliseconds()
	for _, tn := range tenants {
		if len(after[tn]) != 5 {
			t.Fatalf("%s has %d leases after the faults, want its 5", tn, len(after[tn]))
		}
		for id, was := range before[tn] {
			now, there := after[tn][id]
			if !there || now > was || now < was-elapsed-5 {
				t.Errorf("%s lease %d: %d ms left, had %d ms %d ms before", tn, id, now, was, elapsed)
			}
		}
		var kvs schema.KVGetReply
		mustUnmarshal(t, ok(tn, "concord.kv.get", map[string]any{"prefix": "w.", "limit": 10000}), &kvs)
		got := map[string]schema.KeyValue{}
		for _, kv := range kvs.KVs {
			got[kv.Key] = kv
			if string(kv.Value) != `"`+tn+"/"+kv.Key+`"` {
				t.Errorf("%s reads %s = %s: another tenant's value", tn, kv.Key, kv.Value)
			}
		}
		mu.Lock()
		for key := range acked[tn] {
			if kv, there := got[key]; !there || kv.Version != 1 {
				t.Errorf("%s's acknowledged %s: there %v, version %d", tn, key, there, kv.Version)
			}
		}
		t.Logf("%s: %d writes acknowledged, %d keys", tn, len(acked[tn]), len(got))
		if len(acked[tn]) == 0 {
			t.Errorf("%s wrote nothing", tn)
		}
		mu.Unlock()
	}
	c.waitMembers(3, 30*time.Second)
	c.waitConverged(3, 60*time.Second)
}
