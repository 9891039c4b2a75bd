package decode

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"

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

// MaxExportLimit bounds a page of a tenant's export; DefaultExportLimit
// is a page's size when the request gives none.
const (
	MaxExportLimit     = 10000
	DefaultExportLimit = 1000
)

// TenantExport decodes a P.cluster.tenant.export body.
func (d *Decoder) TenantExport(data []byte) (schema.ClusterTenantExportRequest, *schema.Error) {
	var req schema.ClusterTenantExportRequest
	if e := Strict(data, &req); e != nil {
		return req, e
	}
	if e := checkMoveTenant(req.Tenant); e != nil {
		return req, e
	}
	switch req.Section {
	case schema.ExportLeases, schema.ExportKeys, schema.ExportIdempotency:
	default:
		return req, Invalid("section must be %q, %q or %q, not %q", schema.ExportLeases, schema.ExportKeys, schema.ExportIdempotency, shorten(req.Section))
	}
	switch {
	case req.Limit == 0:
		req.Limit = DefaultExportLimit
	case req.Limit < 0 || req.Limit > MaxExportLimit:
		return req, Invalid("limit must be from 1 to %d, not %d", MaxExportLimit, req.Limit)
	}
	return req, nil
}

// TenantMove decodes a P.cluster.tenant.move body into its command: the
// phase's fields, a chunk's leases, keys and idempotency entries checked
// as the state machine and the snapshot need them.
func (d *Decoder) TenantMove(data []byte) (*fsm.TenantMove, *schema.Error) {
	var req schema.ClusterTenantMoveRequest
	if e := Strict(data, &req); e != nil {
		return nil, e
	}
	if e := checkMoveTenant(req.Tenant); e != nil {
		return nil, e
	}
	phases := map[string]byte{schema.MoveFence: fsm.MoveFence, schema.MoveImport: fsm.MoveImport,
		schema.MoveActivate: fsm.MoveActivate, schema.MoveFinish: fsm.MoveFinish, schema.MoveAbort: fsm.MoveAbort}
	phase, ok := phases[req.Phase]
	if !ok {
		return nil, Invalid("phase must be fence, import, activate, finish or abort, not %q", shorten(req.Phase))
	}
	chunk := len(req.Leases) + len(req.Keys) + len(req.Idempotency)
	switch {
	case phase == fsm.MoveFence && !validSubjectPrefix(req.To):
		return nil, Invalid("to must name the target cluster's subject prefix, not %q", shorten(req.To))
	case phase != fsm.MoveFence && req.To != "":
		return nil, Invalid("to belongs to the fence")
	case phase != fsm.MoveImport && chunk > 0:
		return nil, Invalid("leases, keys and idempotency belong to an import")
	case phase != fsm.MoveActivate && req.NextLeaseID != 0:
		return nil, Invalid("next_lease_id belongs to the activation")
	case req.NextLeaseID < 0 || req.NextLeaseID > fsm.MaxLeaseID+1:
		return nil, Invalid("next_lease_id must be from 0 to %d, not %d", int64(fsm.MaxLeaseID+1), req.NextLeaseID)
	}
	m := &fsm.TenantMove{Tenant: req.Tenant, Phase: phase, To: req.To, NextLeaseID: req.NextLeaseID}
	for i, l := range req.Leases {
		if l.ID < 1 || l.ID > fsm.MaxLeaseID || l.TTL < 1 || l.TTL > schema.MaxTTL || l.RemainingMS < 0 || l.RemainingMS > schema.MaxTTL*1000 {
			return nil, Invalid("leases[%d]: id must be from 1 to %d, ttl from 1 to %d and remaining_ms from 0 to %d", i, int64(fsm.MaxLeaseID), schema.MaxTTL, schema.MaxTTL*1000)
		}
		meta, e := compactObject(fmt.Sprintf("leases[%d].metadata", i), l.Metadata, d.maxMetadataBytes)
		if e != nil {
			return nil, e
		}
		m.Leases = append(m.Leases, fsm.MovedLease{ID: l.ID, TTL: l.TTL, RemainingMS: l.RemainingMS, Anonymous: l.Anonymous, Metadata: meta})
	}
	for i, k := range req.Keys {
		if err := subjects.ValidateKey(k.Key, d.maxKeyBytes); err != nil {
			return nil, Invalid("keys[%d].key %v", i, err)
		}
		if k.Version < 1 || k.Version > schema.MaxRevision || k.Lease < 0 || k.Lease > fsm.MaxLeaseID {
			return nil, Invalid("keys[%d]: version must be from 1 to %d and lease from 0 to %d", i, int64(schema.MaxRevision), int64(fsm.MaxLeaseID))
		}
		value, e := compactField(fmt.Sprintf("keys[%d].value", i), k.Value)
		if e != nil {
			return nil, e
		}
		if len(value) > d.maxValueBytes {
			return nil, tooLarge(fmt.Sprintf("keys[%d].value", i), len(value), d.maxValueBytes)
		}
		meta, e := compactObject(fmt.Sprintf("keys[%d].metadata", i), k.Metadata, d.maxMetadataBytes)
		if e != nil {
			return nil, e
		}
		m.Keys = append(m.Keys, fsm.MovedKey{Key: k.Key, Value: value, Version: k.Version, Lease: k.Lease, ContentType: k.ContentType, Metadata: meta})
	}
	for i, e := range req.Idempotency {
		var h [32]byte
		if n, err := hex.Decode(h[:], []byte(e.Hash)); err != nil || n != len(h) || len(e.Hash) != 2*len(h) {
			return nil, Invalid("idempotency[%d].hash must be 64 lowercase hexadecimal digits", i)
		}
		reply, err := compactObject(fmt.Sprintf("idempotency[%d].reply", i), e.Reply, 1<<30)
		if err != nil {
			return nil, err
		}
		if e.Key == "" || len(reply) == 0 {
			return nil, Invalid("idempotency[%d] needs a key and a reply", i)
		}
		m.Idempotency = append(m.Idempotency, fsm.MovedIdem{Key: e.Key, Hash: h, Reply: reply})
	}
	// What is left for Check is a name given twice in one chunk.
	if err := m.Check(); err != nil {
		return nil, Invalid("%v", err)
	}
	return m, nil
}

// validSubjectPrefix reports whether p is a cluster's subject prefix.
func validSubjectPrefix(p string) bool {
	_, err := subjects.New(p)
	return p != "" && err == nil
}

func checkMoveTenant(tenant string) *schema.Error {
	if tenant == "" || fsm.ValidateTenant(tenant) != nil {
		return Invalid("tenant %q is not a NATS account name (a subject token: printable ASCII without '.', '*' or '>', at most %d bytes)", shorten(tenant), fsm.MaxTenantBytes)
	}
	return nil
}

// compactField returns a JSON value, compact; it must be there.
func compactField(field string, raw json.RawMessage) (json.RawMessage, *schema.Error) {
	var buf bytes.Buffer
	if len(raw) == 0 || json.Compact(&buf, raw) != nil {
		return nil, Invalid("%s must be a JSON value", field)
	}
	return buf.Bytes(), nil
}

// compactObject returns an optional JSON object, compact, of at most max
// bytes; nil when absent.
func compactObject(field string, raw json.RawMessage, max int) (json.RawMessage, *schema.Error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	v, e := compactField(field, raw)
	if e != nil {
		return nil, e
	}
	if v[0] != '{' {
		return nil, Invalid("%s must be a JSON object", field)
	}
	if len(v) > max {
		return nil, tooLarge(field, len(v), max)
	}
	return v, nil
}
