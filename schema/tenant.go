package schema

// Tenants (docs/tenancy.md): the operator's view of every tenant, and the
// quotas tenants are held to. Both are cluster endpoints, for Concord's own
// account.

// TenantQuota is what a tenant may hold; a zero field is no bound.
type TenantQuota struct {
	// Leases bounds the tenant's leases, anonymous ones included.
	Leases int64 `json:"leases"`
	// Keys bounds its keys.
	Keys int64 `json:"keys"`
	// ValueBytes bounds the bytes of its values and their metadata.
	ValueBytes int64 `json:"value_bytes"`
	// KeepAliveMany bounds the leases one keepalive_many may list.
	KeepAliveMany int64 `json:"keepalive_many"`
	// RequestsPerSecond bounds the requests the leader takes from the
	// tenant each second, with bursts of as many.
	RequestsPerSecond int64 `json:"requests_per_second"`
}

// QuotaDefaultTenant names, in a quota request, the quota of every tenant
// that has none of its own.
const QuotaDefaultTenant = "*"

// TenantUsage is what one tenant holds, and the quota it is held to.
type TenantUsage struct {
	// Tenant is the tenant's NATS account; "" is Concord's own account,
	// the default tenant.
	Tenant          string `json:"tenant"`
	Keys            int64  `json:"keys"`
	Leases          int64  `json:"leases"`
	AnonymousLeases int64  `json:"anonymous_leases"`
	ValueBytes      int64  `json:"value_bytes"`
	// HistoryChanges counts the changes its history holds, and
	// CompactRevision is its history's floor.
	HistoryChanges  int64 `json:"history_changes"`
	CompactRevision int64 `json:"compact_revision"`
	// Quota is the quota it is held to (its own or the default one);
	// absent for the default tenant, which has none.
	Quota *TenantQuota `json:"quota,omitempty"`
}

// ClusterTenantsRequest is the body of P.cluster.tenants.
type ClusterTenantsRequest struct {
	// Tenant, when set, asks for that tenant alone; "" asks for all.
	Tenant string `json:"tenant,omitempty"`
}

// ClusterTenantsReply answers P.cluster.tenants: every tenant that has
// written, the default one first, then by name.
type ClusterTenantsReply struct {
	Revision int64         `json:"revision"`
	Tenants  []TenantUsage `json:"tenants"`
	// DefaultQuota is the quota of tenants without their own, when set.
	DefaultQuota *TenantQuota `json:"default_quota,omitempty"`
}

// ClusterQuotaRequest is the body of P.cluster.quota: set a tenant's quota
// (or QuotaDefaultTenant's), or with Clear remove the tenant's own.
type ClusterQuotaRequest struct {
	Tenant string `json:"tenant"`
	// The quota's fields, as in TenantQuota (which Quota returns); left
	// out, a field is 0, no bound.
	Leases            int64 `json:"leases,omitempty"`
	Keys              int64 `json:"keys,omitempty"`
	ValueBytes        int64 `json:"value_bytes,omitempty"`
	KeepAliveMany     int64 `json:"keepalive_many,omitempty"`
	RequestsPerSecond int64 `json:"requests_per_second,omitempty"`
	Clear             bool  `json:"clear,omitempty"`
}

// Quota returns the quota the request sets.
func (r *ClusterQuotaRequest) Quota() TenantQuota {
	return TenantQuota{Leases: r.Leases, Keys: r.Keys, ValueBytes: r.ValueBytes, KeepAliveMany: r.KeepAliveMany, RequestsPerSecond: r.RequestsPerSecond}
}

// ClusterQuotaReply answers P.cluster.quota with the quota the tenant is
// now held to.
type ClusterQuotaReply struct {
	Tenant   string      `json:"tenant"`
	Quota    TenantQuota `json:"quota"`
	Revision int64       `json:"revision"`
}
