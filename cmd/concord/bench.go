package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// benchConfig holds the flags of `concord bench`.
type benchConfig struct {
	url          string
	prefix       string
	clients      int
	duration     time.Duration
	valueBytes   int
	revokeKeys   int
	expiryLeases int
	expiryTTL    int64
	jsonOut      bool
}

// benchResult is one line of output.
type benchResult struct {
	Workload string  `json:"workload"`
	Ops      int64   `json:"ops"`
	OpsPerS  float64 `json:"ops_per_s"`
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
	P999ms   float64 `json:"p999_ms"`
	Errors   int64   `json:"errors"`
	// Extra holds workload-specific figures (revoke and expiry timings).
	Extra map[string]float64 `json:"extra,omitempty"`
}

const benchUsage = `Usage: concord bench [flags] WORKLOAD...

Workloads: grant, put (with a lease), keepalive, get, txn (lock acquire and
release, alternating, on a lock per client), revoke (one lease with
--revoke-keys keys: time to the reply and to the last delete event a watcher
sees), expiry (--expiry-leases leases of --expiry-ttl seconds, one key each:
how late each delete event arrives after its ttl, and how many come early).
`

func runBench(args []string) error {
	var c benchConfig
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), benchUsage); fs.PrintDefaults() }
	fs.StringVar(&c.url, "url", nats.DefaultURL, "NATS URL of the Concord cluster")
	fs.StringVar(&c.prefix, "prefix", subjects.DefaultPrefix, "Concord subject prefix")
	fs.IntVar(&c.clients, "clients", 32, "concurrent clients, each with its own NATS connection")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long each throughput workload runs")
	fs.IntVar(&c.valueBytes, "value-bytes", 64, "size of each value written")
	fs.IntVar(&c.revokeKeys, "revoke-keys", 10000, "keys on the lease the revoke workload revokes")
	fs.IntVar(&c.expiryLeases, "expiry-leases", 1000, "leases the expiry workload lets expire")
	fs.Int64Var(&c.expiryTTL, "expiry-ttl", 2, "ttl in seconds of the expiry workload's leases")
	fs.BoolVar(&c.jsonOut, "json", false, "print one JSON object per workload instead of a table")
	if err := fs.Parse(args); err != nil {
		return err
	}
	workloads := fs.Args()
	if len(workloads) == 0 {
		workloads = []string{"grant", "put", "keepalive", "get", "txn", "revoke", "expiry"}
	}
	names, err := subjects.New(c.prefix)
	if err != nil {
		return err
	}
	b := &bencher{cfg: c, names: names, run: fmt.Sprintf("r%d", time.Now().UnixNano()%1e9)}
	if err := b.connect(); err != nil {
		return err
	}
	defer b.close()
	if !c.jsonOut {
		fmt.Printf("%-10s %10s %10s %9s %9s %9s %7s  %s\n", "workload", "ops", "ops/s", "p50 ms", "p99 ms", "p999 ms", "errors", "notes")
	}
	for _, w := range workloads {
		var r benchResult
		switch w {
		case "grant", "put", "keepalive", "get", "txn":
			r, err = b.throughput(w)
		case "revoke":
			r, err = b.revoke()
		case "expiry":
			r, err = b.expiry()
		default:
			return fmt.Errorf("unknown workload %q", w)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
		printResult(os.Stdout, r, c.jsonOut)
	}
	return nil
}

type bencher struct {
	cfg   benchConfig
	names subjects.Names
	run   string // distinguishes this run's keys from earlier runs'
	conns []*nats.Conn
}

func (b *bencher) connect() error {
	for i := 0; i < b.cfg.clients; i++ {
		nc, err := nats.Connect(b.cfg.url, nats.Name(fmt.Sprintf("concord-bench-%d", i)))
		if err != nil {
			b.close()
			return fmt.Errorf("connect %s: %w", b.cfg.url, err)
		}
		b.conns = append(b.conns, nc)
	}
	return nil
}

func (b *bencher) close() {
	for _, nc := range b.conns {
		nc.Close()
	}
}

// call sends one request and decodes the reply into out (which may be nil).
func call(nc *nats.Conn, subject string, req any, out any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	msg, err := nc.Request(subject, data, 5*time.Second)
	if err != nil {
		return err
	}
	if code := msg.Header.Get(schema.HeaderErrorCode); code != "" {
		return fmt.Errorf("%s: %s %s", subject, code, msg.Header.Get(schema.HeaderError))
	}
	if out != nil {
		return json.Unmarshal(msg.Data, out)
	}
	return nil
}

func (b *bencher) value() json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("v", max(b.cfg.valueBytes-2, 0)) + `"`)
}

// throughput runs one closed-loop workload: every client sends its next
// request as soon as the previous one is answered.
func (b *bencher) throughput(w string) (benchResult, error) {
	type clientState struct {
		lease int64
		lat   []time.Duration
		errs  int64
	}
	states := make([]*clientState, len(b.conns))
	value := b.value()
	// Setup outside the timed loop: one lease per client for put and
	// keepalive, and keys to read for get.
	for i, nc := range b.conns {
		st := &clientState{}
		states[i] = st
		if w == "put" || w == "keepalive" || w == "get" || w == "txn" {
			var g schema.LeaseGrantReply
			if err := call(nc, b.names.Request(subjects.LeaseGrant), schema.LeaseGrantRequest{TTL: 600}, &g); err != nil {
				return benchResult{}, fmt.Errorf("setup grant: %w", err)
			}
			st.lease = g.ID
		}
		if w == "get" {
			for k := 0; k < 100; k++ {
				key := fmt.Sprintf("bench.%s.get.%d.%d", b.run, i, k)
				if err := call(nc, b.names.Request(subjects.KVPut), map[string]any{"key": key, "value": value, "lease": st.lease}, nil); err != nil {
					return benchResult{}, fmt.Errorf("setup put: %w", err)
				}
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.duration)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for i, nc := range b.conns {
		wg.Add(1)
		go func(i int, nc *nats.Conn, st *clientState) {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				var subject string
				var req any
				switch w {
				case "grant":
					subject, req = b.names.Request(subjects.LeaseGrant), schema.LeaseGrantRequest{TTL: 600}
				case "put":
					key := fmt.Sprintf("bench.%s.put.%d.%d", b.run, i, n%1000)
					subject, req = b.names.Request(subjects.KVPut), map[string]any{"key": key, "value": value, "lease": st.lease}
				case "keepalive":
					subject, req = b.names.Request(subjects.LeaseKeepAlive), schema.LeaseKeepAliveRequest{ID: st.lease}
				case "get":
					key := fmt.Sprintf("bench.%s.get.%d.%d", b.run, i, n%100)
					subject, req = b.names.Request(subjects.KVGet), map[string]any{"key": key}
				case "txn":
					subject, req = b.names.Request(subjects.KVTxn), lockTxn(fmt.Sprintf("bench.%s.lock.%d", b.run, i), st.lease, n%2 == 0)
				}
				t0 := time.Now()
				if err := call(nc, subject, req, nil); err != nil {
					if ctx.Err() == nil {
						st.errs++
					}
					continue
				}
				st.lat = append(st.lat, time.Since(t0))
			}
		}(i, nc, states[i])
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	var errs int64
	for _, st := range states {
		all = append(all, st.lat...)
		errs += st.errs
	}
	r := summarize(w, all, elapsed)
	r.Errors = errs
	return r, nil
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

func summarize(w string, lat []time.Duration, elapsed time.Duration) benchResult {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r := benchResult{Workload: w, Ops: int64(len(lat)), OpsPerS: float64(len(lat)) / elapsed.Seconds()}
	r.P50ms, r.P99ms, r.P999ms = pct(lat, 0.5), pct(lat, 0.99), pct(lat, 0.999)
	return r
}

func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * q)
	return float64(sorted[i]) / float64(time.Millisecond)
}

// spread runs f for k = 0..n-1, spread over all clients, and returns the
// first error.
func (b *bencher) spread(n int, f func(nc *nats.Conn, k int) error) error {
	var wg sync.WaitGroup
	var failed atomic.Value
	for c, nc := range b.conns {
		wg.Add(1)
		go func(c int, nc *nats.Conn) {
			defer wg.Done()
			for k := c; k < n; k += len(b.conns) {
				if err := f(nc, k); err != nil {
					failed.Store(err)
					return
				}
			}
		}(c, nc)
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return err
	}
	return nil
}

// putMany attaches n keys to lease, spread over all clients.
func (b *bencher) putMany(keyPrefix string, n int, lease int64) error {
	value := b.value()
	return b.spread(n, func(nc *nats.Conn, k int) error {
		req := map[string]any{"key": fmt.Sprintf("%s%06d", keyPrefix, k), "value": value, "lease": lease}
		return call(nc, b.names.Request(subjects.KVPut), req, nil)
	})
}

// revoke measures revoking one lease with many keys: the time to the reply,
// and to the last delete event seen by a watcher of the keys.
func (b *bencher) revoke() (benchResult, error) {
	nc := b.conns[0]
	keyPrefix := fmt.Sprintf("bench.%s.revoke.", b.run)
	var g schema.LeaseGrantReply
	if err := call(nc, b.names.Request(subjects.LeaseGrant), schema.LeaseGrantRequest{TTL: 600}, &g); err != nil {
		return benchResult{}, err
	}
	if err := b.putMany(keyPrefix, b.cfg.revokeKeys, g.ID); err != nil {
		return benchResult{}, err
	}
	watcher, err := nats.Connect(b.cfg.url)
	if err != nil {
		return benchResult{}, err
	}
	defer watcher.Close()
	var deletes atomic.Int64
	done := make(chan time.Time, 1)
	first := make(chan time.Time, 1)
	sub, err := watcher.Subscribe(b.names.Watch(keyPrefix+">"), func(m *nats.Msg) {
		if m.Header.Get(schema.HeaderOperation) != schema.OperationDelete {
			return
		}
		switch deletes.Add(1) {
		case 1:
			first <- time.Now()
		case int64(b.cfg.revokeKeys):
			done <- time.Now()
		}
	})
	if err != nil {
		return benchResult{}, err
	}
	sub.SetPendingLimits(-1, -1)
	if err := watcher.Flush(); err != nil {
		return benchResult{}, err
	}
	t0 := time.Now()
	var rr schema.LeaseRevokeReply
	if err := call(nc, b.names.Request(subjects.LeaseRevoke), schema.LeaseRevokeRequest{ID: g.ID}, &rr); err != nil {
		return benchResult{}, err
	}
	replyAfter := time.Since(t0)
	r := benchResult{Workload: "revoke", Ops: 1, Extra: map[string]float64{"keys": float64(rr.Deleted), "reply_ms": ms(replyAfter)}}
	select {
	case last := <-done:
		r.Extra["first_event_ms"] = ms((<-first).Sub(t0))
		r.Extra["last_event_ms"] = ms(last.Sub(t0))
	case <-time.After(30 * time.Second):
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
	watcher, err := nats.Connect(b.cfg.url)
	if err != nil {
		return benchResult{}, err
	}
	defer watcher.Close()
	var mu sync.Mutex
	seen := make(map[string]time.Time, n)
	all := make(chan struct{})
	sub, err := watcher.Subscribe(b.names.Watch(keyPrefix+">"), func(m *nats.Msg) {
		if m.Header.Get(schema.HeaderOperation) != schema.OperationDelete {
			return
		}
		now := time.Now()
		key := strings.TrimPrefix(m.Subject, b.names.Watch(""))
		mu.Lock()
		seen[key] = now
		if len(seen) == n {
			close(all)
		}
		mu.Unlock()
	})
	if err != nil {
		return benchResult{}, err
	}
	sub.SetPendingLimits(-1, -1)
	if err := watcher.Flush(); err != nil {
		return benchResult{}, err
	}
	sent := make([]time.Time, n)
	err = b.spread(n, func(nc *nats.Conn, k int) error {
		sent[k] = time.Now()
		var g schema.LeaseGrantReply
		if err := call(nc, b.names.Request(subjects.LeaseGrant), schema.LeaseGrantRequest{TTL: b.cfg.expiryTTL}, &g); err != nil {
			return err
		}
		req := map[string]any{"key": fmt.Sprintf("%s%06d", keyPrefix, k), "value": 1, "lease": g.ID}
		return call(nc, b.names.Request(subjects.KVPut), req, nil)
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
	if early > 0 || len(late) < n {
		r.Errors = early + int64(n-len(late))
	}
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func printResult(w io.Writer, r benchResult, asJSON bool) {
	if asJSON {
		data, _ := json.Marshal(r)
		fmt.Fprintln(w, string(data))
		return
	}
	var notes []string
	keys := make([]string, 0, len(r.Extra))
	for k := range r.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		notes = append(notes, fmt.Sprintf("%s=%.1f", k, r.Extra[k]))
	}
	fmt.Fprintf(w, "%-10s %10d %10.0f %9.2f %9.2f %9.2f %7d  %s\n", r.Workload, r.Ops, r.OpsPerS, r.P50ms, r.P99ms, r.P999ms, r.Errors, strings.Join(notes, " "))
}
