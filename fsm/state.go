package fsm

import (
	"encoding/json"
	"fmt"

	"github.com/concord-io/concord/schema"
)

// btreeDegree trades node size against depth; 32 is what etcd's index uses.
const btreeDegree = 32

// record is one key's current value. Records are immutable once in the tree:
// a write replaces the pointer, so a cloned tree (a snapshot in progress)
// keeps seeing the old record.
//
// The pointers come first: the collector scans an object only up to its
// last pointer, and there is one record per key.
type record struct {
	key   string
	value json.RawMessage
	// extra holds the put's content type and metadata; nil, one pointer,
	// for the many records without them.
	extra          *recordExtra
	createRevision int64
	modRevision    int64
	version        int64
	lease          int64
}

// recordExtra is what a put may carry besides its value, stored and
// returned unchanged.
type recordExtra struct {
	contentType string
	metadata    json.RawMessage
}

func newExtra(contentType string, metadata json.RawMessage) *recordExtra {
	if contentType == "" && len(metadata) == 0 {
		return nil
	}
	return &recordExtra{contentType: contentType, metadata: metadata}
}

func (r *record) contentType() string {
	if r.extra == nil {
		return ""
	}
	return r.extra.contentType
}

func (r *record) metadata() json.RawMessage {
	if r.extra == nil {
		return nil
	}
	return r.extra.metadata
}

// lease is one lease. Immutable once in the tree, like record.
type lease struct {
	id              int64
	ttl             int64 // seconds
	deadline        int64 // lease-clock milliseconds
	grantedRevision int64
	anonymous       bool
	metadata        json.RawMessage
	keyCount        int64
}

// attachment indexes lease -> key so a lease's keys can be walked in order.
type attachment struct {
	lease int64
	key   string
}

// deadlineEntry orders leases by deadline for the expiry scan. It is derived
// state: rebuilt on restore, never written to a snapshot.
type deadlineEntry struct {
	deadline int64
	id       int64
}

// State is the replicated state. The zero value is not usable; call New.
//
// The keyspace, leases, history and idempotency cache of each tenant are a
// space of their own (tenant.go); the revision, the lease clock and the
// limits are the cluster's. The embedded space is the one the command
// being applied, or the read being answered, works in: the default
// tenant's between commands.
type State struct {
	*space
	// spaces holds every tenant's space by name, the default tenant's
	// ("") included; names keeps them in order, for the writers and the
	// expiry scan, which must not depend on map order.
	spaces map[string]*space
	names  []string

	// prevs collects, for each event the command being applied makes, the
	// record it replaced or deleted (nil for a new key), for recordChanges.
	// Reset by each command; not part of the state or its snapshot.
	prevs []*record
	// applying is set while ApplyCommand runs. Then, and only then, the
	// look-ups use the pivots below rather than allocate one each: no
	// reader runs on this State during an apply (the service reads under
	// a lock Apply excludes, or on a View, which is a copy of its own).
	// Not part of the state or its snapshot.
	applying bool
	// versionSlab is what is left of the slab new versions are taken
	// from (newVersion). Not part of the state or its snapshot.
	versionSlab []version
	pivotRec    record
	pivotLease  lease

	revision int64
	now      int64
	limits   Limits
	// leaseTotal counts the leases of every space, for MaxLeases, which
	// bounds the cluster's memory whatever the tenants.
	leaseTotal int64
	// quotas are the tenants' quotas (quota.go), QuotaDefault's included.
	// Never changed in place (setQuota makes a new map), so views and
	// snapshots share it.
	quotas map[string]Quota
	// quota is the quota of the tenant whose command is being applied,
	// set by enter. Not part of the state or its snapshot.
	quota Quota

	// activity counts what the command being applied did to leases; it is
	// reset by each command and is not part of the state or its snapshot.
	activity LeaseActivity
}

// LeaseActivity counts what one command did to leases, for telemetry.
type LeaseActivity struct {
	// Granted and GrantedAnonymous count new leases: by grant, and by a
	// put with a ttl (in a transaction too).
	Granted, GrantedAnonymous int64
	// Renewed counts leases a keep-alive renewed.
	Renewed int64
}

// Result is what applying one command produced.
type Result struct {
	Op Op
	// Reply is the schema reply type of the command (nil for ticks and
	// limit changes).
	Reply any
	// Err is set when the command failed; the state is then unchanged but
	// for the lease clock.
	Err error
	// Events are the key changes, in op_index order, all at one revision
	// per lease for expiries and at one revision otherwise.
	Events []schema.Event
	// Expired lists the leases an Expire command removed.
	Expired []ExpiredLease
	// Cached says the reply is a remembered one: the command carried an
	// idempotency key already used for the same request, and changed
	// nothing this time.
	Cached bool
	// Leases counts what the command did to leases; zero when it failed.
	Leases LeaseActivity
	// Now is the lease-clock time the command applied at.
	Now int64
	// Tenant is the tenant the command applied for: its events are that
	// tenant's, and its lease ids are in that tenant's space.
	Tenant string
}

// ExpiredLease reports one lease removed by an Expire command.
type ExpiredLease struct {
	ID       int64
	Keys     int64
	Deadline int64
}

// New returns an empty state with the default limits.
func New() *State {
	def := newSpace("")
	return &State{space: def, spaces: map[string]*space{"": def}, names: []string{""}, limits: DefaultLimits}
}

func lessAttachment(a, b attachment) bool {
	if a.lease != b.lease {
		return a.lease < b.lease
	}
	return a.key < b.key
}

func lessDeadline(a, b deadlineEntry) bool {
	if a.deadline != b.deadline {
		return a.deadline < b.deadline
	}
	return a.id < b.id
}

// Revision returns the cluster revision.
func (s *State) Revision() int64 { return s.revision }

// Now returns the lease-clock time of the last applied command.
func (s *State) Now() int64 { return s.now }

// Limits returns the count limits in force.
func (s *State) Limits() Limits { return s.limits }

// KeyCount returns the number of keys, of every tenant.
func (s *State) KeyCount() int {
	n := 0
	s.each(func(sp *space) { n += sp.kv.Len() })
	return n
}

// AttachedKeyCount returns the number of keys attached to leases, of every
// tenant.
func (s *State) AttachedKeyCount() int {
	n := 0
	s.each(func(sp *space) { n += sp.attached.Len() })
	return n
}

// LeaseCount returns the number of leases, explicit and anonymous, of
// every tenant.
func (s *State) LeaseCount() (explicit, anonymous int64) {
	s.each(func(sp *space) {
		explicit += int64(sp.leases.Len()) - sp.anonymous
		anonymous += sp.anonymous
	})
	return explicit, anonymous
}

// Apply decodes and applies one log entry. A malformed entry yields a Result
// whose Err wraps ErrBadCommand and changes nothing.
//
// Apply takes single-command entries only; a batch entry (IsBatch) fails
// here and goes through ApplyEntry, which returns a result per command.
func (s *State) Apply(data []byte) Result {
	c, err := Decode(data)
	if err != nil {
		return Result{Err: err, Now: s.now}
	}
	return s.ApplyCommand(c)
}

// ApplyCommand applies one decoded command.
func (s *State) ApplyCommand(c Command) Result {
	// The clock never runs backwards: commands proposed concurrently may be
	// stamped out of log order.
	if c.Now > s.now {
		s.now = c.Now
	}
	s.activity = LeaseActivity{}
	s.prevs = s.prevs[:0]
	s.applying = true
	s.enter(c.Tenant)
	defer func() { s.applying = false; s.leave() }()
	var r Result
	if err := s.tenantRefusal(); err != nil {
		// A moving or moved tenant's command changes nothing; its expiry
		// is no error (its leases are frozen, or gone).
		if c.Op != OpExpire {
			r.Err = err
		}
		r.Op, r.Now, r.Tenant = c.Op, s.now, c.Tenant
		return r
	}
	if c.IdempotencyKey != "" && mutates(c.Op) {
		r = s.applyIdempotent(c, s.now)
	} else {
		r = s.applyBody(c.Op, c.Body, s.now)
	}
	s.pruneIdempotency()
	if len(r.Events) > 0 {
		s.recordChanges(r.Events, s.now)
	}
	if r.Err == nil && !r.Cached {
		r.Leases = s.activity
	}
	r.Now = s.now
	r.Tenant = c.Tenant
	return r
}

func (s *State) applyBody(op Op, body any, now int64) Result {
	var r Result
	if bodyOp, ok := opOfBody(body); ok {
		r = ops[bodyOp].apply(s, now, body)
	} else {
		r.Err = fmt.Errorf("%w: body %T", ErrBadCommand, body)
	}
	r.Op = op
	if r.Err != nil {
		r.Reply, r.Events = nil, nil
	}
	return r
}

// withDefaults fills limits that a command or an older snapshot left unset.
func (l Limits) withDefaults() Limits {
	if l.IdempotencyEntries <= 0 {
		l.IdempotencyEntries = DefaultLimits.IdempotencyEntries
	}
	if l.IdempotencyRevisions <= 0 {
		l.IdempotencyRevisions = DefaultLimits.IdempotencyRevisions
	}
	if l.HistoryRevisions <= 0 {
		l.HistoryRevisions = DefaultLimits.HistoryRevisions
	}
	if l.HistoryAgeMS <= 0 {
		l.HistoryAgeMS = DefaultLimits.HistoryAgeMS
	}
	return l
}
