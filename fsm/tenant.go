package fsm

import (
	"fmt"
	"slices"

	"github.com/google/btree"
)

// Tenants. Each tenant (a NATS account, named by the service) has a space
// of its own: its keys, leases, attachments, deadlines, history and
// idempotency cache are separate trees, and its lease ids are counted
// from 1 on their own. A command names its tenant (Command.Tenant) and is
// applied in that tenant's space alone, so no key, range, lease id,
// compare or idempotency key of one tenant can name anything of another:
// the separation is in the data structure, not in a check a new field
// could forget. The revision, the lease clock and the limits are the
// cluster's, shared by every tenant.
//
// The default tenant is "" (requests from Concord's own account, which is
// every deployment without tenants). Its space always exists; a tenant's
// space is made by the first command that names it and stays, empty or
// not, so that its lease ids are never handed out twice.

// DefaultTenant is the tenant of requests from Concord's own account.
const DefaultTenant = ""

// MaxTenantBytes bounds a tenant name. A NATS account name is a single
// subject token; an operator-mode account is a 56-character public key.
const MaxTenantBytes = 128

// space is one tenant's part of the state.
type space struct {
	name     string
	kv       *btree.BTreeG[*record]
	leases   *btree.BTreeG[*lease]
	attached *btree.BTreeG[attachment]
	expiry   *btree.BTreeG[deadlineEntry]

	// The idempotency cache, by key and by insertion order.
	idemByKey *btree.BTreeG[*idemEntry]
	idemBySeq *btree.BTreeG[*idemEntry]
	idemSeq   uint64
	// hist is the retained past of the space's keys (history.go).
	hist history

	nextLeaseID int64
	anonymous   int64
	// valueBytes is the size of the space's records (record.size), for
	// the ValueBytes quota: derived, rebuilt on restore.
	valueBytes int64
	// status says whether the tenant is served here (move.go): while it
	// moves to movedTo, since fencedAt (lease clock), its leases are
	// frozen.
	status   byte
	movedTo  string
	fencedAt int64
}

func newSpace(name string) *space {
	byKey, bySeq := newIdemTrees()
	return &space{
		name:        name,
		idemByKey:   byKey,
		idemBySeq:   bySeq,
		hist:        newHistory(),
		kv:          btree.NewG(btreeDegree, func(a, b *record) bool { return a.key < b.key }),
		leases:      btree.NewG(btreeDegree, func(a, b *lease) bool { return a.id < b.id }),
		attached:    btree.NewG(btreeDegree, lessAttachment),
		expiry:      btree.NewG(btreeDegree, lessDeadline),
		nextLeaseID: 1,
	}
}

// ValidateTenant checks a tenant name: at most MaxTenantBytes of printable
// ASCII without space, '.', '*' or '>' (a NATS subject token, which an
// account name is).
func ValidateTenant(name string) error {
	if len(name) > MaxTenantBytes {
		return fmt.Errorf("%w: tenant name is %d bytes long, more than the %d allowed", ErrBadCommand, len(name), MaxTenantBytes)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c > '~' || c == '.' || c == '*' || c == '>' {
			return fmt.Errorf("%w: tenant name %q is not a NATS subject token", ErrBadCommand, name)
		}
	}
	return nil
}

// enter makes the space of tenant the current one, making it if it does
// not exist. It is called by ApplyCommand only, so a space exists exactly
// when a command named its tenant.
func (s *State) enter(tenant string) {
	sp, ok := s.spaces[tenant]
	if !ok {
		sp = newSpace(tenant)
		s.addSpace(sp)
	}
	s.space = sp
	s.quota = s.QuotaOf(tenant)
}

// addSpace adds a new space, keeping names in order.
func (s *State) addSpace(sp *space) {
	s.spaces[sp.name] = sp
	i, _ := slices.BinarySearch(s.names, sp.name)
	s.names = slices.Insert(s.names, i, sp.name)
}

// leave goes back to the default space.
func (s *State) leave() { s.space, s.quota = s.spaces[DefaultTenant], Quota{} }

// In returns the state as tenant sees it: a copy whose current space is
// the tenant's (an empty one when the tenant has never written), for the
// reads. It shares the trees, so it is read where s is (under the lock
// Apply excludes) and never applied to.
func (s *State) In(tenant string) *State {
	c := *s
	c.applying = false
	if sp, ok := s.spaces[tenant]; ok {
		c.space = sp
	} else {
		c.space = newSpace(tenant)
	}
	return &c
}

// Tenant returns the name of the tenant whose space s reads.
func (s *State) Tenant() string { return s.name }

// Tenants returns the tenants with a space, the default one first, in
// name order.
func (s *State) Tenants() []string { return slices.Clone(s.names) }

// TenantUsage is what one tenant holds, and the quota it is held to.
type TenantUsage struct {
	Tenant          string
	Keys            int64
	Leases          int64
	AnonymousLeases int64
	ValueBytes      int64
	HistoryChanges  int64
	CompactRevision int64
	Quota           Quota
}

// Usage returns what the current space holds.
func (s *State) Usage() TenantUsage { return s.space.usage(s.QuotaOf(s.name)) }

// Usages returns what every tenant holds, the default tenant first, then
// by name.
func (s *State) Usages() []TenantUsage {
	out := make([]TenantUsage, 0, len(s.names))
	s.each(func(sp *space) { out = append(out, sp.usage(s.QuotaOf(sp.name))) })
	return out
}

// usage is what sp holds, with the quota its tenant is held to.
func (sp *space) usage(q Quota) TenantUsage {
	return TenantUsage{Tenant: sp.name, Keys: int64(sp.kv.Len()), Leases: int64(sp.leases.Len()) - sp.anonymous,
		AnonymousLeases: sp.anonymous, ValueBytes: sp.valueBytes, HistoryChanges: int64(sp.hist.byRev.Len()),
		CompactRevision: sp.hist.floor, Quota: q}
}

// each calls f with every space, in name order.
func (s *State) each(f func(sp *space)) {
	for _, n := range s.names {
		f(s.spaces[n])
	}
}
