package main

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// spread runs f for k = 0..n-1, spread over all clients, and returns the
// first error.
func (b *bencher) spread(n int, f func(nc *nats.Conn, k int) error) error {
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for c, nc := range b.conns {
		wg.Add(1)
		go func(c int, nc *nats.Conn) {
			defer wg.Done()
			for k := c; k < n; k += len(b.conns) {
				if err := f(nc, k); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}(c, nc)
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}

// putMany attaches n keys to lease, spread over all clients.
func (b *bencher) putMany(keyPrefix string, n int, lease int64) error {
	value := b.value()
	return b.spread(n, func(nc *nats.Conn, k int) error {
		key := fmt.Sprintf("%s%06d", keyPrefix, k)
		if err := call(nc, b.names.Request(subjects.KVPut), schema.KVPutRequest{Key: key, Value: value, Lease: &lease}, nil); err != nil {
			return fmt.Errorf("put %s: %w", key, err)
		}
		return nil
	})
}

// watchDeletes subscribes, on a connection of its own, to the delete events
// of the keys under keyPrefix; f runs for each with the time it arrived.
// The subscription is in place on the server when watchDeletes returns.
func (b *bencher) watchDeletes(keyPrefix string, f func(m *nats.Msg, at time.Time)) (*nats.Conn, error) {
	watcher, err := nats.Connect(b.cfg.url, nats.Name("concord-bench-watcher"))
	if err != nil {
		return nil, fmt.Errorf("connect watcher to %s: %w", b.cfg.url, err)
	}
	subject := b.names.Watch(keyPrefix + ">")
	sub, err := watcher.Subscribe(subject, func(m *nats.Msg) {
		if m.Header.Get(schema.HeaderOperation) == schema.OperationDelete {
			f(m, time.Now())
		}
	})
	if err == nil {
		err = sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = watcher.Flush()
	}
	if err != nil {
		watcher.Close()
		return nil, fmt.Errorf("watch %s: %w", subject, err)
	}
	return watcher, nil
}

// revoke measures revoking one lease with many keys: the time to the reply,
// and to the last delete event seen by a watcher of the keys.
func (b *bencher) revoke() (benchResult, error) {
	nc := b.conns[0]
	keyPrefix := fmt.Sprintf("bench.%s.revoke.", b.run)
	lease, err := b.grant(nc, 600)
	if err != nil {
		return benchResult{}, fmt.Errorf("setup: %w", err)
	}
	if err := b.putMany(keyPrefix, b.cfg.revokeKeys, lease); err != nil {
		return benchResult{}, fmt.Errorf("setup: %w", err)
	}
	var deletes atomic.Int64
	done := make(chan time.Time, 1)
	first := make(chan time.Time, 1)
	watcher, err := b.watchDeletes(keyPrefix, func(_ *nats.Msg, at time.Time) {
		switch n := deletes.Add(1); {
		case n == 1 && n == int64(b.cfg.revokeKeys):
			first <- at
			done <- at
		case n == 1:
			first <- at
		case n == int64(b.cfg.revokeKeys):
			done <- at
		}
	})
	if err != nil {
		return benchResult{}, err
	}
	defer watcher.Close()
	t0 := time.Now()
	var rr schema.LeaseRevokeReply
	if err := call(nc, b.names.Request(subjects.LeaseRevoke), schema.LeaseRevokeRequest{ID: lease}, &rr); err != nil {
		return benchResult{}, fmt.Errorf("revoke lease %d: %w", lease, err)
	}
	replyAfter := time.Since(t0)
	if rr.Deleted != int64(b.cfg.revokeKeys) {
		return benchResult{}, fmt.Errorf("revoke lease %d: reply says %d keys deleted, want %d", lease, rr.Deleted, b.cfg.revokeKeys)
	}
	r := benchResult{Workload: "revoke", Ops: 1, Extra: map[string]float64{"keys": float64(rr.Deleted), "reply_ms": ms(replyAfter)}}
	select {
	case last := <-done:
		r.Extra["first_event_ms"] = ms((<-first).Sub(t0))
		r.Extra["last_event_ms"] = ms(last.Sub(t0))
	case <-time.After(30 * time.Second):
		// Core NATS may drop events; the missing ones count as errors.
		r.Errors = int64(b.cfg.revokeKeys) - deletes.Load()
		r.Extra["events_seen"] = float64(deletes.Load())
	}
	return r, nil
}

// expiry grants many short leases with one key each and measures, for each
// delete event, how long after (grant sent + ttl) it arrived. The grant's
// send time is before the server stamped the lease, so lateness is
// over-estimated, never under-estimated; an event before it is early.
func (b *bencher) expiry() (benchResult, error) {
	n := b.cfg.expiryLeases
	keyPrefix := fmt.Sprintf("bench.%s.expiry.", b.run)
	var mu sync.Mutex
	seen := make(map[string]time.Time, n)
	all := make(chan struct{})
	watchPrefix := b.names.Watch("")
	watcher, err := b.watchDeletes(keyPrefix, func(m *nats.Msg, at time.Time) {
		key := strings.TrimPrefix(m.Subject, watchPrefix)
		mu.Lock()
		defer mu.Unlock()
		if _, dup := seen[key]; dup {
			return
		}
		seen[key] = at
		if len(seen) == n {
			close(all)
		}
	})
	if err != nil {
		return benchResult{}, err
	}
	defer watcher.Close()
	sent := make([]time.Time, n)
	err = b.spread(n, func(nc *nats.Conn, k int) error {
		sent[k] = time.Now()
		lease, err := b.grant(nc, b.cfg.expiryTTL)
		if err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		key := fmt.Sprintf("%s%06d", keyPrefix, k)
		if err := call(nc, b.names.Request(subjects.KVPut), schema.KVPutRequest{Key: key, Value: []byte("1"), Lease: &lease}, nil); err != nil {
			return fmt.Errorf("setup: put %s: %w", key, err)
		}
		return nil
	})
	if err != nil {
		return benchResult{}, err
	}
	select {
	case <-all:
	case <-time.After(time.Duration(b.cfg.expiryTTL)*time.Second + 30*time.Second):
	}
	mu.Lock()
	defer mu.Unlock()
	ttl := time.Duration(b.cfg.expiryTTL) * time.Second
	var late []time.Duration
	var early int64
	for k := 0; k < n; k++ {
		at, ok := seen[fmt.Sprintf("%s%06d", keyPrefix, k)]
		if !ok {
			continue
		}
		d := at.Sub(sent[k].Add(ttl))
		if d < 0 {
			early++
		}
		late = append(late, d)
	}
	r := summarize("expiry", late, 1)
	r.OpsPerS = 0
	var sum time.Duration
	for _, d := range late {
		sum += d
	}
	r.Extra = map[string]float64{"early": float64(early), "missing": float64(n - len(late))}
	if len(late) > 0 {
		r.Extra["mean_late_ms"] = ms(sum / time.Duration(len(late)))
		r.Extra["max_late_ms"] = ms(late[len(late)-1])
	}
	r.Errors = early + int64(n-len(late))
	return r, nil
}
