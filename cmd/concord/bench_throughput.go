package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// benchOp sends request number n of one client in a throughput workload and
// checks that the reply is what the workload's name promises. It returns
// how many leases the request renewed (for the keep-alive workloads).
type benchOp func(n int) (renewed int, err error)

// throughput runs one closed-loop workload: every client sends its next
// request as soon as the previous one is answered, for --duration. Setup
// (leases, keys to read) happens before the clock starts.
func (b *bencher) throughput(w string) (benchResult, error) {
	ops := make([]benchOp, len(b.conns))
	err := b.perClient(func(i int, nc *nats.Conn) error {
		op, err := b.setupClient(w, i, nc)
		if err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		ops[i] = op
		return nil
	})
	if err != nil {
		return benchResult{}, err
	}

	lr := runLoop(ops, b.cfg.duration)
	r := summarize(w, lr.lat, lr.elapsed)
	r.Errors = lr.errs
	if lr.firstErr != nil {
		// The result counts the failures; stderr says what the first was.
		fmt.Fprintf(os.Stderr, "concord bench: %s: %d failed requests; the first: %v\n", w, lr.errs, lr.firstErr)
	}
	renewed, elapsed := lr.renewed, lr.elapsed
	switch w {
	case "keepalive":
		r.Extra = map[string]float64{"leases_per_s": float64(renewed) / elapsed.Seconds()}
	case "keepalive-batch":
		r.Extra = map[string]float64{
			"batch":          float64(b.cfg.keepAliveBatch),
			"leases_renewed": float64(renewed),
			"leases_per_s":   float64(renewed) / elapsed.Seconds(),
		}
	}
	return r, nil
}

// loopResult is what one closed-loop window measured, all clients
// together.
type loopResult struct {
	lat      []time.Duration // one per answered request, unsorted
	elapsed  time.Duration
	renewed  int64
	errs     int64
	firstErr error
}

// runLoop runs ops[i] on client i in a closed loop, each client sending
// its next request as soon as the previous one is answered, for d.
func runLoop(ops []benchOp, d time.Duration) loopResult {
	type clientState struct {
		lat      []time.Duration
		renewed  int64
		errs     int64
		firstErr error
	}
	states := make([]clientState, len(ops))
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for i := range ops {
		wg.Add(1)
		go func(op benchOp, st *clientState) {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				t0 := time.Now()
				renewed, err := op(n)
				if err != nil {
					st.errs++
					if st.firstErr == nil {
						st.firstErr = err
					}
					continue
				}
				st.lat = append(st.lat, time.Since(t0))
				st.renewed += int64(renewed)
			}
		}(ops[i], &states[i])
	}
	wg.Wait()
	r := loopResult{elapsed: time.Since(start)}
	for i := range states {
		st := &states[i]
		r.lat = append(r.lat, st.lat...)
		r.errs += st.errs
		r.renewed += st.renewed
		if r.firstErr == nil && st.firstErr != nil {
			r.firstErr = fmt.Errorf("client %d: %w", i, st.firstErr)
		}
	}
	return r
}

// grant grants a lease of ttl seconds on nc.
func (b *bencher) grant(nc *nats.Conn, ttl int64) (int64, error) {
	var g schema.LeaseGrantReply
	if err := call(nc, b.names.Request(subjects.LeaseGrant), schema.LeaseGrantRequest{TTL: ttl}, &g); err != nil {
		return 0, err
	}
	if g.ID <= 0 {
		return 0, fmt.Errorf("%s: reply has lease id %d", b.names.Request(subjects.LeaseGrant), g.ID)
	}
	return g.ID, nil
}

// setupClient prepares client i for workload w and returns its request.
func (b *bencher) setupClient(w string, i int, nc *nats.Conn) (benchOp, error) {
	value := b.value()
	switch w {
	case "grant":
		return func(int) (int, error) {
			_, err := b.grant(nc, 600)
			return 0, err
		}, nil

	case "put":
		lease, err := b.grant(nc, 600)
		if err != nil {
			return nil, err
		}
		subject := b.names.Request(subjects.KVPut)
		return func(n int) (int, error) {
			key := fmt.Sprintf("bench.%s.put.%d.%d", b.run, i, n%1000)
			var p schema.KVPutReply
			if err := call(nc, subject, schema.KVPutRequest{Key: key, Value: value, Lease: &lease}, &p); err != nil {
				return 0, err
			}
			if p.Revision <= 0 {
				return 0, fmt.Errorf("%s %s: reply has revision %d", subject, key, p.Revision)
			}
			return 0, nil
		}, nil

	case "keepalive":
		lease, err := b.grant(nc, 600)
		if err != nil {
			return nil, err
		}
		subject := b.names.Request(subjects.LeaseKeepAlive)
		return func(int) (int, error) {
			var k schema.LeaseKeepAliveReply
			if err := call(nc, subject, schema.LeaseKeepAliveRequest{ID: lease}, &k); err != nil {
				return 0, err
			}
			if k.ID != lease {
				return 0, fmt.Errorf("%s %d: reply renews lease %d", subject, lease, k.ID)
			}
			return 1, nil
		}, nil

	case "keepalive-batch":
		ids := make([]int64, b.cfg.keepAliveBatch)
		for k := range ids {
			id, err := b.grant(nc, 600)
			if err != nil {
				return nil, fmt.Errorf("lease %d of %d: %w", k+1, len(ids), err)
			}
			ids[k] = id
		}
		subject := b.names.Request(subjects.LeaseKeepAliveMany)
		req := schema.LeaseKeepAliveManyRequest{IDs: ids}
		return func(int) (int, error) {
			var k schema.LeaseKeepAliveManyReply
			if err := call(nc, subject, req, &k); err != nil {
				return 0, err
			}
			if len(k.NotFound) > 0 {
				return 0, fmt.Errorf("%s: %d of %d leases not found, the first %d", subject, len(k.NotFound), len(ids), k.NotFound[0])
			}
			if len(k.Leases) != len(ids) {
				return 0, fmt.Errorf("%s: %d leases renewed of %d asked", subject, len(k.Leases), len(ids))
			}
			for j := range k.Leases {
				if k.Leases[j].ID != ids[j] {
					return 0, fmt.Errorf("%s: reply lease %d is %d, want %d", subject, j, k.Leases[j].ID, ids[j])
				}
			}
			return len(k.Leases), nil
		}, nil

	case "get", "get-serializable":
		// Keys of their own per workload: a key stays on the lease it was
		// put with, so another workload's lease could not take it over.
		lease, err := b.grant(nc, 600)
		if err != nil {
			return nil, err
		}
		keys := make([]string, 100)
		for k := range keys {
			keys[k] = fmt.Sprintf("bench.%s.%s.%d.%d", b.run, w, i, k)
			if err := call(nc, b.names.Request(subjects.KVPut), schema.KVPutRequest{Key: keys[k], Value: value, Lease: &lease}, nil); err != nil {
				return nil, err
			}
		}
		subject := b.names.Request(subjects.KVGet)
		serializable := w == "get-serializable"
		return func(n int) (int, error) {
			key := keys[n%len(keys)]
			var g schema.KVGetReply
			if err := call(nc, subject, schema.KVGetRequest{Key: &key, Serializable: serializable}, &g); err != nil {
				return 0, err
			}
			if len(g.KVs) != 1 || g.KVs[0].Key != key {
				return 0, fmt.Errorf("%s %s: reply has %d records, want the key", subject, key, len(g.KVs))
			}
			return 0, nil
		}, nil

	case "txn":
		lease, err := b.grant(nc, 600)
		if err != nil {
			return nil, err
		}
		subject := b.names.Request(subjects.KVTxn)
		key := fmt.Sprintf("bench.%s.lock.%d", b.run, i)
		return func(n int) (int, error) {
			acquire := n%2 == 0
			var t schema.KVTxnReply
			if err := call(nc, subject, lockTxn(key, lease, acquire), &t); err != nil {
				return 0, err
			}
			if !t.Succeeded {
				what := "release"
				if acquire {
					what = "acquire"
				}
				return 0, fmt.Errorf("%s: %s of %s failed its compare", subject, what, key)
			}
			return 0, nil
		}, nil
	}
	return nil, fmt.Errorf("%q is not a throughput workload", w)
}

// lockTxn acquires (create_revision == 0, then put on the lease) or
// releases (lease == ours, then delete) a lock key.
func lockTxn(key string, lease int64, acquire bool) map[string]any {
	if acquire {
		return map[string]any{
			"compare": []any{map[string]any{"key": key, "target": "create_revision", "op": "==", "value": 0}},
			"success": []any{map[string]any{"put": map[string]any{"key": key, "value": "holder", "lease": lease}}},
			"failure": []any{map[string]any{"get": map[string]any{"key": key}}},
		}
	}
	return map[string]any{
		"compare": []any{map[string]any{"key": key, "target": "lease", "op": "==", "value": lease}},
		"success": []any{map[string]any{"delete": map[string]any{"key": key}}},
	}
}
