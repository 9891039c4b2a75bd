package main

// `etcdbench scale`: Concord against etcd with a million keys and a hundred
// thousand leases, one fresh single server of each in turn (never both at
// once: at full size each holds about a gigabyte), the same phases against
// each, from this one program. It reproduces the table of Concord's issue
// 16; `make bench-scale` builds and runs it.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/concord-io/concord/schema"
)

// scaleConfig holds the flags of `etcdbench scale`.
type scaleConfig struct {
	concord     string
	etcd        string
	onlyConcord bool

	keys       int // keys loaded
	valueBytes int
	// rewrites is how many times every key is written in all, the load
	// being the first; below 2 the phase is skipped.
	rewrites int
	clients  int // connections of the load and the grants
	inflight int // requests in flight on each of them

	countTries int // count_only reads timed; the median is shown
	// restartTries and snapshotTries are how many restarts and snapshots
	// each of their phases times; the median is shown. One of each is a
	// single sample of a noisy machine, and the rewrite phase divides two.
	restartTries  int
	snapshotTries int

	readKeys    int // keys under the prefix the readers read
	pageLimit   int // limit of each page request
	readers     int // readers running full passes back to back
	readRounds  int // rounds of puts alone then beside the readers
	putClients  int // closed-loop put clients, one request in flight each
	putDuration time.Duration
	warmup      time.Duration
	// readersInProcess runs the readers as goroutines of this program,
	// beside the put clients, rather than each in a process of its own
	// (scale_reader.go says why not, by default).
	readersInProcess bool

	leases          int // leases of the expiry and of the keep-alive phases; 0 skips both
	expiryTTL       int // seconds
	keepaliveTTL    int // seconds
	keepaliveWindow time.Duration
	poll            time.Duration

	settle         time.Duration // wait before memory and disk are read
	restartTimeout time.Duration
	expiryTimeout  time.Duration

	markdown bool
	jsonFile string
}

const scaleUsage = `Usage: etcdbench scale [flags]

Concord against etcd at scale, as in Concord's issue 16: one fresh single
Concord node, then one fresh single etcd member (one at a time, each in a
new temporary directory with its default settings), the same phases
against each, from this program:

  load      --keys keys with --value-bytes values through the API (puts/s),
            --clients connections with --inflight requests in flight each;
            then resident memory (VmRSS) and the data directory (du)
  restart   kill -9, start again, time until a linearizable get answers
            (through NATS "no responders" and 503s for Concord);
            --restart-tries times, the median shown
  snapshot  (Concord only) one put, then P.cluster.snapshot: the time the
            node took to write that Raft snapshot (its metric
            concord_snapshot_persist_duration_seconds) and its size;
            --snapshot-tries times, the median shown
  count     count_only over all keys (median of --count-tries)
  reads     put p50/p99 of --put-clients closed-loop clients, alone, then
            while --readers read the --read-keys keys of one prefix in
            pages of --page-limit, back to back, each reader in a process
            of its own (--readers-in-process: beside the put clients);
            --read-rounds times, and the round whose p99 with reads ÷
            without is the median shown
  rewrites  (--rewrites N, N >= 2) every key written N times in all; then
            memory, data directory, restart and snapshot again, and the
            restart and snapshot times after the rewrites ÷ after the load
  expiry    --leases leases of ttl --expiry-ttl: time from the last one's
            deadline until none is left (0 skips this and keep-alive)
  keepalive --leases leases of ttl --keepalive-ttl renewed every ttl/3
            (Concord: keepalive_many, at most 10,000 ids a request; etcd:
            keep-alive streams, one per 10,000 leases); server CPU over
            --keepalive-window after one renewal period

Prints both columns and Concord ÷ etcd, with the machine and the date.
Needs the concord binary (make build) and etcd on PATH (Debian: apt-get
install -y etcd-server), or --only-concord.

Flags:
`

func parseScaleFlags(args []string) (*scaleConfig, error) {
	cfg := &scaleConfig{}
	fs := flag.NewFlagSet("etcdbench scale", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), scaleUsage); fs.PrintDefaults() }
	fs.StringVar(&cfg.concord, "concord", "bin/concord", "the concord binary (make build puts it in bin/)")
	fs.StringVar(&cfg.etcd, "etcd", "etcd", "the etcd binary, a path or a name on PATH")
	fs.BoolVar(&cfg.onlyConcord, "only-concord", false, "run Concord only, without etcd")
	fs.IntVar(&cfg.keys, "keys", 1_000_000, "keys loaded through the API")
	fs.IntVar(&cfg.valueBytes, "value-bytes", 100, "size of each value (a JSON string, quotes included)")
	fs.IntVar(&cfg.rewrites, "rewrites", 0, "write every key this many times in all (the load is the first), then measure memory, disk and restart again; below 2 skips it")
	fs.IntVar(&cfg.clients, "clients", 16, "connections that load the keys and grant the leases")
	fs.IntVar(&cfg.inflight, "inflight", 16, "requests in flight on each load connection")
	fs.IntVar(&cfg.countTries, "count-tries", 5, "count_only reads over all keys; the median is shown")
	fs.IntVar(&cfg.restartTries, "restart-tries", 3, "kill -9 and restart this many times in each restart phase; the median is shown")
	fs.IntVar(&cfg.snapshotTries, "snapshot-tries", 3, "snapshots written in each snapshot phase; the median is shown")
	fs.IntVar(&cfg.readKeys, "read-keys", 100_000, "keys under the prefix the readers read (fewer if --keys is smaller)")
	fs.IntVar(&cfg.pageLimit, "page-limit", 10_000, "limit of each page request of a read (Concord also cuts a page at its reply size bound)")
	fs.IntVar(&cfg.readers, "readers", 1, "readers reading the prefix back to back beside the puts")
	fs.BoolVar(&cfg.readersInProcess, "readers-in-process", false, "run the readers in this program's process, beside the put clients, not each in a process of its own")
	fs.IntVar(&cfg.readRounds, "read-rounds", 5, "rounds of the reads phase, each puts alone then beside the readers; the round whose p99 ratio is the median is shown")
	fs.IntVar(&cfg.putClients, "put-clients", 32, "closed-loop put clients, each on its own connection with one request in flight")
	fs.DurationVar(&cfg.putDuration, "put-duration", 10*time.Second, "measurement window of the puts, with and without readers")
	fs.DurationVar(&cfg.warmup, "warmup", time.Second, "load before each put window that is not counted")
	fs.IntVar(&cfg.leases, "leases", 100_000, "leases of the expiry and keep-alive phases; 0 skips both")
	fs.IntVar(&cfg.expiryTTL, "expiry-ttl", 60, "ttl in seconds of the leases left to expire: longer than granting them all takes (etcd: 40 s for 100,000 here), so that all are alive at once")
	fs.IntVar(&cfg.keepaliveTTL, "keepalive-ttl", 60, "ttl in seconds of the leases kept alive; each is renewed every ttl/3")
	fs.DurationVar(&cfg.keepaliveWindow, "keepalive-window", 40*time.Second, "window over which the server's CPU is read while the leases are kept alive (best a multiple of ttl/3)")
	fs.DurationVar(&cfg.poll, "poll", 100*time.Millisecond, "how often the expiry phase asks whether any lease is left")
	fs.DurationVar(&cfg.settle, "settle", 5*time.Second, "wait after a load before reading memory and disk")
	fs.DurationVar(&cfg.restartTimeout, "restart-timeout", 5*time.Minute, "how long a restarted server may take to answer")
	fs.DurationVar(&cfg.expiryTimeout, "expiry-timeout", 10*time.Minute, "how long after the last deadline the leases may take to go")
	fs.BoolVar(&cfg.markdown, "markdown", false, "print the table as Markdown (for docs/performance.md)")
	fs.StringVar(&cfg.jsonFile, "json-file", "", "also write every figure as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case cfg.keys < 1 || cfg.keys > maxScaleKeys:
		return nil, fmt.Errorf("--keys: %d, want 1 to %d", cfg.keys, maxScaleKeys)
	case cfg.valueBytes < 2:
		return nil, fmt.Errorf("--value-bytes: %d, want at least 2 (a JSON string)", cfg.valueBytes)
	case cfg.rewrites < 0:
		return nil, fmt.Errorf("--rewrites: %d, want 0 or more", cfg.rewrites)
	case cfg.clients < 1:
		return nil, fmt.Errorf("--clients: %d, want at least 1", cfg.clients)
	case cfg.inflight < 1:
		return nil, fmt.Errorf("--inflight: %d, want at least 1", cfg.inflight)
	case cfg.countTries < 1:
		return nil, fmt.Errorf("--count-tries: %d, want at least 1", cfg.countTries)
	case cfg.restartTries < 1:
		return nil, fmt.Errorf("--restart-tries: %d, want at least 1", cfg.restartTries)
	case cfg.snapshotTries < 1:
		return nil, fmt.Errorf("--snapshot-tries: %d, want at least 1", cfg.snapshotTries)
	case cfg.readKeys < 1:
		return nil, fmt.Errorf("--read-keys: %d, want at least 1", cfg.readKeys)
	case cfg.pageLimit < 1 || cfg.pageLimit > maxPageLimit:
		return nil, fmt.Errorf("--page-limit: %d, want 1 to %d (Concord's largest limit)", cfg.pageLimit, maxPageLimit)
	case cfg.readers < 1:
		return nil, fmt.Errorf("--readers: %d, want at least 1", cfg.readers)
	case cfg.readRounds < 1:
		return nil, fmt.Errorf("--read-rounds: %d, want at least 1", cfg.readRounds)
	case cfg.putClients < 1:
		return nil, fmt.Errorf("--put-clients: %d, want at least 1", cfg.putClients)
	case cfg.putDuration <= 0:
		return nil, fmt.Errorf("--put-duration: %s, want more than 0", cfg.putDuration)
	case cfg.warmup < 0:
		return nil, fmt.Errorf("--warmup: %s, want 0 or more", cfg.warmup)
	case cfg.leases < 0:
		return nil, fmt.Errorf("--leases: %d, want 0 or more", cfg.leases)
	case cfg.expiryTTL < 2:
		return nil, fmt.Errorf("--expiry-ttl: %d, want at least 2 seconds (etcd raises shorter ttls)", cfg.expiryTTL)
	case cfg.keepaliveTTL < 3:
		return nil, fmt.Errorf("--keepalive-ttl: %d, want at least 3 seconds", cfg.keepaliveTTL)
	case cfg.keepaliveWindow <= 0:
		return nil, fmt.Errorf("--keepalive-window: %s, want more than 0", cfg.keepaliveWindow)
	case cfg.poll <= 0:
		return nil, fmt.Errorf("--poll: %s, want more than 0", cfg.poll)
	case cfg.settle < 0:
		return nil, fmt.Errorf("--settle: %s, want 0 or more", cfg.settle)
	case cfg.restartTimeout <= 0:
		return nil, fmt.Errorf("--restart-timeout: %s, want more than 0", cfg.restartTimeout)
	case cfg.expiryTimeout <= 0:
		return nil, fmt.Errorf("--expiry-timeout: %s, want more than 0", cfg.expiryTimeout)
	}
	return cfg, nil
}

// maxScaleKeys bounds --keys so that every key index fits scaleKey's
// eight digits.
const maxScaleKeys = 99_999_999

// maxPageLimit is Concord's largest kv.get limit: a larger flag is refused
// before any server starts.
const maxPageLimit = schema.MaxListLimit

// renewChunk is the most leases one keepalive_many renews; etcd gets one
// keep-alive stream per chunk.
const renewChunk = schema.MaxKeepAliveMany

// scaleKey is key i of the load. Keys come in groups of readKeys, each
// under a prefix of its own, so that the readers' prefix (group 0, see
// readPrefix) holds exactly readKeys keys when there are enough.
func scaleKey(i, readKeys int) string { return fmt.Sprintf("scale.%d.%08d", i/readKeys, i) }

// readPrefix is the prefix of group 0 of scaleKey.
const readPrefix = "scale.0."

// readPrefixKeys is how many keys the readers' prefix holds.
func (cfg *scaleConfig) readPrefixKeys() int { return min(cfg.keys, cfg.readKeys) }

// renewEvery is how often each kept-alive lease is renewed: a third of its
// ttl, as etcd's client and Concord's sessions do.
func (cfg *scaleConfig) renewEvery() time.Duration {
	return time.Duration(cfg.keepaliveTTL) * time.Second / 3
}

// chunks splits ids into runs of at most size, in order.
func chunks(ids []int64, size int) [][]int64 {
	var out [][]int64
	for len(ids) > 0 {
		n := min(size, len(ids))
		out = append(out, ids[:n:n])
		ids = ids[n:]
	}
	return out
}

// scaleResult is what the phases measured on one system. A phase that was
// skipped leaves its fields nil.
type scaleResult struct {
	System  string `json:"system"`
	Version string `json:"version"`

	LoadPutsPerS *float64 `json:"load_puts_per_s"`
	LoadSeconds  *float64 `json:"load_s"`
	RSSAfterLoad *int64   `json:"rss_bytes_after_load"`
	// RSSPeakLoad is the most resident memory the server held from its
	// start to the end of the load (VmHWM): the load's need, which the
	// memory at rest after it may not show.
	RSSPeakLoad   *int64   `json:"rss_peak_bytes_during_load"`
	DiskAfterLoad *int64   `json:"data_dir_bytes_after_load"`
	RestartS      *float64 `json:"restart_s"`
	// RestartTries is every restart's time, in the order run; RestartS
	// is their median. So for the other phases timed more than once.
	RestartTries []float64 `json:"restart_s_tries,omitempty"`

	// The snapshot phase (Concord only): the median write time of the
	// Raft snapshots asked for after the restarts, as the node's metric
	// recorded them; the median request round trip; the snapshot's size.
	SnapshotS     *float64  `json:"snapshot_write_s,omitempty"`
	SnapshotReqS  *float64  `json:"snapshot_request_s,omitempty"`
	SnapshotBytes *int64    `json:"snapshot_bytes,omitempty"`
	SnapshotTries []float64 `json:"snapshot_write_s_tries,omitempty"`

	Count        *int64    `json:"count"`
	CountMS      *float64  `json:"count_ms_median"`
	CountMSTries []float64 `json:"count_ms_tries,omitempty"`

	PutAlone     *result  `json:"put_no_reads,omitempty"`
	PutReads     *result  `json:"put_with_reads,omitempty"`
	ReadPasses   *int     `json:"read_passes"` // full passes over the prefix finished in the window
	ReadPassMS   *float64 `json:"read_pass_ms_median"`
	ReadPages    *int     `json:"read_pages_per_pass"`
	PutP99Growth *float64 `json:"put_p99_with_reads_over_without"`
	// PutP99Growths is every round's ratio, in the order run.
	PutP99Growths []float64 `json:"put_p99_with_reads_over_without_rounds,omitempty"`

	RewritePutsPerS     *float64  `json:"rewrite_puts_per_s,omitempty"`
	RSSAfterRewrite     *int64    `json:"rss_bytes_after_rewrites,omitempty"`
	RSSPeakRewrite      *int64    `json:"rss_peak_bytes_restart_and_rewrites,omitempty"`
	DiskAfterRewrite    *int64    `json:"data_dir_bytes_after_rewrites,omitempty"`
	RestartRewriteS     *float64  `json:"restart_s_after_rewrites,omitempty"`
	RestartRewriteTries []float64 `json:"restart_s_after_rewrites_tries,omitempty"`

	SnapshotRewriteS     *float64  `json:"snapshot_write_s_after_rewrites,omitempty"`
	SnapshotRewriteReqS  *float64  `json:"snapshot_request_s_after_rewrites,omitempty"`
	SnapshotRewriteBytes *int64    `json:"snapshot_bytes_after_rewrites,omitempty"`
	SnapshotRewriteTries []float64 `json:"snapshot_write_s_after_rewrites_tries,omitempty"`

	GrantsPerS      *float64 `json:"expiry_grants_per_s,omitempty"`
	GrantSpreadS    *float64 `json:"expiry_grant_s,omitempty"` // first to last grant reply
	ExpiryLagS      *float64 `json:"expiry_lag_s,omitempty"`   // last deadline to none left
	KeepaliveCPUPct *float64 `json:"keepalive_server_cpu_pct_of_core,omitempty"`
	KeepaliveRate   *float64 `json:"keepalive_renewals_per_s,omitempty"`
	KeepaliveOwnPct *float64 `json:"keepalive_bench_cpu_pct_of_core,omitempty"`
}

// scaleReport is the whole run.
type scaleReport struct {
	Date    string         `json:"date"`
	Machine machine        `json:"machine"`
	Elapsed float64        `json:"elapsed_s"`
	Config  map[string]any `json:"config"`
	Concord *scaleResult   `json:"concord"`
	Etcd    *scaleResult   `json:"etcd,omitempty"`
	cfg     *scaleConfig
}

func ptr[T any](v T) *T { return &v }

func runScale(ctx context.Context, args []string) error {
	cfg, err := parseScaleFlags(args)
	if err != nil {
		return err
	}
	bin := &config{concord: cfg.concord, etcd: cfg.etcd, onlyConcord: cfg.onlyConcord}
	if err := bin.findBinaries(); err != nil {
		return err
	}
	cfg.concord, cfg.etcd = bin.concord, bin.etcd
	root, err := os.MkdirTemp("", "etcdbench-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)

	started := time.Now()
	rep := &scaleReport{Date: started.UTC().Format("2006-01-02 15:04 UTC"), Machine: readMachine(), cfg: cfg,
		Config: map[string]any{"keys": cfg.keys, "value_bytes": cfg.valueBytes, "rewrites": cfg.rewrites,
			"clients": cfg.clients, "inflight": cfg.inflight, "read_keys": cfg.readPrefixKeys(), "page_limit": cfg.pageLimit,
			"readers": cfg.readers, "put_clients": cfg.putClients, "put_duration_s": cfg.putDuration.Seconds(),
			"leases": cfg.leases, "expiry_ttl_s": cfg.expiryTTL, "keepalive_ttl_s": cfg.keepaliveTTL,
			"keepalive_window_s": cfg.keepaliveWindow.Seconds()}}
	systems := []string{"concord", "etcd"}
	if cfg.onlyConcord {
		systems = systems[:1]
	}
	pp := &ports{}
	for _, system := range systems {
		dir := filepath.Join(root, system)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		logf("scale: %s", system)
		res, err := runScaleSystem(ctx, cfg, pp, system, dir)
		if err != nil {
			return fmt.Errorf("%s: %w", system, err)
		}
		os.RemoveAll(dir)
		if system == "concord" {
			rep.Concord = res
		} else {
			rep.Etcd = res
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
	rep.print(os.Stdout)
	return nil
}

// runScaleSystem starts one fresh server of system in dir, runs every
// phase against it, and stops it, on failure too.
func runScaleSystem(ctx context.Context, cfg *scaleConfig, pp *ports, system, dir string) (res *scaleResult, err error) {
	// Concord's operator listener serves the snapshot metrics.
	bin := &config{concord: cfg.concord, etcd: cfg.etcd, metrics: true}
	var s *servers
	var t scaleTarget
	res = &scaleResult{System: system}
	if system == "concord" {
		res.Version = toolVersion(cfg.concord, "version")
		s, err = startConcord(ctx, bin, pp, dir, 1)
	} else {
		res.Version = strings.TrimPrefix(toolVersion(cfg.etcd, "--version"), "etcd Version: ")
		s, err = startEtcd(ctx, bin, pp, dir, 1)
	}
	// s.stop stops whichever process s holds now: a restart replaces it.
	defer func() { err = errors.Join(err, s.stop()) }()
	if err != nil {
		return nil, err
	}
	if system == "concord" {
		t = newConcordTarget(cfg, s.urls[0])
	} else {
		t = newEtcdTarget(cfg, s.urls[0])
	}
	defer t.close()
	dataDir := filepath.Join(dir, "n1")
	if system == "etcd" {
		dataDir = filepath.Join(dir, "m1")
	}
	ph := &phases{cfg: cfg, s: s, t: t, res: res, dataDir: dataDir}
	steps := []func(context.Context) error{ph.load, ph.memory(false), ph.restart(false), ph.snapshot(false), ph.count, ph.reads}
	if cfg.rewrites >= 2 {
		steps = append(steps, ph.rewrite, ph.memory(true), ph.restart(true), ph.snapshot(true))
	}
	if cfg.leases > 0 {
		steps = append(steps, ph.expiry, ph.keepalive)
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return nil, err
		}
		if err := s.alive(); err != nil {
			return nil, err
		}
	}
	return res, nil
}
