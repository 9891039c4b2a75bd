package schema

import "encoding/json"

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

// Moving a tenant between clusters (concord tenant move drives these).

// Move phases, the phase field of a P.cluster.tenant.move request.
const (
	MoveFence    = "fence"
	MoveImport   = "import"
	MoveActivate = "activate"
	MoveFinish   = "finish"
	MoveAbort    = "abort"
)

// MovedLease is a lease as it moves: its time left at the fence.
type MovedLease struct {
	ID          int64           `json:"id"`
	TTL         int64           `json:"ttl"`
	RemainingMS int64           `json:"remaining_ms"`
	Anonymous   bool            `json:"anonymous,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
}

// MovedKey is a key as it moves; on the target it carries the revision of
// its import.
type MovedKey struct {
	Key         string          `json:"key"`
	Value       json.RawMessage `json:"value"`
	Version     int64           `json:"version"`
	Lease       int64           `json:"lease,omitempty"`
	ContentType string          `json:"content_type,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
}

// MovedIdem is an idempotency entry as it moves: the request's key, the
// SHA-256 of the request (hex) and the reply it got.
type MovedIdem struct {
	Key   string          `json:"key"`
	Hash  string          `json:"hash"`
	Reply json.RawMessage `json:"reply"`
}

// ClusterTenantMoveRequest is the body of P.cluster.tenant.move: one step
// of a tenant's move (docs/tenancy.md).
type ClusterTenantMoveRequest struct {
	Tenant string `json:"tenant"`
	Phase  string `json:"phase"`
	// To is the target's subject prefix (fence).
	To string `json:"to,omitempty"`
	// NextLeaseID keeps the target's lease counter past the source's
	// (activate).
	NextLeaseID int64 `json:"next_lease_id,omitempty"`
	// The chunk of an import.
	Leases      []MovedLease `json:"leases,omitempty"`
	Keys        []MovedKey   `json:"keys,omitempty"`
	Idempotency []MovedIdem  `json:"idempotency,omitempty"`
}

// ClusterTenantMoveReply answers a move step with the revision after it.
type ClusterTenantMoveReply struct {
	Tenant   string `json:"tenant"`
	Revision int64  `json:"revision"`
}

// Export sections, the section field of a P.cluster.tenant.export request.
const (
	ExportLeases      = "leases"
	ExportKeys        = "keys"
	ExportIdempotency = "idempotency"
)

// ClusterTenantExportRequest is the body of P.cluster.tenant.export: a page
// of one section of a fenced tenant's space.
type ClusterTenantExportRequest struct {
	Tenant  string `json:"tenant"`
	Section string `json:"section"`
	// After continues a section after the item of this cursor (the
	// previous page's next).
	After string `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// ClusterTenantExportReply is a page of a fenced tenant's space.
type ClusterTenantExportReply struct {
	Tenant string `json:"tenant"`
	// To is where the tenant moves; FencedAt the lease-clock time of the
	// fence, at which the leases' remaining times are taken.
	To          string       `json:"to"`
	FencedAt    int64        `json:"fenced_at"`
	NextLeaseID int64        `json:"next_lease_id"`
	Leases      []MovedLease `json:"leases,omitempty"`
	Keys        []MovedKey   `json:"keys,omitempty"`
	Idempotency []MovedIdem  `json:"idempotency,omitempty"`
	More        bool         `json:"more"`
	Next        string       `json:"next,omitempty"`
}
