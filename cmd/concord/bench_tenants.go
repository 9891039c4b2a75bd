package main

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// The keepalive-tenants workload: --tenants tenants of --tenant-leases
// leases each (or, with --tenants 0, as many leases of Concord's own
// account), renewed in keepalive_many requests of --keepalive-batch leases,
// each request of one tenant. Run it with --tenants 100 --tenant-leases
// 1000 and with --tenants 1 --tenant-leases 100000 to compare what a lease
// kept alive costs when the same number is spread over many tenants.
//
// A tenant is named by the Nats-Request-Info header, as the NATS server
// writes it on a request that crosses from a tenant's account; the bench
// writes it itself, so it must connect as a user of Concord's own account
// (docs/tenancy.md).

// benchAsTenant is --as-tenant, read by call: one process runs one bench.
var benchAsTenant string

// benchTenantName names tenant i of the workload.
func benchTenantName(i int) string { return fmt.Sprintf("BENCH_%04d", i) }

// callAs is call with the request made as tenant ("" for the default).
func callAs(nc *nats.Conn, subject, tenant string, req any, out any) error {
	if tenant == "" {
		return callPlain(nc, subject, req, out)
	}
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%s: encode request: %w", subject, err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set("Nats-Request-Info", `{"acc":"`+tenant+`"}`)
	resp, err := nc.RequestMsg(msg, 5*time.Second)
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	if code := resp.Header.Get(schema.HeaderErrorCode); code != "" {
		return fmt.Errorf("%s as %s: %s %s", subject, tenant, code, resp.Header.Get(schema.HeaderError))
	}
	if out != nil {
		if err := schema.DecodeJSON(resp.Data, out); err != nil {
			return fmt.Errorf("%s: decode reply %.200q: %w", subject, resp.Data, err)
		}
	}
	return nil
}

// tenantBatch is one keepalive_many request of the workload.
type tenantBatch struct {
	tenant string
	ids    []int64
}

func (b *bencher) keepAliveTenants() (benchResult, error) {
	tenants := max(b.cfg.tenants, 1)
	names := make([]string, tenants)
	for i := range names {
		if b.cfg.tenants > 0 {
			names[i] = benchTenantName(i)
		}
	}
	// Grant every lease, the clients sharing the work.
	leases := make([][]int64, tenants)
	for t := range leases {
		leases[t] = make([]int64, b.cfg.tenantLeases)
	}
	var next atomic.Int64
	total := int64(tenants * b.cfg.tenantLeases)
	grant := b.names.Request(subjects.LeaseGrant)
	err := b.perClient(func(_ int, nc *nats.Conn) error {
		for {
			k := next.Add(1) - 1
			if k >= total {
				return nil
			}
			t, l := int(k)/b.cfg.tenantLeases, int(k)%b.cfg.tenantLeases
			var g schema.LeaseGrantReply
			if err := callAs(nc, grant, names[t], schema.LeaseGrantRequest{TTL: 600}, &g); err != nil {
				return fmt.Errorf("setup: lease %d of %d: %w", k+1, total, err)
			}
			leases[t][l] = g.ID
		}
	})
	if err != nil {
		return benchResult{}, err
	}
	var batches []tenantBatch
	for t, ids := range leases {
		for i := 0; i < len(ids); i += b.cfg.keepAliveBatch {
			batches = append(batches, tenantBatch{names[t], ids[i:min(i+b.cfg.keepAliveBatch, len(ids))]})
		}
	}
	subject := b.names.Request(subjects.LeaseKeepAliveMany)
	ops := make([]benchOp, len(b.conns))
	var mu sync.Mutex
	cursor := 0
	for i, nc := range b.conns {
		ops[i] = func(int) (int, error) {
			// The batches in turn, across all clients: every lease is
			// renewed as often as every other.
			mu.Lock()
			bt := batches[cursor]
			cursor = (cursor + 1) % len(batches)
			mu.Unlock()
			var k schema.LeaseKeepAliveManyReply
			if err := callAs(nc, subject, bt.tenant, schema.LeaseKeepAliveManyRequest{IDs: bt.ids}, &k); err != nil {
				return 0, err
			}
			if len(k.NotFound) > 0 || len(k.Leases) != len(bt.ids) {
				return 0, fmt.Errorf("%s as %q: %d renewed, %d not found, of %d", subject, bt.tenant, len(k.Leases), len(k.NotFound), len(bt.ids))
			}
			return len(k.Leases), nil
		}
	}
	lr := runLoop(ops, b.cfg.duration)
	r := summarize("keepalive-tenants", lr.lat, lr.elapsed)
	r.Errors = lr.errs
	if lr.firstErr != nil {
		return r, fmt.Errorf("%d failed requests; the first: %w", lr.errs, lr.firstErr)
	}
	r.Extra = map[string]float64{"tenants": float64(b.cfg.tenants), "leases": float64(total),
		"batch": float64(b.cfg.keepAliveBatch), "leases_per_s": float64(lr.renewed) / lr.elapsed.Seconds()}
	return r, nil
}
