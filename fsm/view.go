package fsm

import "github.com/concord-io/concord/schema"

// View is a read-only copy of the state as it stood when it was taken.
// Taking one is O(1): the trees a read touches are cloned copy-on-write, so
// the state goes on applying while the view is read, and a long read (a
// listing of many keys, a scan of the change log) never makes a write wait.
// Reading a view needs no lock; taking one does (Clone writes to the tree it
// clones), so take it where Apply cannot run at the same time.
//
// A view costs writes something: each write after it copies the tree nodes
// on its path that the view still shares (once per node, not per write).
// Take one when a read needs it, not after every write.
type View struct {
	s *State
}

// View returns a point-in-time view of the current space of the state:
// the default tenant's, or a tenant's for s.In(tenant).View(). It must not
// run concurrently with Apply, View or Snapshot on the same state.
func (s *State) View() *View {
	// Copy the scalars whole, so that one added to State is carried
	// without a change here; the trees are replaced by clones below. The
	// state and its one space are allocated together.
	vs := &struct {
		st State
		sp space
	}{st: *s, sp: *s.space}
	c, sp := &vs.st, &vs.sp
	sp.kv = s.kv.Clone()
	sp.leases = s.leases.Clone()
	sp.attached = s.attached.Clone()
	sp.hist = s.hist.clone()
	// No read walks these: leave them out rather than share them with the
	// live state, so a read that came to use one fails loudly (nil) in
	// the tests instead of racing with Apply. Nor the other spaces: they
	// are not the view's to read.
	sp.expiry = nil
	sp.idemByKey, sp.idemBySeq = nil, nil
	c.space = sp
	c.spaces, c.names = nil, nil
	c.prevs = nil
	// Never applied to: its look-ups allocate their own pivots.
	c.applying, c.pivotRec, c.pivotLease = false, record{}, lease{}
	c.versionSlab = nil
	c.activity = LeaseActivity{}
	return &View{s: c}
}

// Revision returns the cluster revision when the view was taken.
func (v *View) Revision() int64 { return v.s.revision }

// Now returns the lease-clock time of the last command applied before the
// view was taken.
func (v *View) Now() int64 { return v.s.now }

// CompactRevision returns the history's floor when the view was taken.
func (v *View) CompactRevision() int64 { return v.s.hist.floor }

// KeyCount returns the number of keys of the view's tenant.
func (v *View) KeyCount() int { return v.s.kv.Len() }

// Tenant returns the tenant whose space the view reads.
func (v *View) Tenant() string { return v.s.name }

// Get answers a read at the view's revision, as State.Get does.
func (v *View) Get(q GetQuery, now int64) *schema.KVGetReply { return v.s.Get(q, now) }

// GetAt answers a read at a revision, as State.GetAt does.
func (v *View) GetAt(q GetQuery, rev int64, now int64) (*schema.KVGetReply, error) {
	return v.s.GetAt(q, rev, now)
}

// History returns the changes of one key, as State.History does.
func (v *View) History(q HistoryQuery) (*schema.KVHistoryReply, error) { return v.s.History(q) }

// Changes reads the change log, as State.Changes does.
func (v *View) Changes(q ChangesQuery) (*schema.KVChangesReply, error) { return v.s.Changes(q) }

// LeaseInfo describes a lease, as State.LeaseInfo does.
func (v *View) LeaseInfo(id int64, withKeys bool, now int64) (*schema.LeaseInfo, error) {
	return v.s.LeaseInfo(id, withKeys, now)
}

// LeaseList lists leases, as State.LeaseList does.
func (v *View) LeaseList(includeAnonymous bool, after int64, limit int, now int64) *schema.LeaseListReply {
	return v.s.LeaseList(includeAnonymous, after, limit, now)
}
