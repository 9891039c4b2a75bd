package service

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/console"
	"github.com/concord-io/concord/service/decode"
	"github.com/concord-io/concord/service/replica"
	"github.com/concord-io/concord/subjects"
)

// RaftTLS names the certificate, key and CA files that run Raft over
// mutual TLS; empty, Raft runs over plain TCP.
type RaftTLS = replica.TLSFiles

// ErrRaftTLS marks a Raft TLS setting whose files cannot serve.
var ErrRaftTLS = replica.ErrTLS

// Config configures a node. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// NodeID names this node in Raft. It is recorded in the data directory
	// on first start and must not change afterwards.
	NodeID string
	// DataDir holds the Raft log (wal/, see service/logstore) and snapshots.
	DataDir string
	// RaftAddr is the TCP address Raft listens on and advertises.
	RaftAddr string
	// RaftTLS, when its files are set, runs Raft over mutual TLS.
	RaftTLS RaftTLS

	// Bootstrap makes a node with no state start a new cluster; Join makes
	// it ask the cluster on the bus to add it. With neither, a node with no
	// state bootstraps a single-node cluster.
	Bootstrap bool
	Join      bool
	// BootstrapWait bounds how long a bootstrapping node looks for
	// positive evidence that no other cluster serves the prefix on the bus
	// (service/bus); without it by then, the bootstrap is refused.
	BootstrapWait time.Duration
	// BusCheckInterval is how often every node asks the bus which clusters
	// serve the prefix; it bounds how long two clusters can both answer.
	BusCheckInterval time.Duration

	// RaftHeartbeatTimeout, RaftElectionTimeout and RaftLeaderLeaseTimeout
	// tune failure detection (hashicorp/raft's settings of those names).
	RaftHeartbeatTimeout   time.Duration
	RaftElectionTimeout    time.Duration
	RaftLeaderLeaseTimeout time.Duration

	// NATSURL connects to an external NATS; empty embeds a server.
	NATSURL string
	// NATSAuth holds this node's credentials for NATS: for an external
	// NATS, and for the embedded server when NATSConfigFile makes it
	// require authentication.
	NATSAuth NATSAuth
	// NATSEventsAuth, when it holds credentials, is the identity of the
	// connection that publishes watch events, so that the serving
	// connection's role need not allow publishing on watch subjects (see
	// deploy/nats/roles.conf). Its TLS files default to NATSAuth's. Empty:
	// the events connection uses NATSAuth.
	NATSEventsAuth NATSAuth
	// NATSConfigFile, when set, is a nats-server configuration file for
	// the embedded server (users, nkeys, accounts, permissions, TLS, ...).
	// Concord applies its own settings on top: see embeddedNATSOptions.
	NATSConfigFile string
	// NATSListen is the embedded server's client address. Empty means the
	// listen address of NATSConfigFile if it sets one, else 127.0.0.1:4222;
	// when set, it overrides NATSConfigFile.
	NATSListen string
	// NATSClusterListen, when set, makes the embedded server a member of a
	// NATS cluster listening for routes there; NATSRoutes are its peers'
	// route URLs (nats://host:port).
	NATSClusterListen string
	NATSRoutes        []string
	// SubjectPrefix is the first token(s) of every subject.
	SubjectPrefix string

	// TickInterval bounds how stale the replicated lease clock can be and
	// how often the leader looks for expired leases.
	TickInterval time.Duration
	// ExpireBatch is the most leases one expire command carries.
	ExpireBatch int
	// ApplyTimeout bounds how long a request waits to enter the Raft log.
	ApplyTimeout time.Duration
	// MaxInflight bounds the requests handled at once.
	MaxInflight int
	// ListingShare is the fraction of its time a listing of many keys
	// may run while writes are in flight: it pauses for the rest, so that
	// a reader paging through a large prefix does not crowd out the
	// writes (service/serving/listingpace.go). 1 never pauses. The default, 0.1, is where
	// puts beside a reader paging back to back through a 100,000-key prefix
	// came closest to keeping their p99 within twice their p99 alone on a
	// 2-core machine (`etcdbench scale`, 5 rounds: 1.72, 1.82, 1.84, 1.87
	// and 2.03 in five runs; 0.05 gave 1.90, 0.15 1.96, 0.3 2.46, once the
	// Go client decoded pages as fast as the node serves them).
	ListingShare float64

	// MetricsTenants bounds the tenants with series of their own in
	// /metrics; the rest share the label "other".
	MetricsTenants int

	// SnapshotThreshold is how many new log entries trigger a snapshot
	// (Raft's rule, checked every SnapshotInterval), and how many commands
	// applied since the last one at least (a batch entry holds many): the
	// node takes a snapshot once those reach a quarter of its records,
	// or as soon as it is quiet (replica.SnapshotTrigger). TrailingLogs is how many
	// entries stay in the log after a snapshot for followers that lag.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64

	// WALSegmentMB is the size in MiB of each Raft log segment file, which
	// raft-wal preallocates in full when it starts one: the disk must have
	// room for one more segment (64 MiB by default), so a small disk wants
	// small segments. It is a soft limit: an entry never splits.
	WALSegmentMB int

	// Limits.
	MinTTL           int64 // seconds
	MaxKeyBytes      int
	MaxValueBytes    int
	MaxMetadataBytes int
	MaxLeases        int64
	MaxKeysPerLease  int64
	// Transactions: compares, operations per branch, request bytes.
	MaxTxnCompares int
	MaxTxnOps      int
	MaxTxnBytes    int
	// The idempotency cache keeps at most IdempotencyEntries replies, none
	// older than IdempotencyRevisions revisions.
	IdempotencyEntries   int64
	IdempotencyRevisions int64
	// The history keeps the last HistoryRevisions revisions, none older
	// than HistoryAge (lease-clock time), whichever keeps less; both are
	// replicated.
	HistoryRevisions int64
	HistoryAge       time.Duration

	// MetricsListen, when set, is the address of the operator listener:
	// /metrics, /healthz and /readyz.
	MetricsListen string

	// WatchStartup, when set, is called once as the node starts, with a
	// function that says how far its start-up's long step is (restoring
	// the snapshot, replaying the log), for a terminal to show; it may be
	// called from any goroutine, at any time.
	WatchStartup func(progress func() StartupProgress)

	// ConsoleListen, when set, is the address of the read-only operator
	// console (service/console). ConsoleUser and ConsolePassword, when the
	// password is set, are the HTTP Basic credentials it requires; a
	// console on an address other than loopback must have them.
	ConsoleListen, ConsoleUser, ConsolePassword string

	// TestFaultFile is for tests only (replica.StreamLayer.EnableTestFaults): a JSON file
	// {"block": [raft addresses]} that the node polls and whose peers it
	// cuts off at the Raft transport.
	TestFaultFile string
	// TestAllowAnyReply is for tests only: it turns off the check of reply
	// subjects (service/serving/replyguard.go), so that a test can show what the NATS
	// permissions alone stop.
	TestAllowAnyReply bool
	// TestPauseFile is for tests only (replica.TestPause): a JSON file
	// {"hold": [points]} that the node reads at a snapshot restore
	// ("snapshot-restore") and a snapshot write ("snapshot-persist"), and
	// that holds it there while it names the point.
	TestPauseFile string

	// Version is the build's version, which the leader reports to NATS
	// service discovery (`nats micro info`). It should be a semantic
	// version; a leading "v" is dropped, empty reports "0.0.0-dev", and
	// anything else reports "0.0.0-unknown" with a warning.
	Version string

	// Logger receives the node's logs; nil uses slog.Default().
	Logger *slog.Logger
}

// NATSAuth is how a node authenticates to NATS: any way nats.go supports.
// It applies to an external NATS and equally to the embedded server's
// in-process connection, which is authenticated like any other client when
// a --nats-config file requires it.
type NATSAuth struct {
	CredsFile string // a .creds file (JWT and nkey seed)
	NkeyFile  string // a file holding an nkey seed
	User      string
	Password  string
	Token     string
	// TLS: a client certificate and key, and the CA that signed the server's.
	TLSCert string
	TLSKey  string
	TLSCA   string
}

// DefaultConfig returns the configuration of `concord serve` with no flags.
func DefaultConfig() Config {
	return Config{
		NodeID:                 "n1",
		DataDir:                "concord-data",
		RaftAddr:               "127.0.0.1:7422",
		NATSListen:             "127.0.0.1:4222",
		SubjectPrefix:          subjects.DefaultPrefix,
		TickInterval:           time.Second,
		ExpireBatch:            50,
		ApplyTimeout:           5 * time.Second,
		MaxInflight:            4096,
		ListingShare:           0.1,
		MetricsTenants:         100,
		SnapshotThreshold:      8192,
		SnapshotInterval:       30 * time.Second,
		TrailingLogs:           10240,
		WALSegmentMB:           64,
		MinTTL:                 schema.DefaultMinTTL,
		MaxKeyBytes:            subjects.MaxKeyBytes,
		MaxValueBytes:          schema.DefaultMaxValueBytes,
		MaxMetadataBytes:       schema.DefaultMaxMetadataBytes,
		MaxLeases:              schema.DefaultMaxLeases,
		MaxKeysPerLease:        schema.DefaultMaxKeysPerLease,
		MaxTxnCompares:         schema.DefaultMaxTxnCompares,
		MaxTxnOps:              schema.DefaultMaxTxnOps,
		MaxTxnBytes:            schema.DefaultMaxTxnBytes,
		IdempotencyEntries:     schema.DefaultIdempotencyEntries,
		IdempotencyRevisions:   schema.DefaultIdempotencyRevisions,
		HistoryRevisions:       schema.DefaultHistoryRevisions,
		HistoryAge:             schema.DefaultHistoryAge,
		RaftHeartbeatTimeout:   500 * time.Millisecond,
		RaftElectionTimeout:    500 * time.Millisecond,
		RaftLeaderLeaseTimeout: 250 * time.Millisecond,
		BootstrapWait:          30 * time.Second,
		BusCheckInterval:       2 * time.Second,
	}
}

// eventsAuth returns the credentials of the watch-event connection.
func (c *Config) eventsAuth() NATSAuth {
	e := c.NATSEventsAuth
	if !e.given() {
		return c.NATSAuth
	}
	if e.TLSCA == "" {
		e.TLSCA = c.NATSAuth.TLSCA
	}
	if e.TLSCert == "" && e.TLSKey == "" {
		e.TLSCert, e.TLSKey = c.NATSAuth.TLSCert, c.NATSAuth.TLSKey
	}
	return e
}

// ErrConfig reports an invalid configuration.
var ErrConfig = errors.New("invalid configuration")

// fillDefaults gives every zero field the value DefaultConfig has for it,
// so a default is stated once, there. Two fields differ: with a NATS
// configuration file an empty NATSListen means "as the file says", and a
// nil Logger is slog.Default().
func (c *Config) fillDefaults() {
	keepListen := c.NATSConfigFile != "" && c.NATSListen == ""
	cv, dv := reflect.ValueOf(c).Elem(), reflect.ValueOf(DefaultConfig())
	for i := range cv.NumField() {
		if f := cv.Field(i); f.CanSet() && f.IsZero() {
			f.Set(dv.Field(i))
		}
	}
	if keepListen {
		c.NATSListen = ""
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	switch {
	case c.WALSegmentMB < 1 || c.WALSegmentMB > 1024:
		return fmt.Errorf("%w: --wal-segment-mb %d is outside 1 to 1024", ErrConfig, c.WALSegmentMB)
	case c.TickInterval < 10*time.Millisecond:
		return fmt.Errorf("%w: tick interval %s is below 10ms", ErrConfig, c.TickInterval)
	case c.ExpireBatch < 1:
		return fmt.Errorf("%w: expire batch %d must be at least 1", ErrConfig, c.ExpireBatch)
	case c.MinTTL < 1:
		return fmt.Errorf("%w: min ttl %d must be at least 1 second", ErrConfig, c.MinTTL)
	case c.MaxKeyBytes < 1 || c.MaxKeyBytes > subjects.MaxKeyBytes*4:
		return fmt.Errorf("%w: max key bytes %d out of range 1..%d", ErrConfig, c.MaxKeyBytes, subjects.MaxKeyBytes*4)
	case c.MaxValueBytes < 1 || c.MaxMetadataBytes < 2:
		return fmt.Errorf("%w: value and metadata limits must be positive", ErrConfig)
	case c.MaxLeases < 1 || c.MaxKeysPerLease < 1:
		return fmt.Errorf("%w: lease limits must be positive", ErrConfig)
	case c.MaxTxnCompares < 1 || c.MaxTxnOps < 1 || c.MaxTxnBytes < 1:
		return fmt.Errorf("%w: transaction limits must be positive", ErrConfig)
	case c.HistoryRevisions < 1 || c.HistoryAge < time.Millisecond:
		return fmt.Errorf("%w: change log limits must be positive", ErrConfig)
	case c.IdempotencyEntries < 1 || c.IdempotencyRevisions < 1:
		return fmt.Errorf("%w: idempotency limits must be positive", ErrConfig)
	case c.MetricsTenants < 0:
		return fmt.Errorf("%w: metrics tenants %d below 0", ErrConfig, c.MetricsTenants)
	case !(c.ListingShare >= 0.1 && c.ListingShare <= 1):
		return fmt.Errorf("%w: listing share %g out of range 0.1..1", ErrConfig, c.ListingShare)
	case c.MaxInflight < 1:
		return fmt.Errorf("%w: max inflight %d must be at least 1", ErrConfig, c.MaxInflight)
	case c.BootstrapWait < 0:
		return fmt.Errorf("%w: bootstrap wait %s must not be negative", ErrConfig, c.BootstrapWait)
	case c.BusCheckInterval < 50*time.Millisecond:
		return fmt.Errorf("%w: bus check interval %s is below 50ms", ErrConfig, c.BusCheckInterval)
	}
	if err := c.validateConsole(); err != nil {
		return err
	}
	if _, err := subjects.New(c.SubjectPrefix); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := subjects.ValidateNodeID(c.NodeID); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if c.Bootstrap && c.Join {
		return fmt.Errorf("%w: --bootstrap and --join exclude each other", ErrConfig)
	}
	if e := c.NATSEventsAuth; !e.given() && (e.Password != "" || e.TLSKey != "") {
		return fmt.Errorf("%w: a password or key for the watch-event connection needs its user or certificate (--nats-events-user)", ErrConfig)
	}
	if c.NATSURL != "" && c.NATSConfigFile != "" {
		return fmt.Errorf("%w: --nats-config configures the embedded server, not with --nats-url", ErrConfig)
	}
	if err := c.RaftTLS.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.NATSURL != "" && (c.NATSClusterListen != "" || len(c.NATSRoutes) > 0) {
		return fmt.Errorf("%w: NATS cluster and route settings are for the embedded server, not with --nats-url", ErrConfig)
	}
	return nil
}

// decodeLimits are the limits the request decoder checks (after
// fillDefaults).
func (c *Config) decodeLimits() decode.Limits {
	return decode.Limits{
		MinTTL: c.MinTTL, MaxKeyBytes: c.MaxKeyBytes, MaxValueBytes: c.MaxValueBytes, MaxMetadataBytes: c.MaxMetadataBytes,
		MaxTxnCompares: c.MaxTxnCompares, MaxTxnOps: c.MaxTxnOps, MaxTxnBytes: c.MaxTxnBytes,
	}
}

// validateConsole refuses a console that anyone who reaches the address
// could read: one on an address other than loopback without a password.
func (c *Config) validateConsole() error {
	if c.ConsoleListen == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(c.ConsoleListen)
	if err != nil {
		return fmt.Errorf("%w: --console-listen %q: %v", ErrConfig, c.ConsoleListen, err)
	}
	if !console.LoopbackHost(host) && c.ConsolePassword == "" {
		return fmt.Errorf("%w: --console-listen %s is not a loopback address, and the console has no password: set CONCORD_CONSOLE_PASSWORD or --console-password-file", ErrConfig, c.ConsoleListen)
	}
	if c.ConsolePassword != "" && c.ConsoleUser == "" {
		return fmt.Errorf("%w: the console has a password but no --console-user", ErrConfig)
	}
	return nil
}
