package metrics

import (
	"context"
	"strings"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walmetrics "github.com/hashicorp/raft-wal/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sys/unix"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
)

// Metrics holds a node's Prometheus collectors. Counters of what the state
// machine did (grants, renewals, revokes, expirations) are counted where
// entries are applied, so every replica reports them; the expiry lag, the
// tick, request and lease-clock metrics come from the leader's work. The
// request metrics are the node's request stats, which the nats micro
// STATS reply reads too; the node registers them in Registry.
type Metrics struct {
	reg *prometheus.Registry

	// grantsExplicit and grantsAnonymous are leaseGrants' two series,
	// looked up once rather than per apply.
	grantsExplicit, grantsAnonymous prometheus.Counter
	leaseRenewals                   prometheus.Counter
	leaseRevokes                    prometheus.Counter
	leaseRevokeKeys                 prometheus.Histogram
	leaseExpirations                prometheus.Counter
	leaseExpiryKeys                 prometheus.Histogram
	LeaseExpiryLag                  prometheus.Histogram

	tickDuration   prometheus.Histogram
	tickScanned    prometheus.Counter
	tickExpired    prometheus.Counter
	tickBatches    prometheus.Histogram
	ClockExtension prometheus.Histogram

	WatchEvents prometheus.Counter

	// ClusterConflict is 1 while another cluster serves the prefix on the
	// bus; refusedReplies counts requests dropped for their reply subject.
	ClusterConflict prometheus.Gauge
	DiskFull        prometheus.Gauge
	RefusedReplies  *prometheus.CounterVec

	leaderChanges prometheus.Counter
	ApplyDuration prometheus.Histogram
	// listingPaused counts the time listings gave way to writes.
	listingPaused    prometheus.Counter
	snapshotDuration prometheus.Histogram
	snapshotBytes    prometheus.Gauge
	snapshotTime     prometheus.Gauge
	snapshotFailures prometheus.Counter

	// wal receives the Raft log store's own counters (raft_wal_*).
	wal *walMetrics

	// Tenants labels the tenants' series (tenants.go); TenantRequests
	// counts the requests of tenants other than the default one, by
	// outcome ("ok" or the error name), on the leader that served them.
	Tenants        *TenantLabels
	TenantRequests *prometheus.CounterVec
}

// keyBuckets suit counts of keys on one lease: 0 to the default limit.
var keyBuckets = []float64{0, 1, 2, 5, 10, 50, 100, 500, 1000, 5000, 10000}

// lagBuckets suit expiry lag and clock extension: a few milliseconds in
// steady state, seconds around a failover.
var lagBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 1.5, 2, 5, 10, 30}

// Source is what the metrics read from the node at scrape time. Its
// methods are called only while a scrape runs, so a source may be handed
// over before the parts it reads exist, as long as they exist before the
// first scrape.
type Source interface {
	// ReadState calls f with the applied state, under the state
	// machine's read lock.
	ReadState(f func(*fsm.State))
	// AppliedIndex is the last log index the state machine applied;
	// BatchEntries counts the batch entries it applied since start.
	AppliedIndex() uint64
	BatchEntries() uint64
	// Raft is the node's Raft, nil until it runs.
	Raft() *raft.Raft
	// Batching reports whether this node puts concurrent commands into
	// shared log entries.
	Batching() bool
	// LeaseClockRunning reports whether this node's lease clock runs
	// (it leads, and sees no other cluster on the bus).
	LeaseClockRunning() bool
	// DataDir is the node's data directory.
	DataDir() string
	// SnapshotDebt is the commands applied since the newest snapshot,
	// and the debt at which a busy node takes the next one.
	SnapshotDebt() (debt, dueAt uint64)
}

// New makes the collectors, reading the state from src; at most
// tenantLabels tenants get series of their own (TenantLabels).
func New(src Source, tenantLabels int) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), Tenants: NewTenantLabels(tenantLabels)}
	f := factory{m.reg}
	grants := f.counterVec("concord_lease_grants_total", "Leases granted, by grant or, anonymous, by a put with a ttl.", "anonymous")
	m.grantsExplicit, m.grantsAnonymous = grants.WithLabelValues("false"), grants.WithLabelValues("true")
	m.leaseRenewals = f.counter("concord_lease_renewals_total", "Leases renewed by keep-alives (each lease of a batched keep-alive counts).")
	m.leaseRevokes = f.counter("concord_lease_revokes_total", "Leases revoked.")
	m.leaseRevokeKeys = f.histogram("concord_lease_revoke_keys", "Keys attached to each revoked lease.", keyBuckets)
	m.leaseExpirations = f.counter("concord_lease_expirations_total", "Leases expired.")
	m.leaseExpiryKeys = f.histogram("concord_lease_expiry_keys", "Keys attached to each expired lease.", keyBuckets)
	m.LeaseExpiryLag = f.histogram("concord_lease_expiry_lag_seconds", "Lease-clock time from a lease's deadline to the commit of its expiry, read by the leader as it applies the entry (followers do not observe it).", lagBuckets)
	m.tickDuration = f.histogram("concord_lease_tick_duration_seconds", "Leader expiry ticks: time to find expired leases and commit their expiry (or the tick entry).", prometheus.DefBuckets)
	m.tickScanned = f.counter("concord_lease_tick_scanned_total", "Lease deadlines the leader's committed ticks examined: the expired ones and the first one not yet due.")
	m.tickExpired = f.counter("concord_lease_tick_expired_total", "Leases the leader's ticks found past their deadline and proposed to expire, once committed (apply re-checks each deadline).")
	m.tickBatches = f.histogram("concord_lease_tick_expire_batches", "Entries one tick proposed: expire entries of --expire-batch leases each, or one tick entry when nothing expired.", []float64{0, 1, 2, 5, 10, 20, 50, 100})
	m.ClockExtension = f.histogram("concord_lease_clock_extension_seconds", "At each leadership gain, how long the lease clock stood still as seen by the new leader: every lease gained this much time.", lagBuckets)

	m.WatchEvents = f.counter("concord_watch_events_published_total", "Watch events this node published (the leader publishes them).")

	m.ClusterConflict = f.gauge("concord_cluster_conflict", "1 while this node sees another Concord cluster serving the same subject prefix on the NATS bus; the cluster then serves no requests.")
	m.RefusedReplies = f.counterVec("concord_requests_refused_reply_total", "Requests dropped unexecuted and unanswered because their reply subject is one a reply may not go to, by reason: concord_subject, system_subject or invalid_subject.", "reason")

	m.leaderChanges = f.counter("concord_raft_leader_changes_total", "Times this node saw a new Raft leader.")
	m.listingPaused = f.counter("concord_listing_paused_seconds_total", "Time listings of many keys paused to give way to writes in flight (--listing-share).")
	m.ApplyDuration = f.histogram("concord_raft_apply_duration_seconds", "Time from proposing a request's command to its result from the state machine.", prometheus.DefBuckets)
	m.snapshotDuration = f.histogram("concord_snapshot_persist_duration_seconds", "Time to write a Raft snapshot of the state.", prometheus.DefBuckets)
	m.DiskFull = f.gauge("concord_disk_full", "1 while this node's data directory has no room for its next Raft log segment (or too little beside it); as leader it then refuses new leases, puts and transactions with 507 disk_full.")
	m.snapshotBytes = f.gauge("concord_snapshot_bytes", "Size of the last snapshot this node wrote.")
	m.snapshotTime = f.gauge("concord_snapshot_last_timestamp_seconds", "When this node last wrote a snapshot (Unix seconds; 0 before its first).")
	m.snapshotFailures = f.counter("concord_snapshot_failures_total", "Snapshots this node asked for when one was due, and that failed.")

	m.wal = newWALMetrics(f)
	m.TenantRequests = f.counterVec("concord_tenant_requests_total", "Requests of tenants other than Concord's own account that this node served as leader, by tenant (\"other\" past --metrics-tenants) and outcome: ok, or the error reply's name (limit_exceeded for a quota).", "tenant", "outcome")

	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&stateCollector{src: src, tenants: m.Tenants}, raftSink())
	return m
}

// Registry is where every collector of the node is registered; /metrics
// serves it.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// WAL receives the Raft log store's own counters (raft_wal_*).
func (m *Metrics) WAL() walmetrics.Collector { return m.wal }

// factory registers collectors as it makes them.
type factory struct{ reg *prometheus.Registry }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	f.reg.MustRegister(h)
	return h
}

// ObserveResult counts what one applied command did.
func (m *Metrics) ObserveResult(r *fsm.Result) {
	if r.Err != nil || r.Cached {
		return
	}
	if n := r.Leases.Granted; n > 0 {
		m.grantsExplicit.Add(float64(n))
	}
	if n := r.Leases.GrantedAnonymous; n > 0 {
		m.grantsAnonymous.Add(float64(n))
	}
	if n := r.Leases.Renewed; n > 0 {
		m.leaseRenewals.Add(float64(n))
	}
	if rep, ok := r.Reply.(*schema.LeaseRevokeReply); ok {
		m.leaseRevokes.Inc()
		m.leaseRevokeKeys.Observe(float64(rep.Deleted))
	}
	for _, e := range r.Expired {
		m.leaseExpirations.Inc()
		m.leaseExpiryKeys.Observe(float64(e.Keys))
	}
}

// ObserveExpiryLag records, for each lease an applied command expired, the
// lease-clock time from its deadline to committed: the leader's lease clock
// when the entry that expired it was applied. Not the command's stamp: the
// leader stamps an expire command when it finds the lease due, and during
// a mass expiry its entries wait behind one another to commit and apply,
// which the stamp does not see.
func (m *Metrics) ObserveExpiryLag(expired []fsm.ExpiredLease, committed int64) {
	for _, e := range expired {
		m.LeaseExpiryLag.Observe(float64(committed-e.Deadline) / 1000)
	}
}

// ObserveSnapshot records a persisted snapshot.
func (m *Metrics) ObserveSnapshot(d time.Duration, bytes int64) {
	m.snapshotDuration.Observe(d.Seconds())
	m.snapshotBytes.Set(float64(bytes))
	m.snapshotTime.Set(float64(time.Now().UnixMilli()) / 1000)
}

// CountSnapshotFailure counts a snapshot that was due and failed.
func (m *Metrics) CountSnapshotFailure() { m.snapshotFailures.Inc() }

// CountLeaderChanges registers an observer of r's leaders at once and returns
// what counts the leader changes it sees, until ctx ends. It is called as
// soon as r exists: a lone voter elects itself within milliseconds of its
// start, and an observer registered after that would miss the
// node's first leadership.
func (m *Metrics) CountLeaderChanges(r *raft.Raft) func(ctx context.Context) {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(obs)
	return func(ctx context.Context) {
		defer r.DeregisterObserver(obs)
		m.countLeaders(ctx.Done(), ch)
	}
}

// countLeaders counts the leader changes among the observations on ch
// until done closes.
func (m *Metrics) countLeaders(done <-chan struct{}, ch <-chan raft.Observation) {
	var last raft.ServerID
	for {
		select {
		case <-done:
			return
		case o := <-ch:
			// A leader that loses its quorum and wins again in a new
			// term is a change too, as etcd counts it.
			lo := o.Data.(raft.LeaderObservation)
			if lo.LeaderID != "" && lo.LeaderID != last {
				m.leaderChanges.Inc()
			}
			last = lo.LeaderID
		}
	}
}

// stateCollector reports gauges read from the state and from Raft at
// scrape time, so they cost nothing between scrapes.
type stateCollector struct {
	src     Source
	tenants *TenantLabels
}

var (
	descRevision    = prometheus.NewDesc("concord_revision", "The cluster revision this node has applied.", nil, nil)
	descKeys        = prometheus.NewDesc("concord_keys", "Keys in the store.", nil, nil)
	descFloor       = prometheus.NewDesc("concord_kv_compact_revision", "The key history's floor of Concord's own account (each tenant's history has its own): reads at revisions below it, and changes at or below it, are gone.", nil, nil)
	descHistory     = prometheus.NewDesc("concord_kv_history_changes", "Changes the key history holds above its floor, every tenant's.", nil, nil)
	descLeases      = prometheus.NewDesc("concord_leases_active", "Active leases, by kind (explicit or anonymous).", []string{"kind"}, nil)
	descAttached    = prometheus.NewDesc("concord_lease_attached_keys", "Keys attached to leases.", nil, nil)
	descLeaseClock  = prometheus.NewDesc("concord_lease_clock_seconds", "The replicated lease clock at the last applied entry.", nil, nil)
	descRaftState   = prometheus.NewDesc("concord_raft_state", "1 for this node's Raft state (follower, candidate, leader, shutdown), 0 for the others.", []string{"state"}, nil)
	descRaftTerm    = prometheus.NewDesc("concord_raft_term", "The current Raft term.", nil, nil)
	descCommitIndex = prometheus.NewDesc("concord_raft_commit_index", "The highest log index known to be committed.", nil, nil)
	descApplied     = prometheus.NewDesc("concord_raft_applied_index", "The highest log index the state machine has applied.", nil, nil)
	descLastIndex   = prometheus.NewDesc("concord_raft_last_index", "The last index in this node's log.", nil, nil)
	descBatchCount  = prometheus.NewDesc("concord_raft_batch_entries_applied_total", "Log entries carrying the commands of several requests that this node applied (since it started; entries replayed at start are not counted).", nil, nil)
	descBatching    = prometheus.NewDesc("concord_raft_batch_entries", "1 while this node leads and puts concurrent requests' commands into shared log entries, which it does once every member has said its release reads them; 0 otherwise.", nil, nil)
	descHasLeader   = prometheus.NewDesc("concord_raft_has_leader", "1 while this node knows a Raft leader (itself included), 0 otherwise.", nil, nil)
	descVoters      = prometheus.NewDesc("concord_cluster_voters", "Voting members in the Raft configuration this node holds.", nil, nil)
	descClockRuns   = prometheus.NewDesc("concord_lease_clock_running", "1 while this node's lease clock runs: it leads and sees no other cluster on its prefix. Leases expire only while some node's does.", nil, nil)
	descLeaseLimit  = prometheus.NewDesc("concord_lease_limit", "The most leases the cluster holds: the limit in force, which the leader that last set it took from its --max-leases; a grant past it is refused.", nil, nil)
	descDiskFree    = prometheus.NewDesc("concord_data_dir_free_bytes", "Bytes free to this node on the filesystem of its data directory.", nil, nil)
	descDiskSize    = prometheus.NewDesc("concord_data_dir_size_bytes", "Size in bytes of the filesystem of this node's data directory.", nil, nil)
	descReplayDebt  = prometheus.NewDesc("concord_snapshot_replay_commands", "Commands applied since this node's newest snapshot: what a restart would replay after restoring it.", nil, nil)
	descReplayDue   = prometheus.NewDesc("concord_snapshot_replay_due_commands", "The replay debt at which a busy node takes its next snapshot (--snapshot-threshold, or a quarter of the keys and history changes it holds when more).", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRevision, descKeys, descFloor, descHistory, descLeases, descAttached, descLeaseClock, descRaftState, descRaftTerm, descCommitIndex, descApplied, descLastIndex, descBatching, descBatchCount,
		descHasLeader, descVoters, descClockRuns, descLeaseLimit, descDiskFree, descDiskSize, descReplayDebt, descReplayDue,
		descTenantKeys, descTenantLeases, descTenantBytes, descTenantHistory, descTenantQuota} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	var rev, now, floor int64
	var keys, attached, history int
	var explicit, anon, leaseLimit int64
	c.src.ReadState(func(st *fsm.State) {
		rev, now, keys, attached = st.Revision(), st.Now(), st.KeyCount(), st.AttachedKeyCount()
		leaseLimit = st.Limits().MaxLeases
		floor, history = st.CompactRevision(), st.HistoryChanges()
		explicit, anon = st.LeaseCount()
		collectTenants(st, c.tenants, ch)
	})
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descRevision, float64(rev))
	gauge(descKeys, float64(keys))
	gauge(descFloor, float64(floor))
	gauge(descHistory, float64(history))
	gauge(descLeases, float64(explicit), "explicit")
	gauge(descLeases, float64(anon), "anonymous")
	gauge(descAttached, float64(attached))
	gauge(descLeaseClock, float64(now)/1000)
	gauge(descApplied, float64(c.src.AppliedIndex()))
	ch <- prometheus.MustNewConstMetric(descBatchCount, prometheus.CounterValue, float64(c.src.BatchEntries()))
	gauge(descClockRuns, boolGauge(c.src.LeaseClockRunning()))
	gauge(descLeaseLimit, float64(leaseLimit))
	debt, due := c.src.SnapshotDebt()
	gauge(descReplayDebt, float64(debt))
	gauge(descReplayDue, float64(due))
	var fs unix.Statfs_t
	if err := unix.Statfs(c.src.DataDir(), &fs); err == nil {
		gauge(descDiskFree, float64(fs.Bavail)*float64(fs.Bsize))
		gauge(descDiskSize, float64(fs.Blocks)*float64(fs.Bsize))
	}
	r := c.src.Raft()
	if r == nil {
		return // /metrics answers from before Raft starts
	}
	state := r.State()
	for _, st := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if st == state {
			v = 1
		}
		gauge(descRaftState, v, strings.ToLower(st.String()))
	}
	gauge(descRaftTerm, float64(r.CurrentTerm()))
	gauge(descCommitIndex, float64(r.CommitIndex()))
	gauge(descLastIndex, float64(r.LastIndex()))
	gauge(descBatching, boolGauge(c.src.Batching()))
	leader, _ := r.LeaderWithID()
	gauge(descHasLeader, boolGauge(leader != ""))
	if f := r.GetConfiguration(); f.Error() == nil {
		voters := 0
		for _, srv := range f.Configuration().Servers {
			if srv.Suffrage == raft.Voter {
				voters++
			}
		}
		gauge(descVoters, float64(voters))
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// The go-metrics sink that bridges hashicorp/raft's own measurements
// (commit time, log dispatch and store time, FSM apply, snapshots, RPCs)
// into Prometheus as raft_* metrics. go-metrics has one global sink per
// process, so every node in a process (tests run several) shares it.
var (
	raftSinkOnce sync.Once
	raftSinkVal  *goMetricsSink
)

// raftSink returns the process's one go-metrics sink (go-metrics' global is
// one per process), which every node registers in its registry.
func raftSink() prometheus.Collector {
	raftSinkOnce.Do(func() {
		sink := newGoMetricsSink()
		conf := gometrics.DefaultConfig("")
		conf.EnableHostname = false
		conf.EnableRuntimeMetrics = false
		if _, err := gometrics.NewGlobal(conf, sink); err != nil {
			panic(err) // only on a bad configuration, which this is not
		}
		raftSinkVal = sink
	})
	return raftSinkVal
}

// walMetrics bridges hashicorp/raft-wal's metrics into the node's registry:
// each counter of wal.MetricDefinitions becomes raft_wal_<name>_total, each
// gauge raft_wal_<name>. Every node has its own (unlike go-metrics' global
// sink), and the WAL calls it directly, with no second metrics system.
type walMetrics struct {
	counters map[string]prometheus.Counter
	gauges   map[string]prometheus.Gauge
}

var _ walmetrics.Collector = (*walMetrics)(nil)

func newWALMetrics(f factory) *walMetrics {
	w := &walMetrics{counters: map[string]prometheus.Counter{}, gauges: map[string]prometheus.Gauge{}}
	for _, d := range wal.MetricDefinitions.Counters {
		w.counters[d.Name] = f.counter("raft_wal_"+d.Name+"_total", "Raft log (raft-wal): "+d.Desc)
	}
	for _, d := range wal.MetricDefinitions.Gauges {
		w.gauges[d.Name] = f.gauge("raft_wal_"+d.Name, "Raft log (raft-wal): "+d.Desc)
	}
	return w
}

// IncrementCounter adds delta to a counter; a name the definitions did not
// list is dropped rather than panicking in the write path.
func (w *walMetrics) IncrementCounter(name string, delta uint64) {
	if c, ok := w.counters[name]; ok {
		c.Add(float64(delta))
	}
}

// SetGauge sets a gauge; an unlisted name is dropped.
func (w *walMetrics) SetGauge(name string, val uint64) {
	if g, ok := w.gauges[name]; ok {
		g.Set(float64(val))
	}
}

// ObserveTick records one tick whose entries committed: its duration, the
// deadlines it examined (the expired ones, then the first one not yet due,
// if any) and the entries it proposed, batch leases to an entry (a tick
// entry alone when nothing expired).
func (m *Metrics) ObserveTick(start time.Time, expired int, leases int64, batch int) {
	m.tickDuration.Observe(time.Since(start).Seconds())
	scanned := expired
	if leases > int64(expired) {
		scanned++
	}
	m.tickScanned.Add(float64(scanned))
	m.tickExpired.Add(float64(expired))
	m.tickBatches.Observe(float64(max(1, (expired+batch-1)/batch)))
}

// ObserveListingPause counts the time a listing paused for writes.
func (m *Metrics) ObserveListingPause(d time.Duration) { m.listingPaused.Add(d.Seconds()) }
