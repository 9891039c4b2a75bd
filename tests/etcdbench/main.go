// Command etcdbench compares Concord with etcd on this machine in one run.
//
// For each topology (one Concord node against one etcd member, three
// against three, all on loopback with fresh data directories) and for each
// of --rounds rounds, it starts a fresh Concord and a fresh etcd in turn,
// the first of the two alternating from round to round, and runs the same
// closed-loop workloads against each: --clients clients, each on its own
// connection with one request in flight, --warmup then --duration. It
// reads the servers' CPU time from /proc at the edges of each measurement
// window. In each Concord round it also starts a trivial NATS responder on
// the same bus, which sends every request back unchanged, and runs the
// keep-alive request against it: the floor that any NATS-fronted service
// sits on. It prints medians over the rounds.
//
// The load for both systems comes from this one program, so the loop,
// timing and counting are the same code; it lives in its own module so
// etcd's client does not enter Concord's dependencies. `make bench-etcd`
// builds and runs it.
//
// `etcdbench scale` (scale.go) compares them at scale instead: a million
// keys, restart, memory, disk, reads beside writes, a hundred thousand
// leases; `make bench-scale` builds and runs it. `etcdbench history`
// (history.go) measures Concord alone: puts with the key history kept
// against kept to the minimum; `make bench-history` builds and runs it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

// config holds the flags.
type config struct {
	concord string
	etcd    string
	roundFlags
	workloads   []string
	topologies  []topology
	onlyConcord bool
	jsonOut     bool
	markdown    bool
	jsonFile    string
	cores       int
	// concordArgs are added to every `concord serve` (etcdbench history:
	// the retention of one of its two servers); metrics gives every node
	// an operator listener (etcdbench scale: the snapshot metrics).
	concordArgs []string
	metrics     bool
	// helperPIDs are this program's own other processes running beside a
	// measurement (the scale phase's readers): their CPU time counts as
	// the client's.
	helperPIDs []int
}

// topology is a number of Concord nodes set against as many etcd members.
type topology struct {
	Name  string `json:"name"`
	Nodes int    `json:"nodes"`
}

var knownTopologies = []topology{{"single", 1}, {"cluster", 3}}

const usage = `Usage: etcdbench [flags]

Compares Concord with etcd on this machine: for each topology (single:
1 node against 1 member; cluster: 3 against 3) and each round, a fresh
Concord and a fresh etcd in turn (which goes first alternates), the same
closed-loop workloads against each, and a NATS echo responder on Concord's
bus as the floor for its keep-alive. Prints the median of the rounds:
ops/s, p50 and p99 latency, server and client CPU per op, Concord ÷ etcd.

Workloads (--workloads): grant (ttl 600 s), put (a key on the client's
lease), keepalive (one lease a request; etcd's over its keep-alive stream),
get (linearizable), get-serializable.

Needs the concord binary (make build) and etcd on PATH (Debian: apt-get
install -y etcd-server), or --only-concord.

etcdbench scale [flags] compares them instead with a million keys and a
hundred thousand leases (etcdbench scale -h); etcdbench history [flags]
measures Concord's puts with its key history kept against kept to the
minimum, without etcd (etcdbench history -h).

Flags:
`

func main() {
	if len(os.Args) > 1 && os.Args[1] == "echo-responder" {
		if err := runEchoResponder(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "etcdbench echo-responder:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "scale-reader" {
		if err := runScaleReader(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "etcdbench scale-reader:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "scale":
		err = runScale(ctx, os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "history":
		err = runHistory(ctx, os.Args[2:])
	default:
		err = run(ctx, os.Args[1:])
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
	case ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "etcdbench: interrupted; every server stopped")
		stop()
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "etcdbench:", err)
		os.Exit(1)
	}
}

// errFailedRequests says some requests failed: every figure is printed,
// but the run is not clean.
var errFailedRequests = errors.New("some requests failed (see the errors column)")

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "etcdbench: "+format+"\n", args...)
}

func parseFlags(args []string) (*config, error) {
	cfg := &config{cores: runtime.NumCPU()}
	fs := flag.NewFlagSet("etcdbench", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	fs.StringVar(&cfg.concord, "concord", "bin/concord", "the concord binary (make build puts it in bin/)")
	fs.StringVar(&cfg.etcd, "etcd", "etcd", "the etcd binary, a path or a name on PATH")
	cfg.roundFlags.add(fs, "measurement window of each workload", 3, "rounds per topology; each starts a fresh Concord and a fresh etcd")
	workloads := fs.String("workloads", "grant,put,keepalive", "comma-separated, from "+strings.Join(allWorkloads, ", "))
	topologies := fs.String("topologies", "single,cluster", "comma-separated: single (1 against 1), cluster (3 against 3)")
	fs.BoolVar(&cfg.onlyConcord, "only-concord", false, "run Concord and the echo floor only, without etcd")
	fs.BoolVar(&cfg.jsonOut, "json", false, "print one JSON document with every round and the medians instead of a table")
	fs.BoolVar(&cfg.markdown, "markdown", false, "print the medians as Markdown tables (for docs/performance.md) instead of the text table")
	fs.StringVar(&cfg.jsonFile, "json-file", "", "also write the --json document to this file")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := cfg.roundFlags.check(); err != nil {
		return nil, err
	}
	switch {
	case cfg.jsonOut && cfg.markdown:
		return nil, errors.New("--json and --markdown: choose one")
	}
	for _, w := range strings.Split(*workloads, ",") {
		if !slices.Contains(allWorkloads, w) {
			return nil, fmt.Errorf("--workloads: unknown workload %q (want some of %s)", w, strings.Join(allWorkloads, ", "))
		}
		if slices.Contains(cfg.workloads, w) {
			return nil, fmt.Errorf("--workloads: %q twice", w)
		}
		cfg.workloads = append(cfg.workloads, w)
	}
	for _, name := range strings.Split(*topologies, ",") {
		i := slices.IndexFunc(knownTopologies, func(t topology) bool { return t.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("--topologies: unknown topology %q (want single, cluster)", name)
		}
		if slices.Contains(cfg.topologies, knownTopologies[i]) {
			return nil, fmt.Errorf("--topologies: %q twice", name)
		}
		cfg.topologies = append(cfg.topologies, knownTopologies[i])
	}
	return cfg, nil
}

// findBinaries resolves --concord and --etcd before any server starts, and
// says how to get whichever is missing.
func (cfg *config) findBinaries() error {
	p, err := exec.LookPath(cfg.concord)
	if err != nil {
		return fmt.Errorf("concord binary %q not found (%v): run `make build`, or pass --concord PATH", cfg.concord, err)
	}
	if cfg.concord, err = filepath.Abs(p); err != nil {
		return err
	}
	if cfg.onlyConcord {
		return nil
	}
	p, err = exec.LookPath(cfg.etcd)
	if err != nil {
		return fmt.Errorf("etcd not found (%v).\n"+
			"  The comparison needs etcd's server on this machine: on Debian, apt-get install -y etcd-server\n"+
			"  (any etcd v3.4 or later works), or pass --etcd PATH. --only-concord runs Concord and the\n"+
			"  NATS echo floor alone", err)
	}
	cfg.etcd, err = filepath.Abs(p)
	return err
}

// report is the whole run: what was run where, every round, the medians.
type report struct {
	Date       string        `json:"date"`
	Machine    machine       `json:"machine"`
	Concord    string        `json:"concord_version"`
	Etcd       string        `json:"etcd_version,omitempty"`
	Clients    int           `json:"clients"`
	InFlight   int           `json:"in_flight_per_client"`
	DurationS  float64       `json:"duration_s"`
	WarmupS    float64       `json:"warmup_s"`
	Rounds     int           `json:"rounds"`
	ValueBytes int           `json:"value_bytes"`
	Workloads  []string      `json:"workloads"`
	Topologies []topoReport  `json:"topologies"`
	errors     int64         // failed requests in all rounds
	cfg        *config       // for printing
	started    time.Time     // for the elapsed time
	elapsed    time.Duration // the whole run
}

// topoReport is one topology's rounds and medians.
type topoReport struct {
	topology
	Rounds  []round   `json:"rounds"`
	Medians []summary `json:"medians"`
	// Echo is the median of the echo responder's figures, and
	// KeepaliveOfEcho Concord's keep-alive ops/s as a fraction of the echo
	// responder's, the median of the per-round fractions.
	Echo            *stats   `json:"echo,omitempty"`
	KeepaliveOfEcho *float64 `json:"concord_keepalive_of_echo,omitempty"`
}

// round is one round of one topology.
type round struct {
	Round   int      `json:"round"`
	Order   []string `json:"order"` // which system ran first
	Results []result `json:"results"`
}

func run(ctx context.Context, args []string) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	if err := cfg.findBinaries(); err != nil {
		return err
	}
	root, err := os.MkdirTemp("", "etcdbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)

	rep := &report{Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Machine: readMachine(), cfg: cfg, started: time.Now(),
		Concord: toolVersion(cfg.concord, "version"), Clients: cfg.clients, InFlight: 1,
		DurationS: cfg.duration.Seconds(), WarmupS: cfg.warmup.Seconds(), Rounds: cfg.rounds,
		ValueBytes: cfg.valueBytes, Workloads: cfg.workloads}
	if !cfg.onlyConcord {
		rep.Etcd = strings.TrimPrefix(toolVersion(cfg.etcd, "--version"), "etcd Version: ")
	}
	pp := &ports{}
	for _, topo := range cfg.topologies {
		tr := topoReport{topology: topo}
		for r := 1; r <= cfg.rounds; r++ {
			order := []string{"concord", "etcd"}
			if r%2 == 0 {
				order = []string{"etcd", "concord"}
			}
			if cfg.onlyConcord {
				order = []string{"concord"}
			}
			rd := round{Round: r, Order: order}
			for _, system := range order {
				dir := filepath.Join(root, fmt.Sprintf("%s-r%d-%s", topo.Name, r, system))
				if err := os.Mkdir(dir, 0o755); err != nil {
					return err
				}
				logf("%s, round %d of %d: %s", topo.Name, r, cfg.rounds, system)
				var res []result
				if system == "concord" {
					res, err = runConcord(ctx, cfg, pp, dir, topo.Nodes)
				} else {
					res, err = runEtcd(ctx, cfg, pp, dir, topo.Nodes)
				}
				if err != nil {
					return fmt.Errorf("%s, round %d, %s: %w", topo.Name, r, system, err)
				}
				os.RemoveAll(dir)
				for _, x := range res {
					rep.errors += x.Errors
				}
				rd.Results = append(rd.Results, res...)
			}
			tr.Rounds = append(tr.Rounds, rd)
		}
		tr.summarize(cfg.workloads)
		rep.Topologies = append(rep.Topologies, tr)
	}
	rep.elapsed = time.Since(rep.started)
	doc, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	doc = append(doc, '\n')
	if cfg.jsonFile != "" {
		if err := os.WriteFile(cfg.jsonFile, doc, 0o644); err != nil {
			return fmt.Errorf("--json-file: %w", err)
		}
	}
	switch {
	case cfg.jsonOut:
		if _, err := os.Stdout.Write(doc); err != nil {
			return err
		}
	case cfg.markdown:
		rep.printMarkdown(os.Stdout)
	default:
		rep.printTable(os.Stdout)
	}
	if rep.errors > 0 {
		return errFailedRequests
	}
	return nil
}

// runConcord starts fresh Concord servers, runs every workload and then
// the echo floor on their bus, and stops them.
func runConcord(ctx context.Context, cfg *config, pp *ports, dir string, n int) (res []result, err error) {
	s, err := startConcord(ctx, cfg, pp, dir, n)
	defer func() { err = errors.Join(err, s.stop()) }()
	if err != nil {
		return nil, err
	}
	load, err := newConcordLoad(cfg, s.urls)
	if err != nil {
		return nil, err
	}
	defer load.close()
	if res, err = runWorkloads(ctx, cfg, "concord", load, s); err != nil {
		return nil, err
	}
	// The echo responder subscribes on the leader's server, where
	// Concord's own subscriptions are, so requests cross the same routes.
	echo, err := startEcho(ctx, dir, s.urls[s.leader])
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, echo.stop()) }()
	ops, err := load.setup(ctx, "echo")
	if err != nil {
		return nil, fmt.Errorf("echo: setup: %w", err)
	}
	// The bus is Concord's embedded NATS: its processes' CPU counts too.
	r, err := measure(ctx, cfg, "echo", "keepalive", ops, append([]*proc{echo}, s.procs...))
	if err != nil {
		return nil, fmt.Errorf("echo: %w", err)
	}
	if err := errors.Join(s.alive(), echo.exited()); err != nil {
		return nil, err
	}
	return append(res, r), nil
}

// runEtcd starts fresh etcd members, runs every workload, and stops them.
func runEtcd(ctx context.Context, cfg *config, pp *ports, dir string, n int) (res []result, err error) {
	s, err := startEtcd(ctx, cfg, pp, dir, n)
	defer func() { err = errors.Join(err, s.stop()) }()
	if err != nil {
		return nil, err
	}
	load, err := newEtcdLoad(cfg, s.urls)
	if err != nil {
		return nil, err
	}
	defer load.close()
	return runWorkloads(ctx, cfg, "etcd", load, s)
}

// workloadSetup prepares a workload's operations on one system.
type workloadSetup interface {
	setup(ctx context.Context, w string) ([]opFunc, error)
}

// runWorkloads measures every workload of cfg in turn on one system's
// servers, the same way for both systems, and fails if a server died.
func runWorkloads(ctx context.Context, cfg *config, system string, load workloadSetup, s *servers) ([]result, error) {
	var res []result
	for _, w := range cfg.workloads {
		ops, err := load.setup(ctx, w)
		if err != nil {
			return nil, fmt.Errorf("%s: setup: %w", w, err)
		}
		r, err := measure(ctx, cfg, system, w, ops, s.procs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", w, err)
		}
		if err := s.alive(); err != nil {
			return nil, err
		}
		res = append(res, r)
	}
	return res, nil
}
