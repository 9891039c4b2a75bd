package schema

import "encoding/json"

// LeaseGrantRequest is the body of P.lease.grant.
type LeaseGrantRequest struct {
	// TTL is the lease's time to live in whole seconds.
	TTL int64 `json:"ttl"`
	// ID requests a specific lease id; 0 or absent lets the server choose.
	ID int64 `json:"id,omitempty"`
	// Metadata is an optional JSON object kept with the lease for operators.
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// LeaseGrantReply answers P.lease.grant.
type LeaseGrantReply struct {
	ID       int64 `json:"id"`
	TTL      int64 `json:"ttl"`
	Revision int64 `json:"revision"`
}

// LeaseKeepAliveRequest is the body of P.lease.keepalive.
type LeaseKeepAliveRequest struct {
	ID int64 `json:"id"`
	// TTL, when set, replaces the lease's ttl from this renewal on.
	TTL *int64 `json:"ttl,omitempty"`
}

// LeaseKeepAliveReply answers P.lease.keepalive.
type LeaseKeepAliveReply struct {
	ID           int64 `json:"id"`
	TTL          int64 `json:"ttl"`
	RemainingTTL int64 `json:"remaining_ttl"`
	RemainingMS  int64 `json:"remaining_ms"`
}

// LeaseRevokeRequest is the body of P.lease.revoke.
type LeaseRevokeRequest struct {
	ID int64 `json:"id"`
}

// LeaseRevokeReply answers P.lease.revoke: the revision of the deletes (the
// current revision when the lease had no keys) and how many keys went.
type LeaseRevokeReply struct {
	Revision int64 `json:"revision"`
	Deleted  int64 `json:"deleted"`
}

// LeaseInfoRequest is the body of P.lease.info.
type LeaseInfoRequest struct {
	ID int64 `json:"id"`
	// Keys asks for the attached keys, sorted.
	Keys bool `json:"keys,omitempty"`
}

// LeaseInfo describes one lease; it answers P.lease.info.
type LeaseInfo struct {
	ID              int64           `json:"id"`
	TTL             int64           `json:"ttl"`
	RemainingTTL    int64           `json:"remaining_ttl"`
	RemainingMS     int64           `json:"remaining_ms"`
	GrantedRevision int64           `json:"granted_revision"`
	Anonymous       bool            `json:"anonymous"`
	Metadata        json.RawMessage `json:"metadata"`
	KeyCount        int64           `json:"key_count"`
	Keys            []string        `json:"keys,omitempty"`
}

// LeaseListRequest is the body of P.lease.list.
type LeaseListRequest struct {
	IncludeAnonymous bool `json:"include_anonymous,omitempty"`
	// Limit bounds the number of leases returned; 0 means the default.
	Limit int `json:"limit,omitempty"`
	// After continues a listing after this lease id.
	After int64 `json:"after,omitempty"`
}

// LeaseListReply answers P.lease.list, in ascending id order.
type LeaseListReply struct {
	Leases []LeaseInfo `json:"leases"`
	More   bool        `json:"more"`
}

// LeaseKeepAliveManyRequest is the body of P.lease.keepalive_many: one
// renewal for many leases.
type LeaseKeepAliveManyRequest struct {
	IDs []int64 `json:"ids"`
}

// LeaseKeepAliveManyReply answers P.lease.keepalive_many: the renewed
// leases, in request order, and the ids that were not found (expired,
// revoked, never granted, or anonymous).
type LeaseKeepAliveManyReply struct {
	Leases   []LeaseKeepAliveReply `json:"leases"`
	NotFound []int64               `json:"not_found"`
}
