package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
)

// regInput and regOutput are operations on one register key: put, get, and
// a compare-and-swap done with a transaction.
type regInput struct {
	Kind, Key, Value, From, To string
}

type regOutput struct {
	Value string // "" when absent
	OK    bool   // a cas that swapped
}

// registerModel is the sequential specification the history must match: a
// map of independent registers, so the check partitions by key.
var registerModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(regInput).Key
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(string), input.(regInput), output.(regOutput)
		switch in.Kind {
		case "put":
			return true, in.Value
		case "get":
			return out.Value == st, st
		case "cas":
			if st == in.From {
				return out.OK, in.To
			}
			return !out.OK, st
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		switch in.Kind {
		case "put":
			return fmt.Sprintf("put(%s,%s)", in.Key, in.Value)
		case "get":
			return fmt.Sprintf("get(%s)->%q", in.Key, out.Value)
		}
		return fmt.Sprintf("cas(%s,%q->%q)->%v", in.Key, in.From, in.To, out.OK)
	},
}

// history records operations with their call and return times.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(client int, in regInput, call int64, out regOutput) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: h.now()})
}

// check fails the test unless the history is linearizable.
func (h *history) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	res, _ := porcupine.CheckOperationsVerbose(registerModel, ops, time.Minute)
	switch res {
	case porcupine.Ok:
		t.Logf("history of %d operations is linearizable", len(ops))
	case porcupine.Illegal:
		t.Fatalf("history of %d operations is NOT linearizable", len(ops))
	default:
		t.Fatalf("linearizability check of %d operations inconclusive: %s", len(ops), res)
	}
}

// errRetriesExhausted means a request found no leader for the whole retry
// window: the cluster did not recover in time.
var errRetriesExhausted = errors.New("no answer within the retry window")

// request sends a request until it gets an answer that is not retryable:
// timeouts, no responders and 503s are retried, as clients are told to.
// Mutating requests carry an idempotency key so that retries apply once.
func request(nc *nats.Conn, subject string, body any, idemKey string, window time.Duration) ([]byte, *schema.Error, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, nil, err
	}
	deadline := time.Now().Add(window)
	for time.Now().Before(deadline) {
		msg := nats.NewMsg(subject)
		msg.Data = data
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
// leases kept alive (whose keys must never go), and abandoned leases
// (whose keys must go, not before their ttl and not long after it).
type workload struct {
	t      *testing.T
	c      *cluster
	hist   *history
	stop   chan struct{}
	wg     sync.WaitGroup
	failed atomic.Value

	mu        sync.Mutex
	abandoned []abandonedLease
	keptKeys  []string
	// lastWrite is when the latest write was acknowledged, for measuring
	// how long the cluster was without a leader.
	lastWrite atomic.Int64
	maxGap    atomic.Int64
	polls     []poll
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
	w := &workload{t: t, c: c, hist: &history{start: time.Now()}, stop: make(chan struct{})}
	w.lastWrite.Store(time.Now().UnixNano())
	for i := 0; i < clients; i++ {
		nc := c.conn()
		w.wg.Add(2)
		go w.registers(i, nc)
		go w.leases(i, nc)
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
}

func (w *workload) registers(id int, nc *nats.Conn) {
	defer w.wg.Done()
	r := rand.New(rand.NewPCG(uint64(id), 7))
	seen := map[string]string{}
	for seq := 0; !w.stopped(); seq++ {
		key := fmt.Sprintf("reg.k%d", r.IntN(registerKeys))
		call := w.hist.now()
		switch p := r.IntN(10); {
		case p < 4:
			val := fmt.Sprintf("c%d-%d", id, seq)
			_, e, err := request(nc, "concord.kv.put", map[string]any{"key": key, "value": val}, fmt.Sprintf("reg-c%d-%d", id, seq), 30*time.Second)
			if err != nil || e != nil {
				w.fail(fmt.Errorf("put %s: %v %v", key, err, e))
				return
			}
			w.wrote()
			w.hist.add(id, regInput{Kind: "put", Key: key, Value: val}, call, regOutput{})
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
			out := regOutput{}
			if len(g.KVs) == 1 {
				if err := json.Unmarshal(g.KVs[0].Value, &out.Value); err != nil {
					w.fail(err)
					return
				}
			}
			seen[key] = out.Value
			w.hist.add(id, regInput{Kind: "get", Key: key}, call, out)
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
			w.hist.add(id, regInput{Kind: "cas", Key: key, From: from, To: to}, call, regOutput{OK: tr.Succeeded})
		}
	}
}

// leases keeps one lease alive with a key on it, and every second leaves
// a short lease with a key to expire.
func (w *workload) leases(id int, nc *nats.Conn) {
	defer w.wg.Done()
	grant := func(ttl int64, idem string) (int64, time.Time, bool) {
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
	put := func(key string, lease int64) bool {
		_, e, err := request(nc, "concord.kv.put", map[string]any{"key": key, "value": id, "lease": lease}, "put-"+key, 30*time.Second)
		if err != nil || e != nil {
			w.fail(fmt.Errorf("put %s: %v %v", key, err, e))
			return false
		}
		w.wrote()
		return true
	}
	kept, _, ok := grant(keptTTL, fmt.Sprintf("kept-c%d", id))
	keptKey := fmt.Sprintf("life.kept.c%d", id)
	if !ok || !put(keptKey, kept) {
		return
	}
	w.mu.Lock()
	w.keptKeys = append(w.keptKeys, keptKey)
	w.mu.Unlock()
	renew := time.NewTicker(500 * time.Millisecond)
	defer renew.Stop()
	abandon := time.NewTicker(time.Second)
	defer abandon.Stop()
	for n := 0; ; {
		select {
		case <-w.stop:
			return
		case <-renew.C:
			if _, e, err := request(nc, "concord.lease.keepalive", map[string]any{"id": kept}, "", 30*time.Second); err != nil || e != nil {
				w.fail(fmt.Errorf("keepalive %d: %v %v", kept, err, e))
				return
			}
		case <-abandon.C:
			key := fmt.Sprintf("life.aband.c%d.%d", id, n)
			lease, sent, ok := grant(abandonedTTL, fmt.Sprintf("aband-c%d-%d", id, n))
			if !ok || !put(key, lease) {
				return
			}
			w.mu.Lock()
			w.abandoned = append(w.abandoned, abandonedLease{key: key, ttl: abandonedTTL * time.Second, sent: sent, done: time.Now()})
			w.mu.Unlock()
			n++
		}
	}
}

// poller reads every lease-attached key every 100 ms, linearizably, until
// the workload stops and every abandoned key is gone.
func (w *workload) poller(nc *nats.Conn) {
	defer w.wg.Done()
	for {
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
		p := poll{call: call, ret: time.Now(), keys: map[string]bool{}}
		for _, kv := range g.KVs {
			p.keys[kv.Key] = true
		}
		w.mu.Lock()
		w.polls = append(w.polls, p)
		aband := strings.Contains(strings.Join(sortedKeys(p.keys), ","), "life.aband.")
		w.mu.Unlock()
		if w.stopped() && !aband {
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
// the history is linearizable, no kept-alive key ever disappeared, and
// every abandoned key went no earlier than its ttl and no later than ttl
// plus the longest leaderless gap plus a tick and a margin.
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
		call := w.hist.now()
		data, e, err := request(nc, "concord.kv.get", map[string]any{"key": key}, "", 30*time.Second)
		if err != nil || e != nil {
			t.Fatalf("final read of %s: %v %v", key, err, e)
		}
		var g schema.KVGetReply
		mustUnmarshal(t, data, &g)
		out := regOutput{}
		if len(g.KVs) == 1 {
			mustUnmarshal(t, g.KVs[0].Value, &out.Value)
		}
		w.hist.add(1000, regInput{Kind: "get", Key: key}, call, out)
	}
	w.hist.check(t)

	gap := time.Duration(w.maxGap.Load())
	t.Logf("longest time without an acknowledged write: %s", gap)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, key := range w.keptKeys {
		seen := false
		for _, p := range w.polls {
			if p.keys[key] {
				seen = true
			} else if seen {
				t.Fatalf("kept-alive key %s vanished in the poll at %s", key, p.call.Format(time.StampMilli))
			}
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
	t.Logf("%d abandoned leases expired within bounds; %d kept leases survived; %d polls", len(w.abandoned), len(w.keptKeys), len(w.polls))
}
