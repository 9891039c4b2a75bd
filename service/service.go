package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/service/bus"
	"github.com/concord-io/concord/service/decode"
	"github.com/concord-io/concord/service/loglimit"
	"github.com/concord-io/concord/service/logstore"
	"github.com/concord-io/concord/service/metrics"
	"github.com/concord-io/concord/service/replica"
	"github.com/concord-io/concord/service/serving"
	"github.com/concord-io/concord/subjects"
)

// Service is a running Concord node.
type Service struct {
	cfg   Config
	log   *slog.Logger
	names subjects.Names

	ns *server.Server // nil when connected to an external NATS
	// nsOpts are the embedded server's options: its routes, leaf nodes and
	// gateways, which a bootstrap waits for (service/bus).
	nsOpts *server.Options
	nc     *nats.Conn
	// dec decodes the cluster requests the node serves itself, under the
	// configured limits; it is set once NATS is connected.
	dec decode.Decoder

	store *logstore.Store
	// diskFull is why the log's disk is full, nil while it has room
	// (diskfull.go).
	diskFull atomic.Pointer[string]
	snaps    raft.SnapshotStore
	// raftLayer is what Raft's transport runs on: the TCP stream layer, or
	// TLS over it.
	raftLayer raft.StreamLayer
	trans     *raft.NetworkTransport
	raft      *raft.Raft
	sm        *replica.StateMachine
	// formats turns batching on while every member reads batch entries.
	formats *bus.FormatGate

	metrics *metrics.Metrics
	http    *http.Server // the operator listener, when configured
	console *http.Server // the operator console, when configured
	started time.Time

	clock leaseClock
	pub   *publisher
	// applied waits for the state machine's applied index; it is made
	// with Raft, and is set before s.raft.
	applied  replica.AppliedWaiter
	notifyCh chan bool
	// srv serves the request subjects while this node leads; it is made
	// once the state machine exists, before anything can ask for it.
	srv *serving.Server

	// failed receives the error that stops a running node (a refused
	// join); the process should exit with it.
	failed chan error

	// eventsNC is the connection watch events go out on. It subscribes to
	// nothing, so no request can steer a reply onto it, and with the
	// shipped roles only it may publish on watch subjects (service/serving/replyguard.go).
	eventsNC *nats.Conn

	// raftStarted is set once s.raft is assigned; node info, /readyz,
	// /metrics and the standby read s.raft only after it, since they
	// answer from before Raft starts.
	raftStarted atomic.Bool
	// phase is the startPhase until Raft runs (startup.go).
	phase atomic.Int32
	// restore is the progress of the snapshot restore that runs, if any.
	restore replica.RestoreProgress
	// replayFrom is the applied index when Raft started (what the
	// snapshot restored) and lastAtStart the last index of the log then:
	// a restart replays the entries between them. Set before raftStarted.
	replayFrom, lastAtStart uint64
	// standby answers requests with 503 while this node cannot serve and
	// no other node leads (service/bus).
	standby *bus.Standby
	// caughtUp is closed once this node has applied the log it started
	// with (caughtup.go).
	caughtUp chan struct{}
	// stopping is set when Close begins.
	stopping atomic.Bool
	// pause is the test hook that holds a snapshot restore or write
	// (replica.TestPause); nil unless a test set one.
	pause *replica.TestPause
	// nodeInfoSubscribed is set once this node answers for itself; only
	// start-up touches it.
	nodeInfoSubscribed bool
	// prober asks the bus about other nodes; its probes' replies are ones
	// this node's own node-info subscription leaves unanswered.
	prober *bus.Prober
	// guard keeps the node from founding or rejoining a cluster on a bus
	// where another cluster serves the prefix.
	guard bus.Guard
	// fence holds another cluster serving this prefix on the bus, if any;
	// fenceCh wakes the leadership loop when it changes.
	fence   *bus.Fence
	fenceCh chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
}

// Start starts a node and returns once its parts are running; it serves
// requests as soon as Raft elects it (at once, for a single node).
func Start(cfg Config) (*Service, error) {
	cfg.fillDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	names, _ := subjects.New(cfg.SubjectPrefix)
	s := &Service{
		cfg:      cfg,
		log:      cfg.Logger,
		names:    names,
		notifyCh: make(chan bool, 16),
		failed:   make(chan error, 1),
		fenceCh:  make(chan struct{}, 1),
		caughtUp: make(chan struct{}),
	}
	s.started = time.Now()
	s.metrics = metrics.New(metricsSource{s}, s.cfg.MetricsTenants)
	s.fence = bus.NewFence(bus.FenceHooks{Hold: s.clock.hold, Release: s.clock.release, Gauge: s.metrics.ClusterConflict.Set, Changed: s.signalFence}, names, s.log)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.WatchStartup != nil {
		cfg.WatchStartup(s.startupProgress)
	}
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Service) start() error {
	opts := []nats.Option{
		nats.Name("concord-" + s.cfg.NodeID),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ErrorHandler(natsErrorHandler(s.log)),
	}
	url := s.cfg.NATSURL
	auth, err := s.cfg.NATSAuth.options()
	if err != nil {
		return err
	}
	opts = append(opts, auth...)
	if url == "" {
		ns, nsOpts, err := startEmbeddedNATS(&s.cfg, s.log)
		if err != nil {
			return err
		}
		s.ns, s.nsOpts = ns, nsOpts
		url = inProcessURL(ns)
		opts = append(opts, nats.InProcessServer(ns))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return natsConnectError(url, s.ns != nil, err)
	}
	s.nc = nc
	s.prober = bus.NewProber(nc, s.names)
	var embedded *bus.Embedded
	if s.ns != nil {
		embedded = &bus.Embedded{Server: s.ns, Opts: s.nsOpts}
	}
	s.guard = bus.Guard{Prober: s.prober, Names: s.names, Embedded: embedded, Wait: s.cfg.BootstrapWait, Log: s.log}
	s.formats = bus.NewFormatGate(bus.FormatGateOptions{Self: s.cfg.NodeID, Members: s.raftMembers, Prober: s.prober,
		Every: s.cfg.BusCheckInterval, Log: s.log,
		// The gate changes batching only within a leadership term, once
		// the server exists.
		Batching: func(on bool) { s.srv.SetBatching(on) }})
	s.dec = decode.New(s.cfg.decodeLimits(), nc.MaxPayload())
	if need := int64(s.cfg.MaxValueBytes + payloadHeadroom); nc.MaxPayload() < need {
		s.log.Warn("the NATS max_payload is below the largest value plus its envelope; large puts will be refused by NATS",
			"max_payload", nc.MaxPayload(), "max_value_bytes", s.cfg.MaxValueBytes)
	}
	// Watch events go out on a connection of their own, which answers no
	// request (service/serving/replyguard.go).
	eventsAuth, err := s.cfg.eventsAuth().options()
	if err != nil {
		return fmt.Errorf("watch event connection: %w", err)
	}
	eventsOpts := append([]nats.Option{
		nats.Name("concord-" + s.cfg.NodeID + "-events"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ErrorHandler(eventsErrorHandler(s.log.With("connection", "events"))),
	}, eventsAuth...)
	if s.ns != nil {
		eventsOpts = append(eventsOpts, nats.InProcessServer(s.ns))
	}
	s.eventsNC, err = nats.Connect(url, eventsOpts...)
	if err != nil {
		return fmt.Errorf("watch event connection: %w", natsConnectError(url, s.ns != nil, err))
	}
	s.pub = newPublisher(s.eventsNC, s.names, s.log, s.metrics.WatchEvents)
	s.sm = replica.NewStateMachine(s.pub.enqueue)
	s.sm.OnResult = s.observeApplied
	s.sm.OnSnapshot = s.metrics.ObserveSnapshot
	s.sm.SnapshotVersion = s.formats.SnapshotVersion
	s.goRun(s.pub.run)
	s.srv = serving.New(s.ctx, serving.Options{
		NodeID: s.cfg.NodeID, DataDir: s.cfg.DataDir, Version: s.cfg.Version,
		MaxInflight: s.cfg.MaxInflight, ListingShare: s.cfg.ListingShare, TestAllowAnyReply: s.cfg.TestAllowAnyReply,
		ApplyTimeout: s.cfg.ApplyTimeout,
		Log:          s.log, Names: s.names, Conn: s.nc, MaxPayload: nc.MaxPayload(), Decoder: s.dec,
		Cluster:        serving.ClusterHandlers{Join: s.handleJoin, Remove: s.handleRemove, Status: s.handleStatus, Snapshot: s.handleSnapshot},
		ApplyDuration:  s.metrics.ApplyDuration,
		RefusedReplies: s.metrics.RefusedReplies,
		TenantRequests: s.metrics.TenantRequests,
		TenantLabel:    s.metrics.Tenants.Label,
		ListingPaused:  s.metrics.ObserveListingPause,
		// The standby leaves every later request to the subscription.
		OnServing: func() { s.standby.Set(false) },
	}, servingNode{s}, s.sm)
	// The request metrics are the counters micro's STATS reads.
	s.metrics.Registry().MustRegister(s.srv.RequestStats())
	if s.cfg.TestPauseFile != "" {
		s.pause = replica.NewTestPause(s.cfg.TestPauseFile, s.log, s.ctx.Done())
	}
	// From here on the node is never silent: until it serves, the standby
	// answers requests with what it is doing, and /readyz says the same.
	s.standby = bus.NewStandby(bus.StandbyOptions{NodeID: s.cfg.NodeID, Conn: s.nc, Names: s.names, Log: s.log,
		Prober: s.prober, Settled: bus.Settled(s.guard.Embedded), Endpoints: s.srv.Endpoints()}, standbyNode{s}, s.srv)
	s.goRun(s.standby.Run)
	if s.cfg.MetricsListen != "" {
		if err := s.serveHTTP(s.cfg.MetricsListen); err != nil {
			return err
		}
	}
	if s.cfg.ConsoleListen != "" {
		if err := s.serveConsole(s.cfg.ConsoleListen); err != nil {
			return err
		}
	}
	if err := s.startRaft(); err != nil {
		return err
	}
	s.goRun(func(ctx context.Context) { s.fence.Watch(ctx, s.prober, s.cfg.DataDir, s.cfg.BusCheckInterval) })
	s.goRun(s.runLeadership)
	s.goRun(replica.SnapshotTrigger{SM: s.sm, Raft: s.raft, CaughtUp: s.caughtUp,
		Threshold: s.cfg.SnapshotThreshold, Interval: s.cfg.SnapshotInterval, Log: s.log, OnFailure: s.metrics.CountSnapshotFailure}.Run)
	s.goRun(s.watchCaughtUp)
	s.log.Info("concord started", "node", s.cfg.NodeID, "nats", url, "raft", s.cfg.RaftAddr, "data_dir", s.cfg.DataDir, "prefix", s.cfg.SubjectPrefix)
	return nil
}

// eventsLogEvery spaces the log lines about the watch-event connection's
// errors.
const eventsLogEvery = 10 * time.Second

// eventsErrorHandler logs the watch-event connection's asynchronous
// errors, at most one line per eventsLogEvery: a role that may not publish
// watch events is refused every event. A permission violation says what to
// fix.
func eventsErrorHandler(log *slog.Logger) nats.ErrHandler {
	limit := loglimit.Every{Interval: eventsLogEvery}
	return func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if !limit.Allow() {
			return
		}
		if errors.Is(err, nats.ErrPermissionViolation) {
			log.Error("watch events are refused by NATS: the watch-event connection's user may not publish on the watch subjects; with deploy/nats/roles.conf, give it the events role (--nats-events-user concord-events)", "err", err)
			return
		}
		log.Warn("nats asynchronous error", "err", err)
	}
}

func (s *Service) goRun(f func(context.Context)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f(s.ctx)
	}()
}

// Failed delivers the error that stopped a running node, such as a join
// refused because the node belongs to another cluster.
func (s *Service) Failed() <-chan error { return s.failed }

func (s *Service) fail(err error) {
	s.log.Error("node failed", "err", err)
	select {
	case s.failed <- err:
	default:
	}
}

// NATSURL returns the client URL of the embedded NATS server, or the
// configured external URL.
func (s *Service) NATSURL() string {
	if s.ns != nil {
		return s.ns.ClientURL()
	}
	return s.cfg.NATSURL
}

// Close stops serving, then shuts down Raft and closes the log store so
// that every acknowledged write is on disk, then stops NATS.
func (s *Service) Close() error {
	var errs []error
	s.closed.Do(func() {
		s.stopping.Store(true) // the standby stays down
		s.closeHTTP()
		if s.srv != nil {
			s.srv.Unsubscribe()
		}
		// No more events: an apply must not wait on a publisher that is
		// stopping, or Raft's shutdown would wait on the apply.
		if s.pub != nil {
			s.pub.stop()
		}
		s.cancel()
		if s.raft != nil {
			if err := s.raft.Shutdown().Error(); err != nil {
				errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
			}
		}
		s.wg.Wait()
		if s.srv != nil {
			s.srv.Wait() // the held refusals answered, before the connection goes
		}
		if s.trans != nil {
			s.trans.Close()
		}
		if s.store != nil {
			if err := s.store.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if s.nc != nil {
			s.nc.Close()
		}
		if s.eventsNC != nil {
			s.eventsNC.Close()
		}
		if s.ns != nil {
			s.ns.Shutdown()
			// The server's goroutines end on their own; do not let a peer
			// that stopped reading hold the process up.
			done := make(chan struct{})
			go func() { s.ns.WaitForShutdown(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				errs = append(errs, errors.New("embedded nats: shutdown still running after 10s"))
			}
		}
	})
	return errors.Join(errs...)
}
