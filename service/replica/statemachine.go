package replica

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/datadir"
)

// StateMachine adapts fsm.State to raft.BatchingFSM. It owns the lock that
// lets request handlers read while Raft applies, tracks the index the state
// has applied (raft.AppliedIndex counts entries handed to the FSM goroutine,
// not applied ones), and passes each entry's events on in log order.
type StateMachine struct {
	mu    sync.RWMutex
	state *fsm.State
	// cachedView is a view of the default tenant's space as it stands,
	// taken by the first read that needed one since the last apply and
	// shared by those after it; nil when none was taken since. tenantViews
	// are the same for other tenants. Guarded by mu.
	cachedView  *fsm.View
	tenantViews map[string]*fsm.View
	// policy is the state's fsm.TenantPolicy, taken again after each
	// apply of a command that changes it and after a restore.
	policy atomic.Pointer[fsm.TenantPolicy]

	Applied AppliedIndex
	// onEvents is called from the Raft FSM goroutine, in log order, outside
	// mu, with the term of the entry the events come from and the tenant
	// whose events they are.
	onEvents func(term uint64, tenant string, events []schema.Event)
	// OnResult, when set, sees the result of every command after index
	// countFrom and the lease-clock time it applied at, on the FSM
	// goroutine, outside mu (telemetry). Entries up to countFrom were in
	// the log at start-up: Raft applies them again after a restart, and
	// counting them again would count old activity as new.
	OnResult  func(r *fsm.Result, now int64)
	CountFrom uint64
	// batchEntries counts the batch entries applied after countFrom.
	batchEntries atomic.Uint64
	// OnSnapshot, when set, learns each persisted snapshot's duration and
	// size (telemetry).
	OnSnapshot func(d time.Duration, bytes int64)
	// SnapshotVersion, when set, says which snapshot version to write
	// (fsm.Snapshot.WriteVersion); unset, the current one.
	SnapshotVersion func() int
	// commands counts the commands applied by this process (each command
	// of a batch entry, a restart's replay included), updated under mu;
	// snapCommands is the count the newest snapshot holds, the one this
	// node persisted or restored last. Their difference is what a restart
	// would apply again on top of that snapshot (snaptrigger.go).
	commands     atomic.Uint64
	snapCommands atomic.Uint64
	// clockMoved is when the last applied entry that advanced the lease
	// clock was appended to the log (Raft records the leader's time in the
	// entry, so it survives restarts), guarded by mu; zero when unknown.
	clockMoved time.Time
}

var _ raft.BatchingFSM = (*StateMachine)(nil)

func NewStateMachine(onEvents func(term uint64, tenant string, events []schema.Event)) *StateMachine {
	m := &StateMachine{state: fsm.New(), onEvents: onEvents, Applied: NewAppliedIndex()}
	m.policy.Store(m.state.TenantPolicy())
	return m
}

// TenantPolicy returns the tenants' quotas and refusals as of the last
// apply, without the lock.
func (m *StateMachine) TenantPolicy() *fsm.TenantPolicy { return m.policy.Load() }

// Commands counts the commands this process applied, a restart's replay
// included.
func (m *StateMachine) Commands() uint64 { return m.commands.Load() }

// BatchEntries counts the batch entries applied after CountFrom.
func (m *StateMachine) BatchEntries() uint64 { return m.batchEntries.Load() }

func (m *StateMachine) Apply(l *raft.Log) any {
	return m.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies a batch of log entries under one lock acquisition.
// The response to a single-command entry is its *fsm.Result; to a batch
// entry (fsm.IsBatch, built by the proposer), the []fsm.Result of its
// commands in order.
func (m *StateMachine) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	results := make([][]fsm.Result, len(logs))
	m.mu.Lock()
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		before := m.state.Now()
		rs := m.state.ApplyEntry(l.Data)
		results[i] = rs
		m.commands.Add(uint64(len(rs)))
		if fsm.IsBatch(l.Data) {
			out[i] = rs
			if l.Index > m.CountFrom {
				m.batchEntries.Add(1)
			}
		} else {
			out[i] = &rs[0]
		}
		if m.state.Now() > before && !l.AppendedAt.IsZero() {
			m.clockMoved = l.AppendedAt
		}
	}
	if len(logs) > 0 {
		// Under the lock, so the applied index always matches the state.
		m.Applied.set(logs[len(logs)-1].Index)
		m.dropViews()
		for _, rs := range results {
			if policyChanged(rs) {
				m.policy.Store(m.state.TenantPolicy())
				break
			}
		}
	}
	m.mu.Unlock()
	for i, rs := range results {
		for j := range rs {
			r := &rs[j]
			if len(r.Events) > 0 {
				m.onEvents(logs[i].Term, r.Tenant, r.Events)
			}
			// Telemetry counts commands, not entries.
			if m.OnResult != nil && logs[i].Index > m.CountFrom {
				m.OnResult(r, r.Now)
			}
		}
	}
	return out
}

// SinceClockMoved is how long ago the last entry that advanced the lease
// clock was appended, by the wall clock (so across machines it includes
// their skew), or since start when that is unknown (a state restored from a
// snapshot alone).
func (m *StateMachine) SinceClockMoved(start time.Time) time.Duration {
	m.mu.RLock()
	t := m.clockMoved
	m.mu.RUnlock()
	if t.IsZero() {
		t = start
	}
	return time.Since(t)
}

// Read runs f with the state locked for reading: Apply waits until f
// returns, so f must be short (a look-up, not a walk over many keys).
func (m *StateMachine) Read(f func(*fsm.State)) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	f(m.state)
}

// View returns a point-in-time View of tenant's space as it stands, for
// a read that walks many keys: it runs on the View without the lock, so
// Apply does not wait for it. Taking a View holds the lock for a moment (a
// btree Clone writes to the tree it clones, so not under the read lock),
// and makes the next writes copy the tree nodes on their paths, so a read
// that looks one thing up uses read instead. Reads of one tenant between
// two applies share one View.
func (m *StateMachine) View(tenant string) *fsm.View {
	m.mu.RLock()
	v := m.cachedViewOf(tenant)
	m.mu.RUnlock()
	if v != nil {
		return v
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v := m.cachedViewOf(tenant); v != nil {
		return v
	}
	if tenant == fsm.DefaultTenant {
		m.cachedView = m.state.View()
		return m.cachedView
	}
	v = m.state.In(tenant).View()
	if m.tenantViews == nil {
		m.tenantViews = map[string]*fsm.View{}
	}
	m.tenantViews[tenant] = v
	return v
}

// cachedViewOf returns the view of tenant taken since the last apply, or
// nil. Called under mu.
func (m *StateMachine) cachedViewOf(tenant string) *fsm.View {
	if tenant == fsm.DefaultTenant {
		return m.cachedView
	}
	return m.tenantViews[tenant]
}

// dropViews forgets the views taken before an apply. Called under mu.
func (m *StateMachine) dropViews() {
	m.cachedView = nil
	clear(m.tenantViews)
}

// Digest returns the applied index and revision and, when withHash, the
// SHA-256 of the state's snapshot encoding at that index: replicas that
// applied the same log agree on it.
func (m *StateMachine) Digest(withHash bool) (applied uint64, revision int64, hash string) {
	m.mu.Lock()
	applied, revision = m.Applied.Get(), m.state.Revision()
	var snap *fsm.Snapshot
	if withHash {
		snap = m.state.Snapshot()
	}
	m.mu.Unlock()
	if snap != nil {
		h := sha256.New()
		if _, err := snap.WriteTo(h); err == nil {
			hash = hex.EncodeToString(h.Sum(nil))
		}
	}
	return applied, revision, hash
}

// Snapshot takes an O(1) copy-on-write snapshot. Raft calls it on the FSM
// goroutine, between applies, so the applied index matches the state.
func (m *StateMachine) Snapshot() (raft.FSMSnapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	commands := m.commands.Load()
	return &fsmSnapshot{index: m.Applied.Get(), snap: m.state.Snapshot(), onPersisted: func(d time.Duration, bytes int64) {
		m.snapshotHolds(commands)
		if m.OnSnapshot != nil {
			m.OnSnapshot(d, bytes)
		}
	}, version: m.SnapshotVersion}, nil
}

// snapshotHolds records that the newest snapshot holds the first n
// commands this process applied. It never moves back: a follower may
// install a newer snapshot while an older one is still being written.
func (m *StateMachine) snapshotHolds(n uint64) {
	for {
		old := m.snapCommands.Load()
		if n <= old || m.snapCommands.CompareAndSwap(old, n) {
			return
		}
	}
}

// ReplayDebt is how many commands were applied since the newest snapshot,
// which a restart would apply again, and how many records (keys and the
// history's changes) the state holds, which a restart restores.
func (m *StateMachine) ReplayDebt() (commands, records uint64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	records = uint64(m.state.KeyCount()) + uint64(m.state.HistoryChanges())
	return m.commands.Load() - m.snapCommands.Load(), records
}

// Restore replaces the state from a snapshot written by fsmSnapshot.Persist.
func (m *StateMachine) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	applied, err := datadir.ReadSnapshotFrame(rc)
	if err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	ns := fsm.New()
	if err := ns.Restore(rc); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	m.mu.Lock()
	m.state = ns
	m.dropViews()
	m.policy.Store(ns.TenantPolicy())
	m.snapshotHolds(m.commands.Load())
	m.mu.Unlock()
	m.Applied.set(applied)
	return nil
}

// fsmSnapshot frames the fsm snapshot with the applied index
// (datadir.WriteSnapshotFrame), so a restored node knows which entries its
// state already contains.
type fsmSnapshot struct {
	index uint64
	snap  *fsm.Snapshot
	// onPersisted, when set, learns how long writing took and how many
	// bytes were written.
	onPersisted func(d time.Duration, bytes int64)
	// version, when set, picks the version to write, as
	// stateMachine.snapshotVersion.
	version func() int
}

func (f *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	start := time.Now()
	frame, err := datadir.WriteSnapshotFrame(sink, f.index)
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	version := fsm.SnapshotVersion
	if f.version != nil {
		version = f.version()
	}
	n, err := f.snap.WriteVersion(sink, version)
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return err
	}
	if f.onPersisted != nil {
		f.onPersisted(time.Since(start), n+int64(frame))
	}
	return nil
}

func (f *fsmSnapshot) Release() {}

// AppliedIndex is a monotonic index that goroutines can wait on.
type AppliedIndex struct {
	mu    sync.Mutex
	index uint64
	// changed is closed and replaced whenever index advances.
	changed chan struct{}
}

// NewAppliedIndex returns an applied index at 0.
func NewAppliedIndex() AppliedIndex {
	return AppliedIndex{changed: make(chan struct{})}
}

func (a *AppliedIndex) set(i uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i <= a.index {
		return
	}
	a.index = i
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *AppliedIndex) Get() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.index
}

// WaitCh returns the current index and a channel closed when it advances.
func (a *AppliedIndex) WaitCh() (uint64, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.index, a.changed
}

// BackupSnapshot takes the fsm snapshot together with the applied index and
// revision it holds, under the lock Apply takes, so the three agree.
func (m *StateMachine) BackupSnapshot() (snap *fsm.Snapshot, applied uint64, revision int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.Snapshot(), m.Applied.Get(), m.state.Revision()
}

// policyChanged reports whether any of the results changed the tenants'
// policy.
func policyChanged(rs []fsm.Result) bool {
	for i := range rs {
		if rs[i].Err == nil && fsm.ChangesTenantPolicy(rs[i].Op) {
			return true
		}
	}
	return false
}
