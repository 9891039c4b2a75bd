package serving

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/decode"
	"github.com/concord-io/concord/service/loglimit"
	"github.com/concord-io/concord/subjects"
)

// Node is what a Server needs of the node it serves for. The server asks
// it at the moment of each request, so the node may hand it over before
// Raft runs, as long as every method works by the time the node serves.
type Node interface {
	// LeaseNow is the lease clock's time in milliseconds, and whether it
	// runs (only on the leader, and not during a bus conflict).
	LeaseNow() (now int64, running bool)
	// AllRead reports whether every member reads log format f.
	AllRead(f int) bool
	// ConflictError is the reply to every request while another cluster
	// serves this prefix on the bus, nil otherwise.
	ConflictError() *schema.Error
	// DiskFullError is the reply to a request to ep while the log's disk
	// is full, nil when ep may go on.
	DiskFullError(ep subjects.Endpoint) *schema.Error
	// Apply appends an entry to the Raft log.
	Apply(entry []byte) raft.ApplyFuture
	// CommitIndex, VerifyLeader and WaitApplied are what the read barrier
	// asks of Raft and the state machine.
	CommitIndex() uint64
	VerifyLeader() raft.Future
	WaitApplied(index uint64, timeout time.Duration) *schema.Error
}

// State is the replicated state as the handlers read it;
// *replica.StateMachine is one.
type State interface {
	// Read calls f under the state's read lock.
	Read(f func(*fsm.State))
	// View returns a view of a tenant's space as it stands, for long
	// reads.
	View(tenant string) *fsm.View
	// TenantPolicy returns the tenants' quotas and refusals as of the
	// last apply, without a lock.
	TenantPolicy() *fsm.TenantPolicy
	// BackupSnapshot takes the state's snapshot with its applied index
	// and revision.
	BackupSnapshot() (snap *fsm.Snapshot, applied uint64, revision int64)
}

// HandlerFunc serves one request of Concord's own account (the cluster
// endpoints, which tenants cannot call).
type HandlerFunc func(ctx context.Context, m *nats.Msg) (any, *schema.Error)

// handler serves one request of a tenant (fsm.DefaultTenant for Concord's
// own account).
type handler func(ctx context.Context, m *nats.Msg, tenant string) (any, *schema.Error)

// ownAccount adapts the handler of an endpoint that tenants cannot call
// (handle refuses them before it runs).
func ownAccount(h HandlerFunc) handler {
	return func(ctx context.Context, m *nats.Msg, _ string) (any, *schema.Error) { return h(ctx, m) }
}

// ClusterHandlers are the cluster endpoints the node serves itself, since
// they act on Raft's membership: the server routes them like any other.
type ClusterHandlers struct {
	Join, Remove, Status, Snapshot HandlerFunc
}

// Options configure a Server.
type Options struct {
	// NodeID names the node in the micro service's metadata; DataDir
	// holds the backups a leader keeps while they are read; Version is
	// the release that the micro service reports.
	NodeID, DataDir, Version string
	// MaxInflight bounds the requests handled at once.
	MaxInflight int
	// ListingShare is the share of the time listings may take from
	// writes in flight.
	ListingShare float64
	// TestAllowAnyReply lets a reply go to any subject (tests only).
	TestAllowAnyReply bool
	// ApplyTimeout bounds a read's wait for the read barrier.
	ApplyTimeout time.Duration

	Log   *slog.Logger
	Names subjects.Names
	// Conn is the connection requests arrive on and replies leave by;
	// MaxPayload is its max payload.
	Conn       *nats.Conn
	MaxPayload int64
	Decoder    decode.Decoder
	Cluster    ClusterHandlers

	// ApplyDuration observes each write from proposing to its result;
	// RefusedReplies counts requests dropped for their reply subject, by
	// reason; ListingPaused learns each pause a listing made for writes.
	ApplyDuration  prometheus.Observer
	RefusedReplies *prometheus.CounterVec
	ListingPaused  func(time.Duration)
	// TenantRequests, when set, counts the requests of tenants other than
	// the default one by TenantLabel(tenant) and outcome ("ok" or the
	// error name).
	TenantRequests *prometheus.CounterVec
	TenantLabel    func(tenant string) string
	// OnServing is called once a leader subscription is up, before any
	// request can reach it.
	OnServing func()
}

// A Server serves the request subjects while its node leads: the micro
// service, the worker pool, the endpoint table, the proposer, the read
// barrier, replies and the reply guard, request counts and backups.
type Server struct {
	cfg  Options
	node Node
	sm   State
	ctx  context.Context

	reads    *readBarrier
	proposer *proposer
	pool     *workerPool[job]
	reqStats *requestStats
	replyLog loglimit.Every
	// rates are the tenants' request-rate buckets, tenantCounts their
	// request counters (tenantrate.go).
	rates        tenantRates
	tenantCounts tenantCounters
	// refusals holds the answers to requests over their tenant's rate.
	refusals *refusalHold

	backupOnce  sync.Once
	backupStore *backupStore

	// subsMu guards microSvc: the nats micro service through which the
	// leader serves requests; nil while not leading.
	subsMu   sync.Mutex
	microSvc micro.Service
	// servingSince is when the leader subscription came up (unix
	// nanoseconds), 0 while there is none.
	servingSince atomic.Int64
}

// New returns a server for node over state sm; it serves nothing until
// Subscribe. Its workers and backups end with ctx.
func New(ctx context.Context, o Options, node Node, sm State) *Server {
	s := &Server{
		cfg: o, node: node, sm: sm, ctx: ctx,
		reqStats: newRequestStats(subjects.Endpoints),
		replyLog: loglimit.Every{Interval: replyLogEvery},
	}
	s.reads = newReadBarrier(node, node, node, o.ApplyTimeout)
	s.proposer = newProposer(func(entry []byte) raft.ApplyFuture { return node.Apply(entry) }, false)
	s.proposer.stop = ctx
	s.pool = newWorkerPool(o.MaxInflight, workerIdle, ctx.Done(), s.handle)
	s.refusals = newRefusalHold(refusalDelay, maxHeldRefusals, s.answerRefusal)
	go s.refusals.run(ctx)
	if o.RefusedReplies != nil {
		// Every reason's series from the start, at 0: an alert on its
		// increase sees the first refusal, which a series born at 1 hides.
		for _, reason := range replyRefusedReasons {
			o.RefusedReplies.WithLabelValues(reason)
		}
	}
	return s
}

// Wait returns once the server's context has ended and every refusal it
// held has been answered: the node closes its NATS connection only
// after, so that no held request goes unanswered.
func (s *Server) Wait() { <-s.refusals.done }

// ServingSince is when the leader subscription came up (unix
// nanoseconds), 0 while there is none.
func (s *Server) ServingSince() int64 { return s.servingSince.Load() }

// SetBatching turns on or off the putting of concurrent commands into
// shared log entries; Batching reports which.
func (s *Server) SetBatching(on bool) { s.proposer.batching.Store(on) }

// Batching reports whether concurrent commands share log entries.
func (s *Server) Batching() bool { return s.proposer.batching.Load() }

// RequestStats is the collector of the request metrics, counted over the
// server's life.
func (s *Server) RequestStats() prometheus.Collector { return s.reqStats }

// Observe counts one request to ep answered after d with e (nil: a
// reply), for requests answered outside the server (the standby).
func (s *Server) Observe(ep subjects.Endpoint, d time.Duration, e *schema.Error) {
	s.reqStats.observe(ep, d, e)
}

// Endpoints lists every endpoint the server routes, in a fixed order.
func (s *Server) Endpoints() []subjects.Endpoint { return endpointOrder(s.handlers()) }
