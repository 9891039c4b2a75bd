package fsm

import (
	"encoding/json"
	"fmt"

	"github.com/concord-io/concord/schema"
)

// Moving a tenant to another cluster (docs/tenancy.md). The operator's
// tool drives it with TenantMove commands on both clusters:
//
//	source: MoveFence    the tenant's requests are refused (503, retry) and its
//	                     leases frozen: none expires, and each keeps the time it
//	                     had left at the fence
//	source → target:     the space is read (ExportTenant) and written on the
//	                     target in chunks (MoveImport), the tenant refused there
//	                     until
//	target: MoveActivate the tenant is served on the target
//	source: MoveFinish   the tenant is refused for good, naming where it went,
//	                     and its data is dropped
//
// or MoveAbort on either side: the source serves the tenant again (its leases
// gain the time they were frozen, as with a leader change), the target drops
// what it imported. Every step is a command of the log, so every replica of
// each cluster agrees on what the tenant may do, and a write the source
// applies after the fence is refused by the state machine itself, whoever
// proposed it.

// Tenant statuses, as snapshots store them.
const (
	tenantActive    byte = 0
	tenantMoving    byte = 1
	tenantImporting byte = 2
	tenantMoved     byte = 3
)

// Move phases.
const (
	MoveFence    byte = 1
	MoveImport   byte = 2
	MoveActivate byte = 3
	MoveFinish   byte = 4
	MoveAbort    byte = 5
)

// TenantMove is one step of a tenant's move, proposed by the operator in
// the default space.
type TenantMove struct {
	Tenant string
	Phase  byte
	// To names the cluster the tenant goes to (its subject prefix), for
	// MoveFence: the source names it when it refuses the tenant.
	To string
	// MoveImport's chunk: leases, keys and idempotency entries as
	// ExportTenant read them; NextLeaseID (MoveActivate) keeps the
	// target's counter past every id the source handed out.
	Leases      []MovedLease
	Keys        []MovedKey
	Idempotency []MovedIdem
	NextLeaseID int64
}

// MovedLease is a lease as it moves: its remaining time at the fence.
type MovedLease struct {
	ID, TTL, RemainingMS int64
	Anonymous            bool
	Metadata             json.RawMessage
}

// MovedKey is a key as it moves. Revisions are the source cluster's and
// stay behind: on the target a key carries the revision of its import.
type MovedKey struct {
	Key         string
	Value       json.RawMessage
	Version     int64
	Lease       int64
	ContentType string
	Metadata    json.RawMessage
}

// MovedIdem is an idempotency entry as it moves, so that a retry on the
// target of a request the source applied is answered, not applied again.
type MovedIdem struct {
	Key   string
	Hash  [32]byte
	Reply json.RawMessage
}

// ErrTenantUnavailable: the tenant is moving, or has moved, and nothing
// was changed.
var ErrTenantUnavailable = newSentinel("tenant unavailable", schema.ErrUnavailable)

// ErrImportConflict: a chunk of a move names a lease, key or idempotency
// key the target already holds for the tenant, or attaches a key to a
// lease it does not hold; nothing was changed.
var ErrImportConflict = newSentinel("import conflict", schema.ErrInvalidRequest)

// Check refuses a move step no replica may apply, whatever the state: a
// tenant that cannot move, an unknown phase, a malformed chunk or one that
// names a lease, key or idempotency key twice. Decode calls it, so an
// entry that decodes never fails for its shape; the service calls it to
// refuse such a request before it is proposed.
func (m *TenantMove) Check() error {
	if m.Tenant == DefaultTenant || ValidateTenant(m.Tenant) != nil {
		return fmt.Errorf("a move names tenant %q", m.Tenant)
	}
	if m.Phase < MoveFence || m.Phase > MoveAbort {
		return fmt.Errorf("move phase %d", m.Phase)
	}
	leases := make(map[int64]bool, len(m.Leases))
	for _, l := range m.Leases {
		if l.ID < 1 || l.ID > MaxLeaseID || l.TTL < 1 || l.TTL > schema.MaxTTL || l.RemainingMS < 0 || l.RemainingMS > schema.MaxTTL*1000 || leases[l.ID] {
			return fmt.Errorf("lease %d of the chunk is malformed or named twice", l.ID)
		}
		leases[l.ID] = true
	}
	keys := make(map[string]bool, len(m.Keys))
	for _, k := range m.Keys {
		if k.Key == "" || len(k.Value) == 0 || k.Version < 1 || k.Version > schema.MaxRevision || k.Lease < 0 || k.Lease > MaxLeaseID || keys[k.Key] {
			return fmt.Errorf("key %q of the chunk is malformed or named twice", k.Key)
		}
		keys[k.Key] = true
	}
	idem := make(map[string]bool, len(m.Idempotency))
	for _, e := range m.Idempotency {
		if e.Key == "" || len(e.Reply) == 0 || idem[e.Key] {
			return fmt.Errorf("idempotency key %q of the chunk is malformed or named twice", e.Key)
		}
		idem[e.Key] = true
	}
	return nil
}

// tenantRefusal is the error a request of the current space gets while the
// space is not active, or nil.
func (s *State) tenantRefusal() error {
	switch s.status {
	case tenantMoving:
		return errf(ErrTenantUnavailable, "tenant %s is moving to the cluster at subject prefix %q; nothing was changed; retry", s.name, s.movedTo)
	case tenantImporting:
		return errf(ErrTenantUnavailable, "tenant %s is being moved to this cluster; nothing was changed; retry", s.name)
	case tenantMoved:
		return errf(ErrTenantUnavailable, "tenant %s moved to the cluster at subject prefix %q; point its account's imports there; nothing was changed", s.name, s.movedTo)
	}
	return nil
}

// TenantRefusal returns the error every request of tenant gets while it
// moves or after it moved, or nil while it is served here.
func (s *State) TenantRefusal(tenant string) error {
	sp, ok := s.spaces[tenant]
	if !ok || sp.status == tenantActive {
		return nil // the common case, without a copy of the state
	}
	return s.In(sp.name).tenantRefusal()
}

func (s *State) moveTenant(now int64, m *TenantMove) (any, error) {
	sp := s.spaces[m.Tenant]
	status := tenantActive
	if sp != nil {
		status = sp.status
	}
	wrong := func() error {
		return errf(ErrTenantUnavailable, "tenant %s cannot take move step %d in its state (%d); nothing was changed", m.Tenant, m.Phase, status)
	}
	switch m.Phase {
	case MoveFence:
		if sp == nil || status != tenantActive || m.To == "" {
			return nil, wrong()
		}
		sp.status, sp.movedTo, sp.fencedAt = tenantMoving, m.To, now
	case MoveImport:
		if sp != nil && status != tenantImporting {
			return nil, wrong()
		}
		if err := s.importConflict(m); err != nil {
			return nil, err
		}
		if sp == nil {
			sp = newSpace(m.Tenant)
			sp.status = tenantImporting
			s.addSpace(sp)
		}
		s.importChunk(sp, now, m)
	case MoveActivate:
		if sp == nil || status != tenantImporting {
			return nil, wrong()
		}
		if id, ok := keylessAnonymousLease(sp); ok {
			return nil, errf(ErrImportConflict, "move of tenant %s: anonymous lease %d has no key; import its key or abort the move; nothing was changed", m.Tenant, id)
		}
		sp.status = tenantActive
		sp.nextLeaseID = max(sp.nextLeaseID, m.NextLeaseID)
	case MoveFinish:
		if sp == nil || status != tenantMoving {
			return nil, wrong()
		}
		// The tenant's data goes, without events: its watchers are the
		// target's now.
		s.leaseTotal -= int64(sp.leases.Len())
		moved := newSpace(sp.name)
		moved.status, moved.movedTo, moved.nextLeaseID = tenantMoved, sp.movedTo, sp.nextLeaseID
		// Its history is gone with it: its floor is the present, so no
		// revision of its past is looked for in any space's log.
		moved.hist.floor = s.revision
		s.spaces[sp.name] = moved
	case MoveAbort:
		switch status {
		case tenantMoving:
			// The leases were frozen: they gain the time, as with a
			// leader change, and are never expired early.
			s.thaw(sp, now-sp.fencedAt)
			sp.status, sp.movedTo, sp.fencedAt = tenantActive, "", 0
		case tenantImporting:
			s.leaseTotal -= int64(sp.leases.Len())
			delete(s.spaces, sp.name)
			s.dropName(sp.name)
			s.coverFirstRevision()
		default:
			return nil, wrong()
		}
	default: // refused by Check when the entry was decoded
		return nil, errf(ErrBadCommand, "move phase %d", m.Phase)
	}
	return &schema.ClusterTenantMoveReply{Tenant: m.Tenant, Revision: s.revision}, nil
}

// importConflict returns the error of a chunk that names what the tenant
// holds here already, attaches a key to a lease neither the tenant nor the
// chunk holds, or gives an anonymous lease a second key. It runs before
// anything is written, so a refused chunk changes nothing.
func (s *State) importConflict(m *TenantMove) error {
	t := s.In(m.Tenant)
	// The chunk's leases, and whether each is anonymous.
	inChunk := make(map[int64]bool, len(m.Leases))
	for _, l := range m.Leases {
		if t.getLease(l.ID) != nil {
			return errf(ErrImportConflict, "move of tenant %s: lease %d is here already; nothing was changed", m.Tenant, l.ID)
		}
		inChunk[l.ID] = l.Anonymous
	}
	anonKeys := map[int64]int64{} // the chunk's keys on each lease
	for _, k := range m.Keys {
		if t.getRecord(k.Key) != nil {
			return errf(ErrImportConflict, "move of tenant %s: key %q is here already; nothing was changed", m.Tenant, k.Key)
		}
		if k.Lease == 0 {
			continue
		}
		anonymous, ok := inChunk[k.Lease]
		var held int64 // keys the lease holds here already
		if l := t.getLease(k.Lease); l != nil {
			anonymous, ok, held = l.anonymous, true, l.keyCount
		}
		if !ok {
			return errf(ErrImportConflict, "move of tenant %s: key %q names lease %d, which was not imported; nothing was changed", m.Tenant, k.Key, k.Lease)
		}
		// An anonymous lease is one key's ttl: it holds that key alone.
		if anonKeys[k.Lease]++; anonymous && held+anonKeys[k.Lease] > 1 {
			return errf(ErrImportConflict, "move of tenant %s: key %q names anonymous lease %d, which holds another key; nothing was changed", m.Tenant, k.Key, k.Lease)
		}
	}
	for _, e := range m.Idempotency {
		if _, ok := t.space.idemByKey.Get(&idemEntry{key: e.Key}); ok {
			return errf(ErrImportConflict, "move of tenant %s: idempotency key %q is here already; nothing was changed", m.Tenant, e.Key)
		}
	}
	return nil
}

// importChunk writes a chunk of a moving tenant into sp, leases first; Check
// and importConflict have refused every chunk it could not write whole. The
// keys carry the current revision, and sp's history starts there.
func (s *State) importChunk(sp *space, now int64, m *TenantMove) {
	t := s.In(sp.name)
	t.applying = false
	for _, l := range m.Leases {
		t.setLease(&lease{id: l.ID, ttl: l.TTL, deadline: now + l.RemainingMS, grantedRevision: s.revision,
			anonymous: l.Anonymous, metadata: l.Metadata})
		sp.nextLeaseID = max(sp.nextLeaseID, l.ID+1)
	}
	if len(m.Keys) > 0 && s.revision == 0 {
		// Revision 0 is the revision of a key that does not exist: a
		// compare of mod_revision with 0 must not hold for an imported
		// key. A cluster that never wrote takes revision 1 for it.
		s.revision = 1
	}
	for _, k := range m.Keys {
		rec := &record{key: k.Key, value: k.Value, createRevision: s.revision, modRevision: s.revision, version: k.Version,
			lease: k.Lease, extra: newExtra(k.ContentType, k.Metadata)}
		if k.Lease != 0 {
			t.attach(t.getLease(k.Lease), k.Key)
		}
		sp.kv.ReplaceOrInsert(rec)
		sp.valueBytes += rec.size()
	}
	for _, e := range m.Idempotency {
		sp.idemSeq++
		ie := &idemEntry{key: e.Key, hash: e.Hash, revision: s.revision, seq: sp.idemSeq, reply: e.Reply}
		sp.idemByKey.ReplaceOrInsert(ie)
		sp.idemBySeq.ReplaceOrInsert(ie)
	}
	s.leaseTotal = 0
	s.each(func(x *space) { s.leaseTotal += int64(x.leases.Len()) })
	// The keys' revision is the current one, which holds no change of
	// this space: its history starts above it.
	t.space.hist.floor = max(t.space.hist.floor, s.revision)
}

// keylessAnonymousLease returns an anonymous lease of sp without its key,
// which an import may hold between chunks but an active space may not.
func keylessAnonymousLease(sp *space) (id int64, ok bool) {
	if sp.anonymous == 0 {
		return 0, false
	}
	sp.leases.Ascend(func(l *lease) bool {
		if l.anonymous && l.keyCount == 0 {
			id, ok = l.id, true
		}
		return !ok
	})
	return id, ok
}

// coverFirstRevision keeps revision 1 accounted for after an importing
// space is dropped. An import into a cluster that never wrote takes
// revision 1 without a change in any space's log (importChunk); only the
// importing space's floor covered it, and a snapshot whose log has a
// revision no space accounts for is refused as a hole. The default
// space's floor takes it over: that space never had a change below it.
func (s *State) coverFirstRevision() {
	if s.revision == 0 {
		return
	}
	covered := false
	s.each(func(x *space) {
		if v, ok := x.hist.byRev.Min(); x.hist.floor >= 1 || (ok && v.rev == 1) {
			covered = true
		}
	})
	if d := s.spaces[DefaultTenant]; !covered && d != nil {
		d.hist.floor = 1
	}
}

// thaw moves every lease of sp later by d milliseconds.
func (s *State) thaw(sp *space, d int64) {
	if d <= 0 {
		return
	}
	t := s.In(sp.name)
	var all []*lease
	sp.leases.Ascend(func(l *lease) bool { all = append(all, l); return true })
	for _, l := range all {
		nl := *l
		nl.deadline += d
		t.setLease(&nl)
	}
}

// dropName removes name from the ordered names.
func (s *State) dropName(name string) {
	for i, n := range s.names {
		if n == name {
			s.names = append(s.names[:i:i], s.names[i+1:]...)
			return
		}
	}
}

// ExportPage is one page of a fenced tenant's space, for its move.
type ExportPage struct {
	FencedAt    int64
	To          string
	NextLeaseID int64
	Leases      []MovedLease
	Keys        []MovedKey
	Idempotency []MovedIdem
	// More says the section has more after the last item given, and Next
	// is what to ask for it after.
	More bool
	Next string
}

// Export sections.
const (
	ExportLeases      = "leases"
	ExportKeys        = "keys"
	ExportIdempotency = "idempotency"
)

// ExportTenant reads up to limit items of a section of tenant's space,
// after the given lease id, key or idempotency sequence. The tenant must be
// fenced (MoveFence), so the space no longer changes and each lease's
// remaining time is its time left at the fence.
//
// A page also ends once its keys' or entries' bytes pass maxBytes (0: no
// bound), after at least one item, so that the import of a page fits in a
// NATS message as the export did.
func (s *State) ExportTenant(tenant, section, after string, limit, maxBytes int) (*ExportPage, error) {
	if _, ok := s.spaces[tenant]; !ok {
		return nil, errf(ErrTenantUnavailable, "tenant %s is not fenced for a move here; nothing to export", tenant)
	}
	return s.In(tenant).exportSpace(section, after, limit, maxBytes)
}

// ExportTenant reads a page of the view's tenant, as State.ExportTenant
// does: a view of a fenced tenant, which no longer changes, so the pages
// are read without holding up Apply.
func (v *View) ExportTenant(section, after string, limit, maxBytes int) (*ExportPage, error) {
	return v.s.exportSpace(section, after, limit, maxBytes)
}

// exportSpace reads a page of the current space.
func (s *State) exportSpace(section, after string, limit, maxBytes int) (*ExportPage, error) {
	sp := s.space
	if sp.status != tenantMoving {
		return nil, errf(ErrTenantUnavailable, "tenant %s is not fenced for a move here; nothing to export", sp.name)
	}
	page := &ExportPage{FencedAt: sp.fencedAt, To: sp.movedTo, NextLeaseID: sp.nextLeaseID}
	bytes := 0
	full := func(n int) bool {
		if n >= limit || (maxBytes > 0 && n > 0 && bytes >= maxBytes) {
			page.More = true
			return true
		}
		return false
	}
	switch section {
	case ExportLeases:
		var from int64
		if after != "" {
			if _, err := fmt.Sscan(after, &from); err != nil {
				return nil, errf(ErrBadCommand, "after %q is not a lease id", after)
			}
		}
		sp.leases.AscendGreaterOrEqual(&lease{id: from + 1}, func(l *lease) bool {
			if full(len(page.Leases)) {
				return false
			}
			page.Leases = append(page.Leases, MovedLease{ID: l.id, TTL: l.ttl, RemainingMS: max(l.deadline-sp.fencedAt, 0),
				Anonymous: l.anonymous, Metadata: l.metadata})
			page.Next = fmt.Sprint(l.id)
			return true
		})
	case ExportKeys:
		sp.kv.AscendGreaterOrEqual(&record{key: after}, func(r *record) bool {
			if r.key == after && after != "" {
				return true
			}
			if full(len(page.Keys)) {
				return false
			}
			page.Keys = append(page.Keys, MovedKey{Key: r.key, Value: r.value, Version: r.version, Lease: r.lease,
				ContentType: r.contentType(), Metadata: r.metadata()})
			bytes += len(r.key) + int(r.size()) + len(r.contentType()) + recordOverhead
			page.Next = r.key
			return true
		})
	case ExportIdempotency:
		if sp.idemBySeq == nil {
			return nil, errf(ErrBadCommand, "a view holds no idempotency entries; read them from the state")
		}
		var from uint64
		if after != "" {
			if _, err := fmt.Sscan(after, &from); err != nil {
				return nil, errf(ErrBadCommand, "after %q is not a sequence", after)
			}
		}
		sp.idemBySeq.AscendGreaterOrEqual(&idemEntry{seq: from + 1}, func(e *idemEntry) bool {
			if full(len(page.Idempotency)) {
				return false
			}
			page.Idempotency = append(page.Idempotency, MovedIdem{Key: e.key, Hash: e.hash, Reply: e.reply})
			bytes += len(e.key) + len(e.reply) + recordOverhead
			page.Next = fmt.Sprint(e.seq)
			return true
		})
	default:
		return nil, errf(ErrBadCommand, "export section %q", section)
	}
	return page, nil
}

// tenantMove writes a move step: the tenant, the phase, where it goes,
// the counter, then the chunk's leases, keys and idempotency entries.
func (w encoder) tenantMove(m *TenantMove) encoder {
	w.bytes([]byte(m.Tenant))
	w.buf = append(w.buf, m.Phase)
	w.bytes([]byte(m.To))
	w.varint(m.NextLeaseID)
	w.uvarint(uint64(len(m.Leases)))
	for _, l := range m.Leases {
		w.varint(l.ID)
		w.varint(l.TTL)
		w.varint(l.RemainingMS)
		w.flags(l.Anonymous)
		w.bytes(l.Metadata)
	}
	w.uvarint(uint64(len(m.Keys)))
	for _, k := range m.Keys {
		w.bytes([]byte(k.Key))
		w.bytes(k.Value)
		w.varint(k.Version)
		w.varint(k.Lease)
		w.bytes([]byte(k.ContentType))
		w.bytes(k.Metadata)
	}
	w.uvarint(uint64(len(m.Idempotency)))
	for _, e := range m.Idempotency {
		w.bytes([]byte(e.Key))
		w.buf = append(w.buf, e.Hash[:]...)
		w.bytes(e.Reply)
	}
	return w
}

func (d decoder) tenantMove() (*TenantMove, decoder) {
	m := &TenantMove{Tenant: string(d.bytes()), Phase: d.flags(), To: string(d.bytes()), NextLeaseID: d.varint()}
	for n := d.count(); n > 0 && d.err == nil; n-- {
		m.Leases = append(m.Leases, MovedLease{ID: d.varint(), TTL: d.ttl(), RemainingMS: d.varint(), Anonymous: d.flags()&1 != 0, Metadata: d.json()})
	}
	for n := d.count(); n > 0 && d.err == nil; n-- {
		m.Keys = append(m.Keys, MovedKey{Key: string(d.bytes()), Value: d.json(), Version: d.varint(), Lease: d.varint(),
			ContentType: string(d.bytes()), Metadata: d.json()})
	}
	for n := d.count(); n > 0 && d.err == nil; n-- {
		e := MovedIdem{Key: string(d.bytes())}
		if len(d.buf) < len(e.Hash) {
			d.fail("idempotency hash")
			break
		}
		copy(e.Hash[:], d.buf)
		d.buf = d.buf[len(e.Hash):]
		e.Reply = d.json()
		m.Idempotency = append(m.Idempotency, e)
	}
	if d.err == nil {
		d.err = m.Check()
	}
	return m, d
}
