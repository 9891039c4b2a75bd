package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/tests/linearize"
)

// errRetriesExhausted means a request found no leader for the whole retry
// window: the cluster did not recover in time.
var errRetriesExhausted = errors.New("no answer within the retry window")

// request sends a request until it gets an answer that is not retryable:
// timeouts, no responders and 503s are retried, as clients are told to.
// Mutating requests carry an idempotency key so that retries apply once.
func request(nc *nats.Conn, subject string, body any, idemKey string, window time.Duration) ([]byte, *schema.Error, error) {
	return requestAs(nc, "", subject, body, idemKey, window)
}

// requestAs sends a request as tenant ("" for Concord's own account) and
// retries it while the reply says retry, under the same idempotency key
// when one is given; request (load_history_test.go) is its default
// tenant's.
func requestAs(nc *nats.Conn, tenant, subject string, body any, idemKey string, window time.Duration) ([]byte, *schema.Error, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, nil, err
	}
	deadline := time.Now().Add(window)
	for time.Now().Before(deadline) {
		msg := nats.NewMsg(subject)
		msg.Data = data
		if tenant != "" {
			msg.Header.Set("Nats-Request-Info", `{"acc":"`+tenant+`"}`)
		}
		if idemKey != "" {
			msg.Header.Set(schema.HeaderIdempotencyKey, idemKey)
		}
		resp, err := nc.RequestMsg(msg, 2*time.Second)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if resp.Header.Get(schema.HeaderErrorCode) != "" {
			var er schema.ErrorReply
			if err := json.Unmarshal(resp.Data, &er); err != nil {
				return nil, nil, err
			}
			if er.Error.Retryable() {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return nil, er.Error, nil
		}
		return resp.Data, nil, nil
	}
	return nil, nil, errRetriesExhausted
}

// workload is the steady load the cluster tests run while they break
// things: register operations recorded for the linearizability check,
// leases kept alive (whose keys must not go while an acknowledged
// keep-alive still covers them), and abandoned leases (whose keys must
// go, not before their ttl and not long after it).
type workload struct {
	t      *testing.T
	c      *cluster
	hist   *linearize.History
	stop   chan struct{}
	wg     sync.WaitGroup
	failed atomic.Value

	mu        sync.Mutex
	abandoned []abandonedLease
	kept      []*keptLease
	// lastWrite is when the latest write was acknowledged, for measuring
	// how long the cluster was without a leader.
	lastWrite atomic.Int64
	maxGap    atomic.Int64
	// lastAnswer and maxSilence measure the same with the poller's reads
	// counted too, which go on after the writers stop: the cluster can be
	// without a leader then, and the abandoned leases still wait to go.
	lastAnswer atomic.Int64
	maxSilence atomic.Int64
	polls      []poll
	// abandoning counts the clients still leaving leases: the poller
	// goes on until none is, or a key put after its last poll would
	// never be seen to go.
	abandoning atomic.Int32
}

// keptLease is one lease the workload keeps alive, with a key of its own,
// and what the lease rule promises about it: once a keep-alive sent at t
// is acknowledged, the key exists until at least t + ttl.
type keptLease struct {
	key  string
	id   int64
	done time.Time // the key's put acknowledgement
	// until is the first send of the latest acknowledged grant or
	// keep-alive plus the ttl: the key must exist until then.
	until time.Time
	// lapsed is when a keep-alive found the lease gone, zero if none did.
	lapsed time.Time
}

type abandonedLease struct {
	key        string
	ttl        time.Duration
	sent, done time.Time // the grant's first send and the key's put acknowledgement
}

// poll is one linearizable read of every lease-attached key.
type poll struct {
	call, ret time.Time
	keys      map[string]bool
}

const (
	registerKeys = 6
	keptTTL      = 3
	abandonedTTL = 2
)

func startWorkload(t *testing.T, c *cluster, clients int) *workload {
	w := &workload{t: t, c: c, hist: linearize.New(), stop: make(chan struct{})}
	w.lastWrite.Store(time.Now().UnixNano())
	w.lastAnswer.Store(time.Now().UnixNano())
	for i := 0; i < clients; i++ {
		nc := c.conn()
		w.wg.Add(3)
		w.abandoning.Add(1)
		go w.registers(i, nc)
		go w.keepLeases(i, nc)
		go w.abandonLeases(i, nc)
	}
	w.wg.Add(1)
	go w.poller(c.conn())
	return w
}

func (w *workload) fail(err error) {
	w.failed.CompareAndSwap(nil, err)
}

func (w *workload) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// wrote notes an acknowledged write and the longest gap between two.
func (w *workload) wrote() {
	now := time.Now().UnixNano()
	prev := w.lastWrite.Swap(now)
	if gap := now - prev; gap > w.maxGap.Load() {
		w.maxGap.Store(gap)
	}
	w.answered()
}

// answered notes an answer of the leader, a write's or a poll's, and the
// longest gap between two.
func (w *workload) answered() {
	now := time.Now().UnixNano()
	prev := w.lastAnswer.Swap(now)
	if gap := now - prev; gap > w.maxSilence.Load() {
		w.maxSilence.Store(gap)
	}
}

func (w *workload) registers(id int, nc *nats.Conn) {
	defer w.wg.Done()
	r := rand.New(rand.NewPCG(uint64(id), 7))
	seen := map[string]string{}
	for seq := 0; !w.stopped(); seq++ {
		key := fmt.Sprintf("reg.k%d", r.IntN(registerKeys))
		call := w.hist.Now()
		switch p := r.IntN(10); {
		case p < 4:
			val := fmt.Sprintf("c%d-%d", id, seq)
			_, e, err := request(nc, "concord.kv.put", map[string]any{"key": key, "value": val}, fmt.Sprintf("reg-c%d-%d", id, seq), 30*time.Second)
			if err != nil || e != nil {
				w.fail(fmt.Errorf("put %s: %v %v", key, err, e))
				return
			}
			w.wrote()
			w.hist.Add(id, linearize.Input{Op: linearize.Put, Key: key, Value: val}, call, linearize.Output{})
		case p < 8:
			data, e, err := request(nc, "concord.kv.get", map[string]any{"key": key}, "", 30*time.Second)
			if err != nil || e != nil {
				w.fail(fmt.Errorf("get %s: %v %v", key, err, e))
				return
			}
			var g schema.KVGetReply
			if err := json.Unmarshal(data, &g); err != nil {
				w.fail(err)
				return
			}
			out := linearize.Output{}
			if len(g.KVs) == 1 {
				if err := json.Unmarshal(g.KVs[0].Value, &out.Value); err != nil {
					w.fail(err)
					return
				}
			}
			seen[key] = out.Value
			w.hist.Add(id, linearize.Input{Op: linearize.Get, Key: key}, call, out)
		default:
			from, to := seen[key], fmt.Sprintf("c%d-%d", id, seq)
			cmp := map[string]any{"key": key, "target": "value", "op": "==", "value": from}
			if from == "" {
				cmp = map[string]any{"key": key, "target": "exists", "op": "==", "value": false}
			}
			body := map[string]any{"compare": []any{cmp}, "success": []any{map[string]any{"put": map[string]any{"key": key, "value": to}}}}
			data, e, err := request(nc, "concord.kv.txn", body, fmt.Sprintf("reg-c%d-%d", id, seq), 30*time.Second)
			if err != nil || e != nil {
				w.fail(fmt.Errorf("cas %s: %v %v", key, err, e))
				return
			}
			var tr schema.KVTxnReply
			if err := json.Unmarshal(data, &tr); err != nil {
				w.fail(err)
				return
			}
			w.wrote()
			w.hist.Add(id, linearize.Input{Op: linearize.CAS, Key: key, Expect: from, Value: to}, call, linearize.Output{Swapped: tr.Succeeded})
		}
	}
}

// grant asks for a lease of ttl seconds; it returns the lease and when the
// grant was first sent.
func (w *workload) grant(nc *nats.Conn, ttl int64, idem string) (int64, time.Time, bool) {
	sent := time.Now()
	data, e, err := request(nc, "concord.lease.grant", map[string]any{"ttl": ttl}, idem, 30*time.Second)
	if err != nil || e != nil {
		w.fail(fmt.Errorf("grant: %v %v", err, e))
		return 0, sent, false
	}
	var g schema.LeaseGrantReply
	if err := json.Unmarshal(data, &g); err != nil {
		w.fail(err)
		return 0, sent, false
	}
	return g.ID, sent, true
}

// putOnLease puts a key on a lease granted by a request first sent at
// granted. It returns whether the key is there; gone is true when the
// lease had already expired, which fails the workload unless its ttl had
// run out (a put lost with a stopping node waits out its 2 s attempt
// timeout, as long as an abandoned lease's ttl).
func (w *workload) putOnLease(nc *nats.Conn, client int, key string, lease int64, granted time.Time, ttl time.Duration) (ok, gone bool) {
	_, e, err := request(nc, "concord.kv.put", map[string]any{"key": key, "value": client, "lease": lease}, "put-"+key, 30*time.Second)
	now := time.Now()
	switch {
	case err == nil && e != nil && e.Name == schema.ErrLeaseNotFound && !now.Before(granted.Add(ttl)):
		w.t.Logf("lease %d (ttl %s, granted by a request sent at %s) expired before its key %s could be put, at %s",
			lease, ttl, granted.Format(time.StampMilli), key, now.Format(time.StampMilli))
		return false, true
	case err != nil || e != nil:
		w.fail(fmt.Errorf("put %s on lease %d (ttl %s, granted by a request sent at %s) at %s: %v %v",
			key, lease, ttl, granted.Format(time.StampMilli), now.Format(time.StampMilli), err, e))
		return false, false
	}
	w.wrote()
	return true, false
}

// keepLeases keeps one lease alive with a key on it, renewing every 500 ms
// from a goroutine of its own, so that no other request of the client
// holds a renewal up. A lease can still lapse without any fault of
// Concord's: a keep-alive in flight to a node that stops (or whose NATS
// server goes with it) is lost, and retried only after its 2 s attempt
// timeout, while the new leader's lease clock runs; two such losses in a
// row outlast the 3 s ttl. That is no error when it comes after the
// promise ran out (the first send of the last acknowledged keep-alive
// plus the ttl): the client then keeps a new lease with a new key, as a
// real one would. Sooner, the lease was lost early, and the test fails.
func (w *workload) keepLeases(id int, nc *nats.Conn) {
	defer w.wg.Done()
	for gen := 0; ; gen++ {
		if !w.keepLease(id, gen, nc) {
			return
		}
	}
}

// keepLease grants a lease, puts a key on it and keeps it alive until the
// workload stops or the lease lapses; it returns true only for a lapse
// that the lease rule allows.
func (w *workload) keepLease(id, gen int, nc *nats.Conn) bool {
	key := fmt.Sprintf("life.kept.c%d.%d", id, gen)
	lease, sent, ok := w.grant(nc, keptTTL, fmt.Sprintf("kept-c%d-%d", id, gen))
	if !ok {
		return false
	}
	if ok, gone := w.putOnLease(nc, id, key, lease, sent, keptTTL*time.Second); !ok {
		return gone
	}
	k := &keptLease{key: key, id: lease, done: time.Now(), until: sent.Add(keptTTL * time.Second)}
	w.mu.Lock()
	w.kept = append(w.kept, k)
	w.mu.Unlock()
	renew := time.NewTicker(500 * time.Millisecond)
	defer renew.Stop()
	for {
		select {
		case <-w.stop:
			return false
		case <-renew.C:
		}
		sent := time.Now()
		_, e, err := request(nc, "concord.lease.keepalive", map[string]any{"id": lease}, "", 30*time.Second)
		now := time.Now()
		w.mu.Lock()
		until := k.until
		if err == nil && e == nil {
			k.until = sent.Add(keptTTL * time.Second)
		} else if err == nil && e.Name == schema.ErrLeaseNotFound {
			k.lapsed = now
		}
		w.mu.Unlock()
		switch {
		case err != nil || (e != nil && e.Name != schema.ErrLeaseNotFound):
			w.fail(fmt.Errorf("keepalive %d: %v %v", lease, err, e))
			return false
		case e != nil && now.Before(until):
			w.fail(fmt.Errorf("keepalive %d: %v at %s, %s before the ttl of a keep-alive sent at %s and acknowledged ran out: the lease was lost early",
				lease, e, now.Format(time.StampMilli), until.Sub(now), until.Add(-keptTTL*time.Second).Format(time.StampMilli)))
			return false
		case e != nil:
			w.t.Logf("kept lease %d (%s) lapsed: no keep-alive got through between %s and its ttl's end at %s; found gone at %s",
				lease, key, until.Add(-keptTTL*time.Second).Format(time.StampMilli), until.Format(time.StampMilli), now.Format(time.StampMilli))
			return true
		}
	}
}

// abandonLeases leaves, every second, a short lease with a key to expire.
func (w *workload) abandonLeases(id int, nc *nats.Conn) {
	defer w.wg.Done()
	defer w.abandoning.Add(-1)
	abandon := time.NewTicker(time.Second)
	defer abandon.Stop()
	for n := 0; ; n++ {
		select {
		case <-w.stop:
			return
		case <-abandon.C:
		}
		key := fmt.Sprintf("life.aband.c%d.%d", id, n)
		lease, sent, ok := w.grant(nc, abandonedTTL, fmt.Sprintf("aband-c%d-%d", id, n))
		if !ok {
			return
		}
		if ok, gone := w.putOnLease(nc, id, key, lease, sent, abandonedTTL*time.Second); !ok {
			if gone {
				continue
			}
			return
		}
		w.mu.Lock()
		w.abandoned = append(w.abandoned, abandonedLease{key: key, ttl: abandonedTTL * time.Second, sent: sent, done: time.Now()})
		w.mu.Unlock()
	}
}

// poller reads every lease-attached key every 100 ms, linearizably, until
// the workload stops and, in a poll begun after the last abandoning
// client stopped, every abandoned key is gone.
func (w *workload) poller(nc *nats.Conn) {
	defer w.wg.Done()
	for {
		last := w.stopped() && w.abandoning.Load() == 0 // before the read: it sees every abandoned key's put
		call := time.Now()
		data, e, err := request(nc, "concord.kv.get", map[string]any{"prefix": "life.", "keys_only": true}, "", 30*time.Second)
		if err != nil || e != nil {
			w.fail(fmt.Errorf("poll: %v %v", err, e))
			return
		}
		var g schema.KVGetReply
		if err := json.Unmarshal(data, &g); err != nil {
			w.fail(err)
			return
		}
		w.answered()
		p := poll{call: call, ret: time.Now(), keys: map[string]bool{}}
		for _, kv := range g.KVs {
			p.keys[kv.Key] = true
		}
		w.mu.Lock()
		w.polls = append(w.polls, p)
		aband := strings.Contains(strings.Join(sortedKeys(p.keys), ","), "life.aband.")
		w.mu.Unlock()
		if last && !aband {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sortedKeys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// finish stops the load, waits for it, and checks everything it recorded:
// the history is linearizable, no kept-alive key was missing while an
// acknowledged keep-alive still covered it, and every abandoned key went
// no earlier than its ttl and no later than ttl plus the longest time the
// cluster answered nothing plus a tick and a margin.
func (w *workload) finish() {
	t := w.t
	t.Helper()
	close(w.stop)
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("the workload did not stop")
	}
	if err, _ := w.failed.Load().(error); err != nil {
		t.Fatalf("workload: %v", err)
	}
	// A last read of every register after the load: with the history, the
	// check proves every acknowledged write is still there (or was
	// legitimately overwritten).
	nc := w.c.conn()
	for k := 0; k < registerKeys; k++ {
		key := fmt.Sprintf("reg.k%d", k)
		call := w.hist.Now()
		data, e, err := request(nc, "concord.kv.get", map[string]any{"key": key}, "", 30*time.Second)
		if err != nil || e != nil {
			t.Fatalf("final read of %s: %v %v", key, err, e)
		}
		var g schema.KVGetReply
		mustUnmarshal(t, data, &g)
		out := linearize.Output{}
		if len(g.KVs) == 1 {
			mustUnmarshal(t, g.KVs[0].Value, &out.Value)
		}
		w.hist.Add(1000, linearize.Input{Op: linearize.Get, Key: key}, call, out)
	}
	if err := w.hist.Check(time.Minute, filepath.Join(t.TempDir(), "history.html")); err != nil {
		t.Fatal(err)
	}
	ops, _, _ := w.hist.Counts()
	t.Logf("history of %d operations is linearizable", ops)

	gap := time.Duration(w.maxSilence.Load())
	t.Logf("longest time without an acknowledged write: %s; without any answer: %s", time.Duration(w.maxGap.Load()), gap)
	w.mu.Lock()
	defer w.mu.Unlock()
	// A poll that began after the key's put was acknowledged and returned
	// before the promise ran out read the key while the promise held.
	covered, lapsed := 0, 0
	for _, k := range w.kept {
		if !k.lapsed.IsZero() {
			lapsed++
		}
		for _, p := range w.polls {
			if p.call.Before(k.done) || p.ret.After(k.until) {
				continue
			}
			if !p.keys[k.key] {
				t.Fatalf("kept-alive key %s (lease %d) missing from the poll of %s to %s, before %s: a keep-alive sent %s before that was acknowledged",
					k.key, k.id, p.call.Format(time.StampMilli), p.ret.Format(time.StampMilli), k.until.Format(time.StampMilli), time.Duration(keptTTL)*time.Second)
			}
			covered++
		}
	}
	bound := gap + time.Second + lateMargin
	for _, a := range w.abandoned {
		var lastPresent, firstAbsent *poll
		for i := range w.polls {
			p := &w.polls[i]
			if p.call.Before(a.done) {
				continue
			}
			if p.keys[a.key] {
				lastPresent = p
			} else if firstAbsent == nil {
				firstAbsent = p
			}
		}
		if firstAbsent == nil {
			t.Fatalf("abandoned key %s never expired", a.key)
		}
		if early := a.sent.Add(a.ttl).Sub(firstAbsent.ret); early > 0 {
			t.Fatalf("abandoned key %s was gone %s before its ttl", a.key, early)
		}
		if lastPresent != nil {
			if late := lastPresent.call.Sub(a.done.Add(a.ttl)); late > bound {
				t.Fatalf("abandoned key %s still there %s after its ttl (bound %s)", a.key, late, bound)
			}
		}
	}
	t.Logf("%d abandoned leases expired within bounds; %d kept leases held while their keep-alives covered them (%d lapsed after that), in %d reads of their keys; %d polls",
		len(w.abandoned), len(w.kept), lapsed, covered, len(w.polls))
}
