package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/concord-io/concord/service"
	"github.com/concord-io/concord/service/backupfile"
	"github.com/concord-io/concord/service/gcpace"
)

// serveIdentity returns serve's default node id and Raft address, which
// `snapshot restore` defaults to as well: the directory it writes is for a
// node that serve starts with them. It lives here so that the snapshot
// command does not import the node.
func serveIdentity() backupfile.RestoreOptions {
	d := service.DefaultConfig()
	return backupfile.RestoreOptions{NodeID: d.NodeID, RaftAddr: d.RaftAddr}
}

func runServe(args []string) error {
	cfg := service.DefaultConfig()
	cfg.Version = version
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&cfg.NodeID, "node-id", cfg.NodeID, "this node's Raft id (fixed for the life of the data directory)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for the Raft log and snapshots")
	fs.StringVar(&cfg.RaftAddr, "raft-addr", cfg.RaftAddr, "TCP address for Raft traffic")
	fs.StringVar(&cfg.RaftTLS.CertFile, "raft-tls-cert", "", "Raft over mutual TLS: this node's certificate (PEM; it must name the host of --raft-addr in an IP or DNS SAN and allow server and client auth)")
	fs.StringVar(&cfg.RaftTLS.KeyFile, "raft-tls-key", "", "Raft over mutual TLS: the private key of --raft-tls-cert")
	fs.StringVar(&cfg.RaftTLS.CAFile, "raft-tls-ca", "", "Raft over mutual TLS: the CA that signs every member's certificate; peers with other certificates are refused")
	fs.StringVar(&cfg.NATSURL, "nats-url", "", "connect to this external NATS (comma-separated URLs) instead of embedding a server")
	fs.StringVar(&cfg.NATSConfigFile, "nats-config", "", "embedded NATS: a nats-server configuration file (users, nkeys, accounts, permissions, TLS); Concord keeps no_sigs on and max_payload large enough, and its --nats-listen/--nats-cluster/--nats-routes flags override the file when given")
	fs.StringVar(&cfg.NATSAuth.CredsFile, "nats-creds", "", "this node's NATS credentials (external NATS, or embedded with --nats-config): a .creds file")
	fs.StringVar(&cfg.NATSAuth.NkeyFile, "nats-nkey", "", "this node's NATS credentials: a file holding an nkey seed")
	fs.StringVar(&cfg.NATSAuth.User, "nats-user", "", "this node's NATS credentials: user name")
	fs.StringVar(&cfg.NATSAuth.Password, "nats-password", "", "this node's NATS credentials: password (or $CONCORD_NATS_PASSWORD)")
	fs.StringVar(&cfg.NATSAuth.Token, "nats-token", "", "this node's NATS credentials: token (or $CONCORD_NATS_TOKEN)")
	fs.StringVar(&cfg.NATSAuth.TLSCert, "nats-tls-cert", "", "this node's NATS credentials: client certificate")
	fs.StringVar(&cfg.NATSAuth.TLSKey, "nats-tls-key", "", "this node's NATS credentials: client key")
	fs.StringVar(&cfg.NATSAuth.TLSCA, "nats-tls-ca", "", "NATS: CA of the server's certificate")
	fs.StringVar(&cfg.NATSClusterListen, "nats-cluster", "", "embedded NATS: listen for routes from the other nodes' servers here (host:port)")
	routes := fs.String("nats-routes", "", "embedded NATS: comma-separated route URLs of the other nodes' servers (nats://host:port)")
	fs.BoolVar(&cfg.Bootstrap, "bootstrap", false, "start a new cluster with this node (on first start; refused if a cluster already answers on the bus)")
	fs.BoolVar(&cfg.Join, "join", false, "ask the cluster on the bus to add this node as a voter")
	fs.DurationVar(&cfg.BootstrapWait, "bootstrap-wait", cfg.BootstrapWait, "how long a bootstrapping node waits for its NATS routes and for positive evidence that no other cluster serves the subject prefix on the bus; without it by then, the bootstrap is refused")
	fs.DurationVar(&cfg.BusCheckInterval, "bus-check-interval", cfg.BusCheckInterval, "how often every node asks the bus which clusters serve the subject prefix; while another one does, the cluster serves no requests")
	fs.StringVar(&cfg.NATSEventsAuth.CredsFile, "nats-events-creds", "", "credentials of the connection that publishes watch events (default: the node's): a .creds file")
	fs.StringVar(&cfg.NATSEventsAuth.NkeyFile, "nats-events-nkey", "", "credentials of the watch event connection: a file holding an nkey seed")
	fs.StringVar(&cfg.NATSEventsAuth.User, "nats-events-user", "", "credentials of the watch event connection: user name")
	fs.StringVar(&cfg.NATSEventsAuth.Password, "nats-events-password", "", "credentials of the watch event connection: password (or $CONCORD_NATS_EVENTS_PASSWORD)")
	fs.BoolVar(&cfg.TestAllowAnyReply, "test-allow-any-reply", false, "for tests only: serve requests whatever their reply subject")
	fs.DurationVar(&cfg.RaftHeartbeatTimeout, "raft-heartbeat-timeout", cfg.RaftHeartbeatTimeout, "how long a follower waits for the leader before an election")
	fs.DurationVar(&cfg.RaftElectionTimeout, "raft-election-timeout", cfg.RaftElectionTimeout, "how long a candidate waits for votes")
	fs.DurationVar(&cfg.RaftLeaderLeaseTimeout, "raft-leader-lease-timeout", cfg.RaftLeaderLeaseTimeout, "how long a leader keeps leading without hearing from a quorum")
	fs.StringVar(&cfg.TestFaultFile, "test-fault-file", "", "for tests only: a JSON file {\"block\": [raft addresses]} of peers to cut off")
	fs.StringVar(&cfg.TestPauseFile, "test-pause-file", "", "for tests only: a JSON file {\"hold\": [\"snapshot-restore\", \"snapshot-persist\"]} of points where the node waits while the file names them")
	fs.StringVar(&cfg.NATSListen, "nats-listen", cfg.NATSListen, "client address of the embedded NATS server; with --nats-config the file's listen/host/port wins unless this flag is given")
	fs.StringVar(&cfg.SubjectPrefix, "subject-prefix", cfg.SubjectPrefix, "first token(s) of every Concord subject")
	fs.DurationVar(&cfg.TickInterval, "tick", cfg.TickInterval, "lease expiry tick: bounds clock staleness after a restart")
	fs.IntVar(&cfg.ExpireBatch, "expire-batch", cfg.ExpireBatch, "most leases expired by one Raft command")
	fs.DurationVar(&cfg.ApplyTimeout, "apply-timeout", cfg.ApplyTimeout, "how long a request may wait for Raft")
	fs.IntVar(&cfg.MaxInflight, "max-inflight", cfg.MaxInflight, "most requests handled at once")
	fs.IntVar(&cfg.MetricsTenants, "metrics-tenants", cfg.MetricsTenants, "most tenants (NATS accounts) with /metrics series of their own; the rest share tenant=\"other\"")
	fs.Float64Var(&cfg.ListingShare, "listing-share", cfg.ListingShare, "the fraction of its time a listing of many keys (kv.get of a prefix or range) may run while writes are in flight; it pauses for the rest, so that readers paging through large prefixes do not crowd out the writes; 0.1 to 1, 1 never pauses")
	fs.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", cfg.SnapshotThreshold, "new log entries that trigger a snapshot; also the fewest commands applied since the last one that do (then once they reach a quarter of the records held, or as soon as the node is quiet)")
	fs.DurationVar(&cfg.SnapshotInterval, "snapshot-interval", cfg.SnapshotInterval, "how often to check whether a snapshot is due")
	fs.Uint64Var(&cfg.TrailingLogs, "trailing-logs", cfg.TrailingLogs, "log entries kept after a snapshot")
	fs.IntVar(&cfg.WALSegmentMB, "wal-segment-mb", cfg.WALSegmentMB, "size in MiB of each Raft log segment file, preallocated in full, with the next one reserved ahead (the disk needs room for two and an eighth); 1 to 1024")
	fs.Int64Var(&cfg.MinTTL, "min-ttl", cfg.MinTTL, "smallest lease ttl in seconds")
	fs.IntVar(&cfg.MaxKeyBytes, "max-key-bytes", cfg.MaxKeyBytes, "longest key")
	fs.IntVar(&cfg.MaxValueBytes, "max-value-bytes", cfg.MaxValueBytes, "largest value (compact JSON)")
	fs.IntVar(&cfg.MaxMetadataBytes, "max-metadata-bytes", cfg.MaxMetadataBytes, "largest lease metadata (compact JSON)")
	fs.Int64Var(&cfg.MaxLeases, "max-leases", cfg.MaxLeases, "most active leases, anonymous ones included")
	fs.Int64Var(&cfg.MaxKeysPerLease, "max-keys-per-lease", cfg.MaxKeysPerLease, "most keys attached to one lease")
	fs.IntVar(&cfg.MaxTxnCompares, "max-txn-compares", cfg.MaxTxnCompares, "most compares in one transaction")
	fs.IntVar(&cfg.MaxTxnOps, "max-txn-ops", cfg.MaxTxnOps, "most operations in one transaction branch")
	fs.IntVar(&cfg.MaxTxnBytes, "max-txn-bytes", cfg.MaxTxnBytes, "largest transaction request")
	fs.Int64Var(&cfg.IdempotencyEntries, "idempotency-entries", cfg.IdempotencyEntries, "replies the idempotency cache keeps (replicated)")
	fs.Int64Var(&cfg.IdempotencyRevisions, "idempotency-revisions", cfg.IdempotencyRevisions, "revisions after which a cached reply is dropped (replicated)")
	fs.Int64Var(&cfg.HistoryRevisions, "history-revisions", cfg.HistoryRevisions, "revisions the key history keeps, for reads at a revision, kv.history and kv.changes (replicated)")
	fs.DurationVar(&cfg.HistoryAge, "history-age", cfg.HistoryAge, "how long, on the lease clock, the key history keeps a revision (replicated)")
	// The names from before the history replaced the change log.
	fs.Int64Var(&cfg.HistoryRevisions, "changes-max", cfg.HistoryRevisions, "deprecated: --history-revisions")
	fs.DurationVar(&cfg.HistoryAge, "changes-max-age", cfg.HistoryAge, "deprecated: --history-age")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text or json (one JSON object per line)")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz on this address, e.g. 127.0.0.1:9090")
	fs.StringVar(&cfg.ConsoleListen, "console-listen", "", "serve the read-only operator console on this address, e.g. 127.0.0.1:8080 (off by default; an address other than loopback needs a password)")
	fs.StringVar(&cfg.ConsoleUser, "console-user", "operator", "the console's HTTP Basic user, when it has a password")
	consolePasswordFile := fs.String("console-password-file", "", "file holding the console's password (or $CONCORD_CONSOLE_PASSWORD); with one, every console request needs --console-user and it")
	pprofListen := fs.String("pprof-listen", "", "serve Go's net/http/pprof profiles on this address (for profiling; off by default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.NATSConfigFile != "" && !isSet(fs, "nats-listen") {
		cfg.NATSListen = "" // the file's address, or the default if it sets none
	}
	if *routes != "" {
		cfg.NATSRoutes = strings.Split(*routes, ",")
	}
	if cfg.NATSAuth.Password == "" {
		cfg.NATSAuth.Password = os.Getenv("CONCORD_NATS_PASSWORD")
	}
	if cfg.NATSEventsAuth.Password == "" && cfg.NATSEventsAuth.User != "" {
		cfg.NATSEventsAuth.Password = os.Getenv("CONCORD_NATS_EVENTS_PASSWORD")
	}
	if cfg.NATSAuth.Token == "" {
		cfg.NATSAuth.Token = os.Getenv("CONCORD_NATS_TOKEN")
	}
	cfg.ConsolePassword = os.Getenv("CONCORD_CONSOLE_PASSWORD")
	if *consolePasswordFile != "" {
		b, err := os.ReadFile(*consolePasswordFile)
		if err != nil {
			return fmt.Errorf("--console-password-file: %w", err)
		}
		if cfg.ConsolePassword = strings.TrimSpace(string(b)); cfg.ConsolePassword == "" {
			return fmt.Errorf("--console-password-file %s is empty", *consolePasswordFile)
		}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	logOut := logWriter{os.Stderr} // the start-up's progress bar shares the terminal
	switch *logFormat {
	case "text":
		cfg.Logger = slog.New(slog.NewTextHandler(logOut, opts))
	case "json":
		cfg.Logger = slog.New(slog.NewJSONHandler(logOut, opts))
	default:
		return fmt.Errorf("--log-format %q: want text or json", *logFormat)
	}

	if *pprofListen != "" {
		if err := servePprof(*pprofListen, cfg.Logger); err != nil {
			return err
		}
	}
	// The live heap is the dataset: past 64 MiB, the collector may let it
	// grow by half, not double (gcpace). A GOGC or GOMEMLIMIT the node was
	// started with is the operator's choice, and stands.
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		go gcpace.Default.Run(ctx, time.Second)
	}
	started := make(chan struct{})
	if progressOnTerminal(false) {
		cfg.WatchStartup = func(progressOf func() service.StartupProgress) { go watchStartup(progressOf, started) }
	}
	svc, err := service.Start(cfg)
	close(started)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case got := <-sig:
		cfg.Logger.Info("shutting down", "signal", got.String())
		return svc.Close()
	case err := <-svc.Failed():
		svc.Close()
		return err
	}
}

// servePprof exposes the profiling handlers on their own listener, never on
// an address the service is reached on.
func servePprof(addr string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--pprof-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	go func() {
		if err := http.Serve(ln, mux); err != nil {
			log.Warn("pprof listener stopped", "err", err)
		}
	}()
	return nil
}
