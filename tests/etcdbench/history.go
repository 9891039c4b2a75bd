package main

// `etcdbench history`: put throughput with the key history kept against
// the same server keeping as little of it as it can, in alternate rounds
// of one run (issue 15's scale bar: "put throughput with history on stays
// within 10% of today's"). `make bench-history` builds and runs it.
//
// The history cannot be turned off: every change enters it, and the
// retention limits decide how long it stays. The least a server keeps is
// one revision (--history-revisions 1; 0 is refused and the state machine
// would read it as the default), so "minimal" still records every put and
// drops it at the next: what this measures is the cost of keeping the
// history, beside the cost of recording it that both servers pay. To
// measure against a build from before the history, --baseline runs that
// binary as the second server instead, with its own defaults.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// historyConfig holds the flags of `etcdbench history`.
type historyConfig struct {
	concord  string
	baseline string // another concord binary as the second server, or ""
	minimal  int64  // --history-revisions of the second server
	// fill is the revision both servers are brought to before the rounds,
	// so that the default server's history is full from the first round.
	fill int64
	roundFlags
	jsonFile string
}

const historyUsage = `Usage: etcdbench history [flags]

Put throughput with the key history kept (the default retention) against
the same concord binary keeping as little as it accepts (--history-revisions
1 by default), in alternate rounds of one run: two fresh single Concord
nodes, each with its own embedded NATS and data directory, both up for the
whole run. First, puts bring both to revision --fill (the default
retention), so that the default server's history is full (each put then
also compacts the oldest revision, as on a node that has run a while).
Then, in each round, the same closed-loop put workload (as etcdbench's
put: --clients clients, each on its own connection with one request in
flight, a key on the client's lease, 1,000 keys per client) runs against
one and then the other, which goes first alternating. Prints each round's
ops/s, p50 and p99 for both, the medians, and default ÷ minimal (the
median of the per-round ratios); then each server's revision, history
floor and resident memory after the rounds.

--baseline PATH runs that concord binary (a build from before the key
history, say) as the second server instead, with its default flags.

Needs the concord binary (make build); not etcd. Every server is stopped at
the end, on failure or Ctrl-C too.

Flags:
`

func parseHistoryFlags(args []string) (*historyConfig, error) {
	cfg := &historyConfig{}
	fs := flag.NewFlagSet("etcdbench history", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), historyUsage); fs.PrintDefaults() }
	fs.StringVar(&cfg.concord, "concord", "bin/concord", "the concord binary (make build puts it in bin/)")
	fs.StringVar(&cfg.baseline, "baseline", "", "a concord binary to run as the second server, with its defaults, instead of --concord with --history-revisions --minimal-revisions")
	fs.Int64Var(&cfg.minimal, "minimal-revisions", 1, "--history-revisions of the second server (the least concord serve accepts is 1)")
	fs.Int64Var(&cfg.fill, "fill", schema.DefaultHistoryRevisions, "before the rounds, put to both servers until each is at this revision, so that the default server measures with its history full (the default retention); 0 starts the rounds at once")
	cfg.roundFlags.add(fs, "measurement window of each round on each server", 6, "rounds; each measures both servers, which goes first alternating")
	fs.StringVar(&cfg.jsonFile, "json-file", "", "also write every round and the medians as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.fill < 0 {
		return nil, fmt.Errorf("--fill: %d, want a revision, or 0 for none", cfg.fill)
	}
	if cfg.minimal < 1 {
		return nil, fmt.Errorf("--minimal-revisions: %d, want at least 1 (concord serve refuses less)", cfg.minimal)
	}
	if err := cfg.roundFlags.check(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// historyServer is one of the two servers: how it was started and what
// it measured.
type historyServer struct {
	Name    string   `json:"name"` // "default", "minimal" or "baseline"
	Binary  string   `json:"binary"`
	Version string   `json:"version"`
	Args    []string `json:"extra_args"` // beyond the flags both share
	Rounds  []result `json:"rounds"`
	Median  *stats   `json:"median"`
	// FilledIn is how long the fill before the rounds took, in seconds.
	FilledIn float64 `json:"fill_s,omitempty"`
	// After the rounds: the revision, the history's floor (the oldest
	// revision a read may ask for) and the resident memory.
	Revision        int64 `json:"revision_after"`
	CompactRevision int64 `json:"compact_revision_after"`
	RSSBytes        int64 `json:"rss_bytes_after"`

	s    *servers
	load *concordLoad
	ops  []opFunc
}

// historyReport is the whole run.
type historyReport struct {
	Date      string           `json:"date"`
	Machine   machine          `json:"machine"`
	Elapsed   float64          `json:"elapsed_s"`
	Clients   int              `json:"clients"`
	DurationS float64          `json:"duration_s"`
	WarmupS   float64          `json:"warmup_s"`
	Rounds    int              `json:"rounds"`
	Fill      int64            `json:"fill_revision"`
	Order     [][]string       `json:"order_by_round"`
	Servers   []*historyServer `json:"servers"`
	// Ratios are default ÷ second server, per round; the medians of
	// them are OpsRatio and P99Ratio.
	OpsRatios []float64 `json:"ops_ratio_by_round"`
	P99Ratios []float64 `json:"p99_ratio_by_round"`
	OpsRatio  float64   `json:"ops_ratio"`
	P99Ratio  float64   `json:"p99_ratio"`
	errors    int64
}

func runHistory(ctx context.Context, args []string) (err error) {
	cfg, err := parseHistoryFlags(args)
	if err != nil {
		return err
	}
	bin := &config{concord: cfg.concord, onlyConcord: true}
	if err := bin.findBinaries(); err != nil {
		return err
	}
	second := &historyServer{Name: "minimal", Binary: bin.concord, Args: []string{"--history-revisions", strconv.FormatInt(cfg.minimal, 10)}}
	if cfg.baseline != "" {
		b := &config{concord: cfg.baseline, onlyConcord: true}
		if err := b.findBinaries(); err != nil {
			return fmt.Errorf("--baseline: %w", err)
		}
		second = &historyServer{Name: "baseline", Binary: b.concord}
	}
	servers := []*historyServer{{Name: "default", Binary: bin.concord}, second}
	root, err := os.MkdirTemp("", "etcdbench-history-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	defer func() {
		for _, hs := range servers {
			if hs.load != nil {
				hs.load.close()
			}
			err = errors.Join(err, hs.s.stop())
		}
	}()

	started := time.Now()
	rep := &historyReport{Date: started.UTC().Format("2006-01-02 15:04 UTC"), Machine: readMachine(), Clients: cfg.clients,
		DurationS: cfg.duration.Seconds(), WarmupS: cfg.warmup.Seconds(), Rounds: cfg.rounds, Fill: cfg.fill, Servers: servers}
	lcfg := &config{roundFlags: roundFlags{clients: cfg.clients, valueBytes: cfg.valueBytes}}
	pp := &ports{}
	for _, hs := range servers {
		hs.Version = toolVersion(hs.Binary, "version")
		dir := filepath.Join(root, hs.Name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		logf("history: starting the %s server", hs.Name)
		hs.s, err = startConcord(ctx, &config{concord: hs.Binary, concordArgs: hs.Args}, pp, dir, 1)
		if err != nil {
			return fmt.Errorf("%s server: %w", hs.Name, err)
		}
		if hs.load, err = newConcordLoad(lcfg, hs.s.urls); err != nil {
			return fmt.Errorf("%s server: %w", hs.Name, err)
		}
		if hs.ops, err = hs.load.setup(ctx, "put"); err != nil {
			return fmt.Errorf("%s server: put: setup: %w", hs.Name, err)
		}
	}

	names, _ := subjects.New(subjects.DefaultPrefix) // the default prefix is valid
	for _, hs := range servers {
		if cfg.fill == 0 {
			break
		}
		logf("history: filling the %s server to revision %d", hs.Name, cfg.fill)
		t0 := time.Now()
		if err := fill(ctx, hs.ops, func(ctx context.Context) (int64, error) {
			st, err := concordStatus(ctx, hs.s.urls[0], names)
			return st.Revision, err
		}, cfg.fill); err != nil {
			return fmt.Errorf("%s server: fill: %w", hs.Name, err)
		}
		hs.FilledIn = time.Since(t0).Seconds()
	}

	mcfg := &config{roundFlags: roundFlags{warmup: cfg.warmup, duration: cfg.duration}, cores: runtime.NumCPU()}
	for r := 1; r <= cfg.rounds; r++ {
		order := []*historyServer{servers[0], servers[1]}
		if r%2 == 0 {
			order = []*historyServer{servers[1], servers[0]}
		}
		rep.Order = append(rep.Order, []string{order[0].Name, order[1].Name})
		for _, hs := range order {
			logf("history: round %d of %d: %s", r, cfg.rounds, hs.Name)
			res, err := measure(ctx, mcfg, hs.Name, "put", hs.ops, hs.s.procs)
			if err != nil {
				return fmt.Errorf("round %d, %s server: %w", r, hs.Name, err)
			}
			if err := hs.s.alive(); err != nil {
				return err
			}
			rep.errors += res.Errors
			hs.Rounds = append(hs.Rounds, res)
		}
		a, b := servers[0].Rounds[r-1], servers[1].Rounds[r-1]
		rep.OpsRatios = append(rep.OpsRatios, ratioOr0(a.OpsPerS, b.OpsPerS))
		rep.P99Ratios = append(rep.P99Ratios, ratioOr0(a.P99ms, b.P99ms))
	}
	rep.OpsRatio, rep.P99Ratio = median(rep.OpsRatios), median(rep.P99Ratios)

	for _, hs := range servers {
		hs.Median = medianOf(hs.Rounds)
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := concordStatus(sctx, hs.s.urls[0], names)
		cancel()
		if err != nil {
			return fmt.Errorf("%s server: status: %w", hs.Name, err)
		}
		hs.Revision, hs.CompactRevision = st.Revision, st.CompactRevision
		if hs.RSSBytes, _, err = vmRSS(strconv.Itoa(hs.s.procs[0].pid())); err != nil {
			return fmt.Errorf("%s server: %w", hs.Name, err)
		}
	}
	rep.Elapsed = time.Since(started).Seconds()
	if cfg.jsonFile != "" {
		doc, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(cfg.jsonFile, append(doc, '\n'), 0o644); err != nil {
			return fmt.Errorf("--json-file: %w", err)
		}
	}
	rep.print(os.Stdout, cfg)
	if rep.errors > 0 {
		return errFailedRequests
	}
	return nil
}

// fill runs ops, each in a closed loop of its own, until revision says the
// server is at target or beyond (asked every 2,000 requests, and before
// the first), and returns the first error a request or revision gave.
func fill(ctx context.Context, ops []opFunc, revision func(context.Context) (int64, error), target int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		sent  atomic.Int64
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	check := func() bool {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		rev, err := revision(rctx)
		if err != nil {
			fail(fmt.Errorf("revision: %w", err))
			return true
		}
		if rev >= target {
			cancel()
			return true
		}
		return false
	}
	if check() {
		return first
	}
	for _, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				if err := op(ctx, n); err != nil {
					if ctx.Err() == nil {
						fail(err)
					}
					return
				}
				if sent.Add(1)%2000 == 0 && check() {
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// ratioOr0 is a ÷ b, or 0 when b is 0.
func ratioOr0(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// describe says how a server was started, beyond the flags both share.
func (hs *historyServer) describe() string {
	switch {
	case hs.Name == "baseline":
		return fmt.Sprintf("%s (concord %s), default flags", hs.Binary, hs.Version)
	case len(hs.Args) == 0:
		return fmt.Sprintf("default retention (the last %s revisions, none older than %s)",
			thousands(schema.DefaultHistoryRevisions), schema.DefaultHistoryAge)
	default:
		return strings.Join(hs.Args, " ")
	}
}

// print writes the rounds, the medians, the ratio and the servers' state
// after the rounds, with the machine and the date.
func (rep *historyReport) print(w io.Writer, cfg *historyConfig) {
	a, b := rep.Servers[0], rep.Servers[1]
	m := rep.Machine
	fmt.Fprintf(w, "Put throughput with the key history kept (%s) against %s (%s), on %s; the run took %s\n",
		a.Name, b.Name, b.describe(), rep.Date, (time.Duration(rep.Elapsed * float64(time.Second))).Round(time.Second))
	fmt.Fprintf(w, "machine: %d × %s, %d GiB, Linux %s; load average %s when the run began\n", m.Cores, m.CPU, m.MemGiB, m.Kernel, m.LoadAvg1)
	fmt.Fprintf(w, "concord %s (%s); %s: %s\n", a.Version, a.Binary, a.Name, a.describe())
	fmt.Fprintf(w, "two fresh single nodes, each with its own embedded NATS and data directory, both up for the whole run; in each of %d rounds\n"+
		"%d closed-loop clients (one connection and one request in flight each) put a key on their lease (%d-byte values, 1,000 keys\n"+
		"per client), %s warm-up then %s measured, against one server and then the other, which goes first alternating.\n\n",
		rep.Rounds, rep.Clients, cfg.valueBytes, cfg.warmup, cfg.duration)
	if rep.Fill > 0 {
		fmt.Fprintf(w, "Before the rounds, the same puts brought each server to revision %s (%s: %.0f s, %s: %.0f s), so that the\n"+
			"default server's history was full (its retention reached) in every round.\n\n",
			thousands(float64(rep.Fill)), a.Name, a.FilledIn, b.Name, b.FilledIn)
	}
	fmt.Fprintf(w, "%-6s %-9s %14s %9s %9s %14s %9s %9s %10s %10s\n", "round", "first",
		a.Name+" ops/s", "p50 ms", "p99 ms", b.Name+" ops/s", "p50 ms", "p99 ms", "ops/s ÷", "p99 ÷")
	for i := range rep.OpsRatios {
		x, y := a.Rounds[i], b.Rounds[i]
		fmt.Fprintf(w, "%-6d %-9s %14s %9.2f %9.2f %14s %9.2f %9.2f %10.3f %10.3f\n", i+1, rep.Order[i][0],
			thousands(x.OpsPerS), x.P50ms, x.P99ms, thousands(y.OpsPerS), y.P50ms, y.P99ms, rep.OpsRatios[i], rep.P99Ratios[i])
	}
	fmt.Fprintf(w, "%-6s %-9s %14s %9.2f %9.2f %14s %9.2f %9.2f %10.3f %10.3f\n", "median", "",
		thousands(a.Median.OpsPerS), a.Median.P50ms, a.Median.P99ms, thousands(b.Median.OpsPerS), b.Median.P50ms, b.Median.P99ms, rep.OpsRatio, rep.P99Ratio)
	fmt.Fprintf(w, "\nops/s ÷ and p99 ÷: %s ÷ %s in the round; their median is the median of the rounds' ratios.\n", a.Name, b.Name)
	fmt.Fprintf(w, "issue 15's bar: put throughput with the history kept within 10%% of the other, an ops/s ratio of 0.90 or more: %.3f.\n", rep.OpsRatio)
	fmt.Fprintln(w, "after the rounds:")
	for _, hs := range rep.Servers {
		kept := hs.Revision - hs.CompactRevision
		floor := fmt.Sprintf("history floor %d (the last %s revisions kept)", hs.CompactRevision, thousands(float64(kept)))
		if kept == 1 {
			floor = fmt.Sprintf("history floor %d (the last revision kept)", hs.CompactRevision)
		}
		if hs.Name == "baseline" && hs.CompactRevision == 0 {
			floor = "no history floor reported"
		}
		fmt.Fprintf(w, "  %-8s revision %d, %s, resident memory %s; server CPU %.0f µs per put (median); %d failed requests\n",
			hs.Name, hs.Revision, floor, mib(float64(hs.RSSBytes)), hs.Median.ServerCPUus, hs.Median.Errors)
	}
	if b.Name == "minimal" {
		fmt.Fprintf(w, "the minimal server still records every put in its history and drops it at the next revision: this measures the\n"+
			"cost of keeping the history, not of recording it (no build of concord runs without it; --baseline runs an older one).\n")
	}
}
