package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// benchConfig holds the flags of `concord bench`.
type benchConfig struct {
	url            string
	prefix         string
	clients        int
	duration       time.Duration
	valueBytes     int
	keepAliveBatch int
	revokeKeys     int
	expiryLeases   int
	expiryTTL      int64
	// The get-at-revision workload's sizes (bench_revision.go).
	revKeys   int
	revWrites int
	revBack   int
	revPage   int
	revRounds int
	// The keepalive-tenants workload's sizes (bench_tenants.go).
	tenants      int
	tenantLeases int
	// asTenant, when set, makes every request of the throughput
	// workloads one of that tenant (bench_tenants.go).
	asTenant string
	jsonOut  bool
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
	// Extra holds workload-specific figures (leases renewed per second,
	// revoke and expiry timings).
	Extra map[string]float64 `json:"extra,omitempty"`
}

// benchWorkloads is the standard set, in the order it runs by default.
var benchWorkloads = []string{"grant", "put", "keepalive", "keepalive-batch", "get", "get-serializable", "txn", "revoke", "expiry"}

// benchExtraWorkloads run only when named: their setup is large.
var benchExtraWorkloads = []string{"get-at-revision", "keepalive-tenants"}

const benchUsage = `Usage: concord bench [flags] [WORKLOAD...]

Runs each workload in turn (by default all of them, in this order) and prints
one result per workload: requests answered (ops), ops/s, latency percentiles
and failed requests (errors); it exits with status 1 if any workload had
errors. Throughput workloads are closed loops: each of
--clients clients, on its own NATS connection, sends its next request as soon
as the previous one is answered, for --duration.

  grant             P.lease.grant, ttl 600 s
  put               P.kv.put of a key attached to the client's lease
  keepalive         P.lease.keepalive: one lease per request
  keepalive-batch   P.lease.keepalive_many: --keepalive-batch leases per
                    request; ops/s counts requests, extra.leases_per_s the
                    leases renewed
  get               P.kv.get of one key, linearizable (the default read)
  get-serializable  P.kv.get of one key with "serializable": true
  txn               P.kv.txn lock acquire and release, alternating, on a lock
                    per client; a compare that fails counts as an error
  revoke            one lease with --revoke-keys keys: time to the reply and
                    to the last delete event a watcher sees
  expiry            --expiry-leases leases of --expiry-ttl seconds, one key
                    each: how late each delete event arrives after its ttl,
                    and how many come early (an error)

Only when named:

  get-at-revision   reads at a past revision against the same reads at the
                    present: --rev-keys keys under one prefix, then
                    --rev-writes puts round the first --rev-page of them;
                    then a get of one of those keys and a get of the prefix
                    with limit --rev-page, each at the present (rev-key-now,
                    rev-page-now) and --rev-back revisions back
                    (rev-key-past, rev-page-past), every reply checked
                    against the revisions the keys had then. --rev-rounds
                    rounds, present and past alternating which goes first;
                    each read gets --duration in all. Prints the four
                    results, then what was measured and past ÷ present.
                    The keys are on leases of their own, revoked at the end.
  keepalive-tenants --tenants tenants of --tenant-leases leases each (0: the
                    leases of Concord's own account), renewed by
                    keepalive_many requests of --keepalive-batch leases of
                    one tenant each, in turn; extra.leases_per_s. The
                    tenants are named by the Nats-Request-Info header, so
                    connect as a user of Concord's own account.

--url takes several NATS URLs, comma-separated; each connection picks one.

Flags:
`

func runBench(args []string) error {
	var c benchConfig
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), benchUsage); fs.PrintDefaults() }
	fs.StringVar(&c.url, "url", nats.DefaultURL, "NATS URL(s) of the Concord cluster, comma-separated")
	fs.StringVar(&c.prefix, "prefix", subjects.DefaultPrefix, "Concord subject prefix")
	fs.IntVar(&c.clients, "clients", 32, "concurrent clients, each with its own NATS connection")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long each throughput workload runs")
	fs.IntVar(&c.valueBytes, "value-bytes", 64, "size of each value written")
	fs.IntVar(&c.keepAliveBatch, "keepalive-batch", 100, "leases per request of the keepalive-batch workload")
	fs.IntVar(&c.revokeKeys, "revoke-keys", 10000, "keys on the lease the revoke workload revokes")
	fs.IntVar(&c.expiryLeases, "expiry-leases", 1000, "leases the expiry workload lets expire")
	fs.Int64Var(&c.expiryTTL, "expiry-ttl", 2, "ttl in seconds of the expiry workload's leases")
	fs.IntVar(&c.revKeys, "rev-keys", 100_000, "get-at-revision: keys under the prefix")
	fs.IntVar(&c.revWrites, "rev-writes", 20_000, "get-at-revision: puts after the load, round the first --rev-page keys (at least --rev-back)")
	fs.IntVar(&c.revBack, "rev-back", 10_000, "get-at-revision: how many revisions back the past reads read")
	fs.IntVar(&c.revPage, "rev-page", 1000, "get-at-revision: keys of the page read, and the keys the one-key reads take in turn")
	fs.IntVar(&c.revRounds, "rev-rounds", 6, "get-at-revision: rounds, present and past alternating which goes first")
	fs.IntVar(&c.tenants, "tenants", 100, "keepalive-tenants: tenants (0: Concord's own account)")
	fs.StringVar(&c.asTenant, "as-tenant", "", "send every request as this tenant, with the Nats-Request-Info header a NATS server writes across an import (connect as a user of Concord's own account): Concord's cost of a tenant, without the import's")
	fs.IntVar(&c.tenantLeases, "tenant-leases", 1000, "keepalive-tenants: leases of each tenant")
	fs.BoolVar(&c.jsonOut, "json", false, "print one JSON object per workload instead of a table")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	workloads := fs.Args()
	if len(workloads) == 0 {
		workloads = benchWorkloads
	}
	for _, w := range workloads {
		if !isBenchWorkload(w) {
			return fmt.Errorf("unknown workload %q (want one of %s)", w, strings.Join(append(benchWorkloads[:len(benchWorkloads):len(benchWorkloads)], benchExtraWorkloads...), ", "))
		}
	}
	names, err := subjects.New(c.prefix)
	if err != nil {
		return fmt.Errorf("--prefix: %w", err)
	}
	benchAsTenant = c.asTenant
	b := &bencher{cfg: c, names: names, run: fmt.Sprintf("r%d", time.Now().UnixNano()%1e9)}
	if err := b.connect(); err != nil {
		return err
	}
	defer b.close()
	if !c.jsonOut {
		fmt.Printf("%-16s %10s %10s %9s %9s %9s %7s  %s\n", "workload", "ops", "ops/s", "p50 ms", "p99 ms", "p999 ms", "errors", "notes")
	}
	var failed []string
	for _, w := range workloads {
		run, total := b.workload(w)
		p := newTimedProgress(progressOnTerminal(c.jsonOut), w, total)
		results, notes, err := run()
		p.Finish()
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
		for _, r := range results {
			printResult(os.Stdout, r, c.jsonOut)
			if r.Errors > 0 {
				failed = append(failed, fmt.Sprintf("%s (%d)", r.Workload, r.Errors))
			}
		}
		if !c.jsonOut {
			fmt.Print(notes)
		}
	}
	if len(failed) > 0 {
		// Every result is printed; the exit status says they are not clean.
		return fmt.Errorf("errors in %s", strings.Join(failed, ", "))
	}
	return nil
}

// workload returns what runs workload w, and how long it runs: a
// throughput workload for --duration, the others as long as they take
// (-1). It returns the results, and notes to print after them.
func (b *bencher) workload(w string) (run func() ([]benchResult, string, error), total time.Duration) {
	one := func(f func() (benchResult, error)) func() ([]benchResult, string, error) {
		return func() ([]benchResult, string, error) {
			r, err := f()
			return []benchResult{r}, "", err
		}
	}
	switch w {
	case "revoke":
		return one(b.revoke), -1
	case "expiry":
		return one(b.expiry), -1
	case "get-at-revision":
		return b.getAtRevision, -1
	case "keepalive-tenants":
		return one(b.keepAliveTenants), -1
	}
	return one(func() (benchResult, error) { return b.throughput(w) }), b.cfg.duration
}

func (c *benchConfig) check() error {
	switch {
	case c.clients < 1:
		return fmt.Errorf("--clients: %d, want at least 1", c.clients)
	case c.duration <= 0:
		return fmt.Errorf("--duration: %s, want more than 0", c.duration)
	case c.valueBytes < 2:
		return fmt.Errorf("--value-bytes: %d, want at least 2 (a JSON string)", c.valueBytes)
	case c.keepAliveBatch < 1:
		return fmt.Errorf("--keepalive-batch: %d, want at least 1", c.keepAliveBatch)
	case c.revokeKeys < 1:
		return fmt.Errorf("--revoke-keys: %d, want at least 1", c.revokeKeys)
	case c.tenants < 0 || c.tenantLeases < 1:
		return fmt.Errorf("--tenants %d, --tenant-leases %d: want 0 or more tenants of at least 1 lease", c.tenants, c.tenantLeases)
	case c.expiryLeases < 1:
		return fmt.Errorf("--expiry-leases: %d, want at least 1", c.expiryLeases)
	case c.expiryTTL < 1:
		return fmt.Errorf("--expiry-ttl: %d, want at least 1", c.expiryTTL)
	case c.revPage < 1 || c.revPage > schema.MaxListLimit:
		return fmt.Errorf("--rev-page: %d, want 1 to %d (the largest kv.get limit)", c.revPage, schema.MaxListLimit)
	case c.revKeys < c.revPage || c.revKeys > 99_999_999:
		return fmt.Errorf("--rev-keys: %d, want %d (--rev-page) to 99999999", c.revKeys, c.revPage)
	case c.revBack < 1:
		return fmt.Errorf("--rev-back: %d, want at least 1", c.revBack)
	case c.revWrites < c.revBack:
		return fmt.Errorf("--rev-writes: %d, want at least --rev-back (%d), so the past revision comes after the keys were all written", c.revWrites, c.revBack)
	case c.revRounds < 1 || c.duration/time.Duration(c.revRounds) < time.Millisecond:
		return fmt.Errorf("--rev-rounds: %d, want 1 or more, and --duration ÷ rounds at least 1ms", c.revRounds)
	}
	return nil
}

func isBenchWorkload(w string) bool {
	for _, x := range append(benchWorkloads[:len(benchWorkloads):len(benchWorkloads)], benchExtraWorkloads...) {
		if w == x {
			return true
		}
	}
	return false
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
			return fmt.Errorf("connect client %d to %s: %w", i, b.cfg.url, err)
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
// An error reply becomes an error naming the subject, code and description.
func call(nc *nats.Conn, subject string, req any, out any) error {
	return callAs(nc, subject, benchAsTenant, req, out)
}

// callPlain is call of Concord's own account.
func callPlain(nc *nats.Conn, subject string, req any, out any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%s: encode request: %w", subject, err)
	}
	msg, err := nc.Request(subject, data, 5*time.Second)
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	if code := msg.Header.Get(schema.HeaderErrorCode); code != "" {
		return fmt.Errorf("%s: %s %s", subject, code, msg.Header.Get(schema.HeaderError))
	}
	if out != nil {
		if err := schema.DecodeJSON(msg.Data, out); err != nil {
			return fmt.Errorf("%s: decode reply %.200q: %w", subject, msg.Data, err)
		}
	}
	return nil
}

func (b *bencher) value() json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("v", max(b.cfg.valueBytes-2, 0)) + `"`)
}

// perClient runs f once for every client, concurrently, and returns the
// errors, each naming its client.
func (b *bencher) perClient(f func(i int, nc *nats.Conn) error) error {
	errs := make([]error, len(b.conns))
	var wg sync.WaitGroup
	for i, nc := range b.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(i, nc); err != nil {
				errs[i] = fmt.Errorf("client %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
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

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func printResult(w io.Writer, r benchResult, asJSON bool) {
	if asJSON {
		data, _ := json.Marshal(r) // a struct of numbers and strings always encodes
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
	fmt.Fprintf(w, "%-16s %10d %10.0f %9.2f %9.2f %9.2f %7d  %s\n", r.Workload, r.Ops, r.OpsPerS, r.P50ms, r.P99ms, r.P999ms, r.Errors, strings.Join(notes, " "))
}
