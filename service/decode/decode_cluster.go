package decode

import (
	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/datadir"
	"github.com/concord-io/concord/subjects"
)

// Join decodes a P.cluster.Join body: a valid node id and the Raft
// address the leader reaches the joining node at.
func (d *Decoder) Join(data []byte) (schema.ClusterJoinRequest, *schema.Error) {
	var req schema.ClusterJoinRequest
	if e := Strict(data, &req); e != nil {
		return req, e
	}
	if err := subjects.ValidateNodeID(req.ID); err != nil {
		return req, Invalid("id: the %v", err)
	}
	if req.Address == "" {
		return req, Invalid("address is required: the Raft address (host:port) the leader reaches the joining node at")
	}
	return req, nil
}

// Remove decodes a P.cluster.Remove body: a valid node id.
func (d *Decoder) Remove(data []byte) (schema.ClusterRemoveRequest, *schema.Error) {
	var req schema.ClusterRemoveRequest
	if e := Strict(data, &req); e != nil {
		return req, e
	}
	if err := subjects.ValidateNodeID(req.ID); err != nil {
		return req, Invalid("id: the %v", err)
	}
	return req, nil
}

// BackupChunk decodes a P.cluster.backup.chunk body: a backup id as
// cluster.backup returned it, and an offset and length that are not
// negative.
func (d *Decoder) BackupChunk(data []byte) (schema.ClusterBackupChunkRequest, *schema.Error) {
	var req schema.ClusterBackupChunkRequest
	if e := Strict(data, &req); e != nil {
		return req, e
	}
	if !datadir.ValidID(req.ID) {
		return req, Invalid("id must be a backup id of 16 lowercase hexadecimal digits, as cluster.backup returned it, not %q", shorten(req.ID))
	}
	if req.Offset < 0 {
		return req, Invalid("offset must be 0 or more, not %d", req.Offset)
	}
	if req.Length < 0 {
		return req, Invalid("length must be 0 or more, not %d", req.Length)
	}
	return req, nil
}

// Tenants decodes a P.cluster.tenants body: at most a tenant's name.
func (d *Decoder) Tenants(data []byte) (schema.ClusterTenantsRequest, *schema.Error) {
	var req schema.ClusterTenantsRequest
	if e := Strict(data, &req); e != nil {
		return req, e
	}
	if req.Tenant != "" {
		if err := fsm.ValidateTenant(req.Tenant); err != nil {
			return req, Invalid("tenant %q is not a NATS account name (a subject token: printable ASCII without '.', '*' or '>', at most %d bytes)", shorten(req.Tenant), fsm.MaxTenantBytes)
		}
	}
	return req, nil
}

// Quota decodes a P.cluster.quota body into the command that sets it: a
// tenant (or "*"), quota fields of 0 or more, and none with clear.
func (d *Decoder) Quota(data []byte) (*fsm.SetQuota, *schema.Error) {
	var req schema.ClusterQuotaRequest
	if e := Strict(data, &req); e != nil {
		return nil, e
	}
	switch {
	case req.Tenant == "":
		return nil, Invalid("tenant is required: a tenant's NATS account name, or %q for the quota of every tenant without its own", schema.QuotaDefaultTenant)
	case fsm.ValidateQuotaTenant(req.Tenant) != nil:
		return nil, Invalid("tenant %q is not a NATS account name (a subject token: printable ASCII without '.', '*' or '>', at most %d bytes), nor %q", shorten(req.Tenant), fsm.MaxTenantBytes, schema.QuotaDefaultTenant)
	}
	q := req.Quota()
	fields := []struct {
		name string
		v    int64
	}{{"leases", q.Leases}, {"keys", q.Keys}, {"value_bytes", q.ValueBytes}, {"keepalive_many", q.KeepAliveMany}, {"requests_per_second", q.RequestsPerSecond}}
	for _, f := range fields {
		if f.v < 0 || f.v > schema.MaxRevision {
			return nil, Invalid("%s must be from 0 (no bound) to %d, not %d", f.name, int64(schema.MaxRevision), f.v)
		}
		if req.Clear && f.v != 0 {
			return nil, Invalid("clear removes the tenant's own quota: give no %s with it", f.name)
		}
	}
	return &fsm.SetQuota{Tenant: req.Tenant, Clear: req.Clear, Quota: fsm.Quota{Leases: q.Leases, Keys: q.Keys, ValueBytes: q.ValueBytes,
		KeepAliveMany: q.KeepAliveMany, RequestsPerSecond: q.RequestsPerSecond}}, nil
}
