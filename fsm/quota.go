package fsm

import (
	"errors"
	"fmt"

	"github.com/concord-io/concord/schema"
)

// Quotas bound what a tenant may hold. They are replicated state, set by a
// command (SetQuota), so every replica refuses exactly the same requests:
// a quota read from each node's own file could differ between nodes, and
// the replicas would then apply different logs. The default tenant,
// Concord's own account, has none: it is bounded by Limits alone.

// QuotaDefault names, in SetQuota, the quota of every tenant that has
// none of its own.
const QuotaDefault = "*"

// Quota is what one tenant may hold; a zero field is no bound.
type Quota struct {
	// Leases bounds the tenant's leases, anonymous ones included; Keys
	// its keys; ValueBytes the bytes of its values and their metadata.
	Leases, Keys, ValueBytes int64
	// KeepAliveMany bounds the leases one keepalive_many may list.
	KeepAliveMany int64
	// RequestsPerSecond is enforced by the leader, not here: a rate
	// concerns time, which the state machine does not read. It is kept
	// here so that every leader enforces the same one.
	RequestsPerSecond int64
}

// SetQuota sets a tenant's quota, or QuotaDefault's; Clear removes the
// tenant's own, which then falls back to QuotaDefault's.
type SetQuota struct {
	Tenant string
	Quota  Quota
	Clear  bool
}

// ValidateQuotaTenant checks the tenant a quota names: a tenant other than
// the default one, or QuotaDefault.
func ValidateQuotaTenant(name string) error {
	if name == QuotaDefault {
		return nil
	}
	if name == DefaultTenant {
		return fmt.Errorf("%w: the default tenant has no quota; it is bounded by the cluster's limits", ErrBadCommand)
	}
	return ValidateTenant(name)
}

func (q Quota) fields() []int64 {
	return []int64{q.Leases, q.Keys, q.ValueBytes, q.KeepAliveMany, q.RequestsPerSecond}
}

func quotaOf(f []int64) Quota {
	return Quota{Leases: f[0], Keys: f[1], ValueBytes: f[2], KeepAliveMany: f[3], RequestsPerSecond: f[4]}
}

// QuotaOf returns the quota tenant is held to: its own, or the default
// one; none for the default tenant.
func (s *State) QuotaOf(tenant string) Quota { return quotaIn(s.quotas, tenant) }

// quotaIn is the quota tenant is held to under quotas.
func quotaIn(quotas map[string]Quota, tenant string) Quota {
	if tenant == DefaultTenant || len(quotas) == 0 {
		return Quota{}
	}
	if q, ok := quotas[tenant]; ok {
		return q
	}
	return quotas[QuotaDefault]
}

// TenantPolicy is what the edge checks of a tenant's request before it
// takes a worker's time: the tenant's quota (its rate) and whether it is
// served here. It is taken from the state after the commands that change
// it (SetQuota, TenantMove) and never changes, so the edge reads it
// without the state's lock, which Apply holds while it applies.
type TenantPolicy struct {
	quotas   map[string]Quota
	refusals map[string]error
}

// TenantPolicy returns the policy of the state as it stands.
func (s *State) TenantPolicy() *TenantPolicy {
	p := &TenantPolicy{quotas: s.quotas}
	s.each(func(sp *space) {
		if sp.status != tenantActive {
			if p.refusals == nil {
				p.refusals = map[string]error{}
			}
			p.refusals[sp.name] = s.In(sp.name).tenantRefusal()
		}
	})
	return p
}

// QuotaOf returns the quota tenant is held to, as State.QuotaOf does.
func (p *TenantPolicy) QuotaOf(tenant string) Quota { return quotaIn(p.quotas, tenant) }

// Refusal returns the error a request of tenant gets because the tenant
// moves or moved, as State.TenantRefusal does, or nil.
func (p *TenantPolicy) Refusal(tenant string) error { return p.refusals[tenant] }

// ChangesTenantPolicy reports whether a command of op may change the
// tenant policy.
func ChangesTenantPolicy(op Op) bool { return op == OpSetQuota || op == OpTenantMove }

// Quotas returns the quotas set, by tenant (QuotaDefault included).
func (s *State) Quotas() map[string]Quota {
	out := make(map[string]Quota, len(s.quotas))
	for k, v := range s.quotas {
		out[k] = v
	}
	return out
}

// check refuses a SetQuota no replica may apply. Decode calls it, so an
// entry that decodes always applies.
func (q *SetQuota) check() error {
	if err := ValidateQuotaTenant(q.Tenant); err != nil {
		return err
	}
	for _, v := range q.Quota.fields() {
		if v < 0 {
			return errors.New("a negative quota")
		}
	}
	return nil
}

func (s *State) setQuota(_ int64, q *SetQuota) (any, error) {
	// A new map, never a change to the old: views and snapshots share
	// the map they were taken with.
	quotas := make(map[string]Quota, len(s.quotas)+1)
	for k, v := range s.quotas {
		quotas[k] = v
	}
	if q.Clear {
		delete(quotas, q.Tenant)
	} else {
		quotas[q.Tenant] = q.Quota
	}
	s.quotas = quotas
	held := s.quotas[QuotaDefault]
	if q.Tenant != QuotaDefault {
		held = s.QuotaOf(q.Tenant)
	}
	return &schema.ClusterQuotaReply{Tenant: q.Tenant, Quota: held.Wire(), Revision: s.revision}, nil
}

// Wire returns the quota as replies carry it.
func (q Quota) Wire() schema.TenantQuota {
	return schema.TenantQuota{Leases: q.Leases, Keys: q.Keys, ValueBytes: q.ValueBytes, KeepAliveMany: q.KeepAliveMany,
		RequestsPerSecond: q.RequestsPerSecond}
}

// TenantReport reports what every tenant holds (or tenant alone, when not
// ""), the default tenant first: the operator's view.
func (s *State) TenantReport(tenant string) *schema.ClusterTenantsReply {
	reply := &schema.ClusterTenantsReply{Revision: s.revision, Tenants: []schema.TenantUsage{}}
	if q, ok := s.quotas[QuotaDefault]; ok {
		w := q.Wire()
		reply.DefaultQuota = &w
	}
	for _, name := range s.names {
		if tenant != "" && name != tenant {
			continue
		}
		u := s.spaces[name].usage(s.QuotaOf(name))
		wu := schema.TenantUsage{Tenant: name, Keys: u.Keys, Leases: u.Leases, AnonymousLeases: u.AnonymousLeases,
			ValueBytes: u.ValueBytes, HistoryChanges: u.HistoryChanges, CompactRevision: u.CompactRevision}
		if name != DefaultTenant {
			w := u.Quota.Wire()
			wu.Quota = &w
		}
		reply.Tenants = append(reply.Tenants, wu)
	}
	return reply
}

// The checks, made before a command changes anything. s.quota is the
// quota of the tenant whose command is being applied (enter).

func (s *State) checkLeaseQuota() error {
	if q := s.quota.Leases; q > 0 && int64(s.leases.Len()) >= q {
		return errf(ErrLimitExceeded, "tenant %s is at its quota of %d leases (%d in use)", s.name, q, s.leases.Len())
	}
	return nil
}

// checkPutQuota checks a put of value bytes that replaces old (nil for a
// new key).
func (s *State) checkPutQuota(old *record, bytes int64) error {
	if q := s.quota.Keys; q > 0 && old == nil && int64(s.kv.Len()) >= q {
		return errf(ErrLimitExceeded, "tenant %s is at its quota of %d keys (%d in use)", s.name, q, s.kv.Len())
	}
	if q := s.quota.ValueBytes; q > 0 {
		after := s.valueBytes + bytes
		if old != nil {
			after -= old.size()
		}
		if after > q && after > s.valueBytes {
			return errf(ErrLimitExceeded, "tenant %s's values would take %d bytes, over its quota of %d bytes (%d in use)", s.name, after, q, s.valueBytes)
		}
	}
	return nil
}

func (s *State) checkKeepAliveManyQuota(n int) error {
	if q := s.quota.KeepAliveMany; q > 0 && int64(n) > q {
		return errf(ErrTooLarge, "tenant %s may renew at most %d leases in one keepalive_many (its quota); this one lists %d", s.name, q, n)
	}
	return nil
}

// size is what a record counts toward its tenant's ValueBytes.
func (r *record) size() int64 { return int64(len(r.value) + len(r.metadata())) }
